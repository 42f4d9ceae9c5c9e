"""The system-tray UI. It talks to the bridge only through ``server.api.BridgeApi``."""

from __future__ import annotations


def tray_available() -> tuple[bool, str]:
    """Whether a tray icon can be shown here, and if not, why."""
    from .backend import TrayUnavailable, choose_backend

    try:
        choose_backend()
    except TrayUnavailable as e:
        return False, str(e)
    return True, ""
