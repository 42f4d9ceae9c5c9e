"""omp A2A bridge: an MCP server that exposes this machine's tools to remote agents.

Everything in this package runs without a screen; the tray UI lives in ``tray`` and talks to
the bridge only through :class:`server.core.runner.BridgeRunner`.
"""

from importlib import metadata

try:
    __version__ = metadata.version("omp-a2a-bridge")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+src"

APP_NAME = "omp-a2a-bridge"
