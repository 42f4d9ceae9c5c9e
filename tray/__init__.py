"""The system-tray UI. It talks to the bridge only through ``server.runner.BridgeRunner``."""

from __future__ import annotations


def tray_available() -> tuple[bool, str]:
    """Whether a tray icon can be shown here, and if not, why."""
    return False, "the tray UI is not part of this build yet"
