"""pystray's xorg backend, made clickable.

pystray 0.19.5 handles ``ButtonPress`` on its tray window (a left click runs the menu's default
item) but creates the window without ``ButtonPressMask``, so the X server never delivers a
click. Asking for button presses on the window makes a click open the approval page, as the
app's own notification says.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("a2a-bridge")


def enable_clicks(icon: Any) -> bool:
    """Add ``ButtonPressMask`` to the icon's window; call before ``icon.run()``."""
    try:
        from Xlib import X

        icon._window.change_attributes(
            event_mask=X.ExposureMask | X.StructureNotifyMask | X.ButtonPressMask
        )
        icon._display.flush()
    except Exception as e:  # another pystray version: clicks stay as they are
        log.info("could not enable clicks on the xorg tray icon: %s", e)
        return False
    return True
