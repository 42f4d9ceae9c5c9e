"""The in-process bridge for a front end that runs it itself (the tray): :func:`local_bridge`.

Why apart from :mod:`server.api`: the API module is vocabulary and imports no machinery, while
building a bridge needs the runner, which imports the whole core (and, through the control
API, the API module back). Kept there, even as a lazy import, that factory closed an import
cycle ``api -> core.runner -> control -> api``; here nothing imports this module but the tray.
"""

from __future__ import annotations

from .api import BridgeApi
from .core.runner import BridgeRunner, RunnerOptions


def local_bridge(*, control: bool = True) -> BridgeApi:
    """The in-process bridge (not started): what the tray runs."""
    return BridgeRunner(RunnerOptions(control=control))
