"""Choose the tray backend, or say clearly why no tray can be shown.

On Linux the first choice is our own StatusNotifierItem backend (:mod:`tray.sni`, pure D-Bus,
no system packages) when an ``org.kde.StatusNotifierWatcher`` is on the session bus; then
pystray's AppIndicator (needs ``gi`` and Ayatana AppIndicator), GTK, then xorg. A missing
display makes pystray's xorg backend raise an Xlib error at import time (not an ImportError), so
every failure is caught here and turned into a sentence. :func:`choose_backend` keeps one line
per backend considered, which the app prints at start.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from types import ModuleType


class TrayUnavailable(Exception):
    pass


LINUX_ORDER = ("appindicator", "gtk", "xorg")
_PYSTRAY_ERRORS: list[str] = []  # why each pystray backend was passed over, last attempt
WHY_PYSTRAY = {
    "appindicator": "pystray AppIndicator (full menu, through PyGObject)",
    "gtk": "pystray GTK (full menu, through PyGObject; XEmbed tray)",
    "xorg": (
        "pystray xorg: an X11 tray without a StatusNotifierWatcher; no menu, so the tray is "
        "not an approver: a click opens the approval page"
    ),
    "darwin": "pystray macOS (native menu bar item)",
    "win32": "pystray Windows (native notification area)",
}


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
    errors = _PYSTRAY_ERRORS
    errors.clear()
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


NO_CAPS = {"menu": False, "notification": False, "default_action": False}


def capabilities(icon_cls: type) -> dict[str, bool]:
    return {
        "menu": bool(getattr(icon_cls, "HAS_MENU", False)),
        "notification": bool(getattr(icon_cls, "HAS_NOTIFICATION", False)),
        "default_action": bool(getattr(icon_cls, "HAS_DEFAULT_ACTION", False)),
    }


@dataclass(frozen=True, slots=True)
class Choice:
    """The backend to use, the pystray module when it is a pystray one, and the reasons."""

    name: str
    pystray: ModuleType | None
    lines: tuple[str, ...]  # one per backend considered, in order, the chosen one last
    # The session bus answered but had no StatusNotifierWatcher yet (a login race): the app
    # watches the bus and moves to the SNI backend when the panel appears.
    panel_later: bool = False


WAITING = "waiting"  # no icon yet: serve, and show the SNI icon when the panel appears


class PanelNotYet(TrayUnavailable):
    """The bus is there, the panel's StatusNotifierWatcher not (yet)."""


def _sni_reason() -> str:
    """Why the SNI backend fits (raise TrayUnavailable with why not)."""
    try:
        from .sni_dbus import NoWatcherYet, SniUnavailable, watcher_reason
    except ImportError as e:
        raise TrayUnavailable(f"dbus-fast is not installed ({e})") from None
    try:
        return watcher_reason()
    except NoWatcherYet as e:
        raise PanelNotYet(str(e)) from None
    except SniUnavailable as e:
        raise TrayUnavailable(str(e)) from None


@functools.cache
def choose_backend() -> Choice:
    """SNI first on Linux (unless ``PYSTRAY_BACKEND`` names a pystray one), then pystray.

    ``A2A_BRIDGE_TRAY=sni`` or ``=pystray`` restricts the choice to one family.

    A bus without a StatusNotifierWatcher yet (the tray started at login before the panel)
    gives the best pystray backend for now with ``panel_later`` set, or, where no pystray
    backend works either (or the family is ``sni``), the :data:`WAITING` choice: serve, say
    how to approve, and show the SNI icon once the panel appears.
    """
    family = os.environ.get("A2A_BRIDGE_TRAY", "").strip().lower()
    lines: list[str] = []
    linux = sys.platform not in ("darwin", "win32")
    later = False
    if linux and family != "pystray" and not os.environ.get("PYSTRAY_BACKEND"):
        try:
            why = _sni_reason()
        except PanelNotYet as e:
            later = True
            lines.append(f"sni: not yet - {e}; the icon moves there when the panel appears")
        except TrayUnavailable as e:
            lines.append(f"sni: skipped - {e}")
            if family == "sni":
                raise TrayUnavailable("; ".join(lines)) from None
        else:
            lines.append(f"sni: chosen - StatusNotifierItem + DBusMenu, {why}")
            return Choice("sni", None, tuple(lines))
    waiting = Choice(
        WAITING, None, (*lines, f"{WAITING}: chosen - serving until the panel appears"), True
    )
    if later and family == "sni":
        return waiting
    try:
        module, name = load_pystray()
    except TrayUnavailable as e:
        lines.append(f"pystray: skipped - {e}")
        if later:
            return Choice(WAITING, None, (*lines, waiting.lines[-1]), True)
        raise TrayUnavailable("; ".join(lines)) from None
    for err in _PYSTRAY_ERRORS:
        lines.append(f"{err.split(':', 1)[0]}: skipped - {err.split(': ', 1)[-1]}")
    lines.append(f"{name}: chosen - {WHY_PYSTRAY.get(name, 'pystray')}")
    return Choice(name, module, tuple(lines), later)
