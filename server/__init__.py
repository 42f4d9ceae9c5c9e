"""omp A2A bridge: an MCP server that exposes this machine's tools to remote agents.

Everything in this package runs without a screen; the tray UI lives in ``tray`` and talks to
the bridge only through :class:`server.core.runner.BridgeRunner`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

APP_NAME = "omp-a2a-bridge"

if TYPE_CHECKING:
    __version__: str


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use: ``importlib.metadata`` costs 30–50 ms to
    import, which every short command (``a2a-bridge audit``) would otherwise pay for nothing."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("omp-a2a-bridge")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        version = "0.0.0+src"
    globals()["__version__"] = version
    return version
