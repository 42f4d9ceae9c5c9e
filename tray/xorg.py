"""pystray's xorg backend, made clickable and kept docked.

pystray 0.19.5 handles ``ButtonPress`` on its tray window (a left click runs the menu's default
item) but creates the window without ``ButtonPressMask``, so the X server never delivers a
click. Asking for button presses on the window makes a click open the approval page, as the
app's own notification says.

It also docks only once: an icon shown while the tray host is still starting (login, a panel
restart) stays an unmapped 1x1 window for good. :func:`keep_docked` asks again while the window
is not on screen.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


def enable_clicks(icon: Any) -> bool:
    """Add ``ButtonPressMask`` to the icon's window; call before ``icon.run()``."""
    try:
        from Xlib import X

        # pystray's xorg icon has no public window or display: this module is its patch.
        icon._window.change_attributes(  # noqa: SLF001
            event_mask=X.ExposureMask | X.StructureNotifyMask | X.ButtonPressMask
        )
        icon._display.flush()  # noqa: SLF001
    except Exception as e:  # another pystray version: clicks stay as they are
        log.info("could not enable clicks on the xorg tray icon: %s", e)
        return False
    return True


def keep_docked(
    icon: Any, stop: threading.Event, period: float = 0.5, longest: float = 30.0
) -> threading.Thread:
    """Re-send the dock request while the icon's window is not viewable (a daemon thread).

    Backs off (doubling up to ``longest``) while no tray host answers, so an X session without
    one costs a request every half minute, not twice a second.
    """

    def loop() -> None:
        from Xlib import X

        wait = period
        while not stop.wait(wait):
            try:
                if not getattr(icon, "_running", False) or not icon.visible:
                    continue
                window = icon._window  # noqa: SLF001 - pystray's, as above
                if window.get_attributes().map_state == X.IsViewable:
                    wait = period
                    continue
                icon._show()  # noqa: SLF001 - runs on the X thread; docks once a host is there
                wait = min(wait * 2, longest)
            except Exception as e:  # the window is gone: the icon is stopping
                log.debug("xorg dock watcher ends: %s", e)
                return

    thread = threading.Thread(target=loop, name="xorg-dock", daemon=True)
    thread.start()
    return thread


def wake(icon: Any) -> None:
    """Make pystray's X loop read again (it may sleep on an event another thread received).

    Why: python-xlib lets a thread that sends (here: ``stop()`` from the panel watch) read
    the reply stream too; the stop's ``DestroyNotify`` can then land in the event queue while
    the loop's thread still sleeps in ``select``. A short-lived window's own ``DestroyNotify``
    makes the socket readable, the loop wakes and finds the queued event.
    """
    from Xlib import X

    display = icon._display  # noqa: SLF001 - pystray's connection; no public handle exists
    screen = display.screen()
    window = screen.root.create_window(
        -1, -1, 1, 1, 0, screen.root_depth, event_mask=X.StructureNotifyMask
    )
    window.destroy()
    display.flush()
