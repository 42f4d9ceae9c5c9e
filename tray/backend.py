"""Import pystray with the best backend, or say clearly why no tray can be shown.

On Linux the order is AppIndicator (needs ``gi`` and Ayatana AppIndicator), then GTK, then
xorg. A missing display makes pystray's xorg backend raise an Xlib error at import time (not
an ImportError), so every failure is caught here and turned into a sentence.
"""

from __future__ import annotations

import functools
import os
import sys
from types import ModuleType


class TrayUnavailable(Exception):
    pass


LINUX_ORDER = ("appindicator", "gtk", "xorg")


def _forget(prefix: str) -> None:
    for name in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[name]


@functools.cache
def load_pystray() -> tuple[ModuleType, str]:
    """``(pystray, backend name)``; raises :class:`TrayUnavailable` with the reason."""
    explicit = os.environ.get("PYSTRAY_BACKEND")
    if sys.platform == "darwin":
        candidates: tuple[str, ...] = (explicit or "darwin",)
    elif sys.platform == "win32":
        candidates = (explicit or "win32",)
    else:
        if not explicit and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            raise TrayUnavailable("no display (DISPLAY and WAYLAND_DISPLAY are unset)")
        candidates = (explicit,) if explicit else LINUX_ORDER
    errors = []
    for name in candidates:
        os.environ["PYSTRAY_BACKEND"] = name
        try:
            import pystray

            return pystray, name
        except Exception as e:  # ImportError, Xlib.error.DisplayNameError, GLib errors...
            errors.append(f"{name}: {type(e).__name__}: {e}".strip())
            _forget("pystray")
    if explicit is None:
        os.environ.pop("PYSTRAY_BACKEND", None)
    raise TrayUnavailable("no usable tray backend (" + "; ".join(errors) + ")")


def capabilities(icon_cls: type) -> dict[str, bool]:
    return {
        "menu": bool(getattr(icon_cls, "HAS_MENU", False)),
        "notification": bool(getattr(icon_cls, "HAS_NOTIFICATION", False)),
        "default_action": bool(getattr(icon_cls, "HAS_DEFAULT_ACTION", False)),
    }
