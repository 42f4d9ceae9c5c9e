"""The tray app: pystray on the main thread, the bridge on its own thread, one bridge API.

The app never touches bridge state directly: it reads immutable snapshots (delivered through a
coalescing :class:`~tray.dispatch.Dispatcher`) and acts through the
:class:`~server.api.BridgeApi` (:mod:`tray.actions` for the menu items). Slow things (keyring
during rotation, the clipboard, opening files) run in worker threads so the menu never freezes.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from types import ModuleType
from typing import Any

from omp_a2a_bridge.server.api import (
    ApproverKind,
    BridgeApi,
    BridgeError,
    Decision,
    Snapshot,
)
from omp_a2a_bridge.server.errors import exit_line

from .actions import MenuActions
from .autostart import Autostart
from .backend import NO_CAPS, WAITING, capabilities
from .dispatch import Dispatcher, ui_poster
from .firstrun import FirstRun
from .icons import render_icon, state_for
from .menu import (
    Action,
    ActionKind,
    Item,
    first_run_text,
    menu_model,
    notification_for,
    title,
    tooltip,
)
from .notifier import MAX_LIVE, ActionableNotifier, CallNotice, body_text
from .render import to_pystray
from .stopping import StopGuard

log = logging.getLogger(__name__)
# pystray backends whose notify() goes through libnotify (Linux notification servers).
LIBNOTIFY_BACKENDS = frozenset({"appindicator", "gtk"})

ICON_SIZE = 64
NOTIFY_GAP_S = 2.0  # at most one "waiting for approval" notification per gap (coalesced)
NOTIFY_MAX = 1000  # characters of a notification's text; pystray's win32 one holds 255
FIRST_RUN_HEADING = "omp A2A bridge is running"


def open_path(path: str) -> None:
    """Open a file or folder with the desktop's default application."""
    if sys.platform == "win32":
        os.startfile(path)  # noqa: S606
    elif sys.platform == "darwin":
        subprocess.Popen(["open", path])
    else:
        subprocess.Popen(["xdg-open", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def open_url(url: str) -> bool:
    """Open the approval page (or a login page) in the browser :mod:`webbrowser` picks
    (``$BROWSER``, the desktop's default, ``xdg-open``...).

    Linux: that browser's command is run here, in the bridge's own session (a process group of
    its own, so a Ctrl-C in the app's terminal does not reach it), where :mod:`webbrowser`
    would start it in a new session. Why: the bridge adopts orphans (a browser that ``xdg-open``
    leaves behind among them), and the control API counts a child of the bridge in a session
    other than the bridge's as a tool's (``server/control/peer.py``): the human's page must not
    be refused. A browser :mod:`webbrowser` drives its own way (Konqueror) is left to it."""
    if not sys.platform.startswith("linux"):
        return webbrowser.open(url)
    try:
        controller = webbrowser.get()
    except webbrowser.Error:
        return False
    if isinstance(controller, webbrowser.GenericBrowser):  # $BROWSER, xdg-open, gio, lynx...
        argv = [controller.name, *(arg.replace("%s", url) for arg in controller.args)]
    elif isinstance(controller, webbrowser.UnixBrowser):  # firefox, chromium...: "NAME URL"
        argv = [controller.name, url]
    else:
        return controller.open(url)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            process_group=0,
        )
    except OSError:
        return controller.open(url)
    threading.Thread(target=proc.wait, name="browser", daemon=True).start()  # no zombie
    return True


class TrayApp:
    """The tray: its icon, menu and notifications, drawn from the bridge's snapshots.

    Why it holds only a :class:`~server.api.BridgeApi`: the tray reads immutable snapshots and
    acts through the API, so the bridge can change (or run elsewhere) behind it.
    """

    def __init__(
        self,
        pystray: ModuleType | None,
        backend: str,
        api: BridgeApi | None = None,
        icon_cls: type | None = None,
        autostart: Autostart | None = None,
        opener: Callable[[str], None] = open_path,
        browser: Callable[[str], Any] = open_url,
        copier: Callable[[str], None] | None = None,
        interval: float = 0.15,
        notifier: ActionableNotifier | None = None,
        panel_later: bool = False,
        first_run: bool = False,
    ) -> None:
        self.pystray = pystray
        self.backend = backend
        if api is None:
            # The whole core, imported only when the tray runs it (tests pass their own API).
            from omp_a2a_bridge.server.local import local_bridge

            api = local_bridge(control=True)
        self.api = api
        if icon_cls is None and backend != WAITING:
            assert pystray is not None, "a backend that is not pystray brings its icon class"
            icon_cls = pystray.Icon
        self.icon_cls: type | None = icon_cls  # None while WAITING for the panel
        self.caps = capabilities(icon_cls) if icon_cls is not None else dict(NO_CAPS)
        self.autostart = autostart or Autostart()
        self.opener = opener
        self.browser = browser
        self.copier = copier
        self.dispatcher: Dispatcher[Snapshot] = Dispatcher(self.apply, interval, ui_poster(backend))
        self.snap: Snapshot | None = None
        self.icon: Any = None
        self.error: str | None = None
        self.notifications: list[str] = []  # what was shown (or logged), newest last
        self.autostart_on: bool | None = None
        self.actions = MenuActions(self)
        self._seen_pending: set[str] = set()
        self._seen_warnings: set[str] = set()
        self._last_notify = 0.0
        self._approver: int | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._quitting = threading.Event()
        self._shutdown_lock = threading.Lock()
        # Notifications with Approve/Deny (None: plain ones only); call id -> shown.
        self.actionable = notifier
        self._noticed: set[str] = set()
        self.guard: StopGuard | None = None
        # Login race: a bus without the panel's watcher yet. Watch for it, then move to SNI.
        self.panel_later = panel_later and backend != "sni"
        self._panel = threading.Event()
        self._panel_watch: Any = None
        self._icon_lock = threading.Lock()
        self._running_icon: Any = None
        self._undock = threading.Event()  # stops the xorg dock watcher of the current icon
        self._dock_thread: threading.Thread | None = None
        # The first start ever says what is exposed, how to approve, where the log is (once).
        self.first_run = first_run
        self._first_run: FirstRun | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start_bridge(self) -> Snapshot:
        snap = self.api.start()
        if self.caps["menu"]:
            # The menu can approve, so prompt-tier calls may wait for the human at the tray.
            self._approver = self.api.attach_approver(ApproverKind.TRAY)
        self.autostart_on = self.read_autostart()
        if self.first_run:
            state = FirstRun(os.path.dirname(self.api.config_path))
            self._first_run = state if state.due() else None
        self.snap = self.api.snapshot()
        self._unsubscribe = self.api.subscribe(self.dispatcher.submit)
        return snap

    def make_icon(self) -> Any:
        assert self.snap is not None
        icon_cls = self.icon_cls
        assert icon_cls is not None, "no icon while WAITING for the panel"
        if getattr(icon_cls, "MODEL_MENU", False):
            # A backend of our own (tray.sni): it takes the pure menu model and the actions.
            self.icon = icon_cls(
                "omp-a2a-bridge",
                icon=self._image(self.snap),
                title=tooltip(self.snap),
                menu=self._model_or_quit,
                perform=self.perform,
            )
            self.icon.attention = bool(self.snap.pending)
            return self.icon
        assert self.pystray is not None
        self.icon = icon_cls(
            "omp-a2a-bridge",
            icon=self._image(self.snap),
            title=title(self.snap),
            menu=self.pystray.Menu(self._menu_items),
        )
        if self.backend == "xorg":
            from .xorg import enable_clicks, keep_docked

            enable_clicks(self.icon)
            # Its own stop: the dock watcher's X requests from another thread must end before
            # the icon is stopped (python-xlib can lose the stop's wake-up event otherwise).
            self._undock = threading.Event()
            self._dock_thread = keep_docked(self.icon, self._undock)
        return self.icon

    def run(self, headless_fallback: bool = False) -> int:
        """Start the bridge, run the icon on this (main) thread until Quit or a signal.

        SIGTERM/SIGINT go through a :class:`~tray.stopping.StopGuard`, installed before the
        bridge starts, so a stop asked for in any state ends the process in under 2 s with 0.
        A tray that fails to start says so in one line, then either keeps the bridge serving
        headless (``headless_fallback``: plain ``a2a-bridge``) or exits 1 (``a2a-bridge tray``).
        """
        guard = self.guard = StopGuard(
            self.quit, lambda: not self.api.running, self.api.release_control_file
        )
        if threading.current_thread() is threading.main_thread():
            guard.install()
        from .liblogs import quiet_library_logs

        quiet_library_logs()
        try:
            self.start_notifier()  # before the bridge: the first waiting call gets buttons too
            try:
                self.start_bridge()
            except BridgeError as e:  # already running (0), failed to start (1)
                print(exit_line(e), file=sys.stderr)
                return e.exit_code
            except Exception:
                # A stop asked for while starting runs the shutdown on the guard's thread,
                # concurrently with this start: what the start trips over then is the stop,
                # not a failure to report (the promise: a stop in any state ends with 0).
                if not guard.requested.is_set():
                    raise
                log.debug("the start ended by the stop", exc_info=True)
                return 0
            if guard.requested.is_set():
                return 0
            if self.panel_later:
                self._watch_panel()
            while True:
                if self.icon_cls is None:
                    self._wait_for_panel(guard)
                else:
                    try:
                        self._run_icon()
                    except Exception as e:
                        if guard.requested.is_set():
                            return 0
                        log.debug("the tray failed", exc_info=True)
                        print(
                            f"a2a-bridge: the tray failed ({type(e).__name__}: {e})",
                            file=sys.stderr,
                        )
                        if not headless_fallback:
                            return 1
                        return self._serve_headless(guard)
                if guard.requested.is_set() or self._quitting.is_set():
                    return 0
                if not self._panel.is_set() or self.backend == "sni":
                    return 0
                self._move_to_sni()
        finally:
            self.shutdown()  # the bridge stops and the control file goes, whatever happened
            guard.finished.set()

    def _run_icon(self) -> None:
        """Make the icon and run it on this thread until it stops (Quit, or the panel came)."""
        icon = self.make_icon()
        with self._icon_lock:
            if self._panel.is_set() and self.backend != "sni":
                return  # the panel came while the icon was being made: go straight there
            self._running_icon = icon
        print(f"a2a-bridge tray ({self.backend}) on {self.api.url}", file=sys.stderr)
        try:
            icon.run(setup=self.setup)
        finally:
            with self._icon_lock:
                self._running_icon = None

    def _watch_panel(self) -> None:
        """Watch the session bus for the panel's StatusNotifierWatcher (no polling)."""
        try:
            from .sni_dbus import PanelWatch

            self._panel_watch = PanelWatch(self._panel_appeared).start()
        except Exception as e:  # dbus-fast missing or broken: the current backend stays
            log.info("not watching for the panel: %s", e)

    def _panel_appeared(self) -> None:
        """From the watch thread: stop the menu-less icon; :meth:`run` moves to SNI.

        pystray ignores ``stop()`` until its loop is ready (``_running``), so a panel that
        appears while the icon starts is retried until the icon has really stopped.
        """
        with self._icon_lock:
            self._panel.set()
            icon = self._running_icon
        self._undock.set()
        if self._dock_thread is not None:
            self._dock_thread.join(5)  # no X request of its own may race the stop
        deadline = time.monotonic() + 60
        stopped_at: float | None = None
        while icon is not None and not self._quitting.is_set() and time.monotonic() < deadline:
            try:
                if getattr(icon, "_running", True):
                    icon.stop()
                    stopped_at = time.monotonic()
                elif stopped_at is not None and time.monotonic() - stopped_at > 1.0:
                    if self.backend == "xorg":
                        from .xorg import wake

                        wake(icon)  # stopped but its loop still sleeps: wake it
                    stopped_at = time.monotonic()
            except Exception as e:  # the icon is going anyway
                log.debug("stopping the menu-less icon: %s", e)
            if self._quitting.wait(0.1):
                return
            with self._icon_lock:
                if self._running_icon is not icon:
                    return

    def _wait_for_panel(self, guard: StopGuard) -> None:
        """No icon can be shown yet: serve, say how to approve, until the panel or a stop."""
        print(
            f"a2a-bridge: waiting for the panel (no StatusNotifierWatcher yet); serving on "
            f"{self.api.url} - approve with 'a2a-bridge watch' or 'a2a-bridge open'",
            file=sys.stderr,
        )
        while not self._panel.is_set() and not guard.requested.wait(1.0):
            pass

    def _move_to_sni(self) -> None:
        """The panel appeared: the StatusNotifierItem icon, with its full menu, takes over."""
        from .sni import SniIcon

        if self._approver is not None:
            self.api.detach_approver(self._approver)
            self._approver = None
        self.icon = None
        self.pystray = None
        self.backend = "sni"
        self.icon_cls = SniIcon
        self.caps = capabilities(SniIcon)
        if self.caps["menu"]:
            self._approver = self.api.attach_approver(ApproverKind.TRAY)
        self.snap = self.api.snapshot()
        print("a2a-bridge: the panel appeared; the tray moves to its menu", file=sys.stderr)

    def _serve_headless(self, guard: StopGuard) -> int:
        """The icon is gone but the bridge is fine: keep serving until asked to stop."""
        self.icon = None
        if self._approver is not None:
            self.api.detach_approver(self._approver)  # no menu to approve from any more
            self._approver = None
        print(
            f"a2a-bridge: running headless on {self.api.url} - approve with "
            "'a2a-bridge watch' or 'a2a-bridge open'",
            file=sys.stderr,
        )
        while not guard.requested.wait(0.5):
            pass
        return 0

    def start_notifier(self) -> None:
        """Notifications with Approve/Deny where the platform has them (see tray.notifier)."""
        if self.actionable is not None:
            return
        notifier = ActionableNotifier(self._decide_from_notification, self._open_call)
        try:
            how = notifier.start()
        except Exception as e:
            print(f"a2a-bridge: notifications: plain ones only ({e})", file=sys.stderr)
            return
        self.actionable = notifier
        print(f"a2a-bridge: notifications: {how}", file=sys.stderr)

    def request_stop(self) -> None:
        """Quit from the menu or a signal: through the guard when there is one."""
        if self.guard is not None:
            self.guard.request()
        else:
            threading.Thread(target=self.quit, daemon=True).start()

    def setup(self, icon: Any) -> None:
        """pystray's ``setup`` callback (and SniIcon's): show the icon, then the warnings."""
        icon.visible = True
        assert self.snap is not None
        for w in self.snap.warnings:
            self._seen_warnings.add(w)
            self.notify(w, "omp A2A bridge")
        if not self.caps["menu"]:
            self.notify(
                "This tray has no menu: click the icon (or run 'a2a-bridge open') to approve "
                "calls on the approval page.",
                "omp A2A bridge",
            )
        self._first_run_notice(self.snap)

    def _first_run_notice(self, snap: Snapshot) -> None:
        """The tray's first start ever: the start text, once, when the box is known (its
        probe runs after the start; "box: being checked" would tell nothing)."""
        state = self._first_run
        if state is None or snap.box is None or self.icon is None:
            return
        self._first_run = None
        # Remembered before it is sent: the notification goes out on the icon's own thread, so
        # it could be on screen (and the tray quit) before a mark() made after it was written.
        state.mark()
        self.notify(first_run_text(snap, bool(self.caps["menu"])), FIRST_RUN_HEADING)

    def shutdown(self) -> None:
        """Stop the bridge first (its records land), then the notifications; idempotent, and
        a second caller (the main thread after a signal's stop thread) waits for the first."""
        with self._shutdown_lock:
            if self._panel_watch is not None:
                self._panel_watch.close()
            self.dispatcher.close()
            if self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None
            if self._approver is not None:
                self.api.detach_approver(self._approver)
                self._approver = None
            self.api.stop()
            if self.actionable is not None:
                self.actionable.close()

    def quit(self) -> None:
        """Stop the bridge (pending calls are denied: 'bridge shutting down'), then the icon."""
        if self._quitting.is_set():
            return
        self._quitting.set()
        self._undock.set()
        self.shutdown()
        if self.icon is not None:
            self.icon.stop()

    # -- snapshots -> UI ------------------------------------------------------------------------

    def _image(self, snap: Snapshot) -> Any:
        state = state_for(
            len(snap.sessions), len(snap.pending), snap.paused, self.error is not None
        )
        return render_icon(state, len(snap.pending), ICON_SIZE)

    def _menu_items(self) -> list[Any]:
        assert self.pystray is not None  # only the pystray backend's menu calls this
        if self.snap is None:
            return to_pystray(self.pystray, (), self.perform)
        model = menu_model(self.snap, autostart=self.autostart_on, error=self.error)
        return to_pystray(self.pystray, model, self.perform)

    def model(self) -> tuple:
        assert self.snap is not None
        return menu_model(self.snap, autostart=self.autostart_on, error=self.error)

    def _model_or_quit(self) -> tuple:
        """The model for backends that take it; never empty (hosts misbehave on empty menus)."""
        return self.model() if self.snap is not None else (Item("Quit", (ActionKind.QUIT,)),)

    def apply(self, snap: Snapshot) -> None:
        """On the UI thread: icon, title, menu, and a notification for new pending calls."""
        if self.icon is not None:
            self.icon.icon = self._image(snap)
            # A tooltip of several lines where the backend shows one (StatusNotifierItem).
            model = getattr(self.icon, "MODEL_MENU", False)
            self.icon.title = tooltip(snap) if model else title(snap)
            if getattr(self.icon, "HAS_ATTENTION", False):
                self.icon.attention = bool(snap.pending)
        # The menu's snapshot last: a menu rebuilt meanwhile on the icon's own thread (a click
        # asks for one at any time) reads it, and must not show what the tooltip and status
        # do not say yet (tray.sni publishes those before such a menu).
        self.snap = snap
        if self.icon is not None:
            self.icon.update_menu()
        for warning in snap.warnings:
            if warning not in self._seen_warnings:
                self._seen_warnings.add(warning)
                self.notify(warning, "omp A2A bridge")
        self._first_run_notice(snap)
        new = [p for p in snap.pending if p.id not in self._seen_pending]
        self._seen_pending = {p.id for p in snap.pending}
        if self.actionable is not None:
            new = self._actionable_notices(snap, new)
        text = notification_for(new, len(snap.pending))
        if text:
            now = time.monotonic()
            if now - self._last_notify >= NOTIFY_GAP_S or len(snap.pending) == 1:
                self._last_notify = now
                if not self.caps["menu"]:
                    text += " — click the icon to open the approval page"
                self.notify(text, "Approval needed")

    def _actionable_notices(self, snap: Snapshot, new: list[Any]) -> list[Any]:
        """One notification with Approve/Deny per new call; decided ones are withdrawn.

        Returns the new calls left for the plain notification (past ``MAX_LIVE`` at once).
        """
        notifier = self.actionable
        assert notifier is not None
        waiting = {p.id for p in snap.pending}
        for call_id in self._noticed - waiting:
            notifier.withdraw(call_id)
        self._noticed &= waiting
        rest = []
        for p in new:
            if len(self._noticed) >= MAX_LIVE:
                rest.append(p)
                continue
            self._noticed.add(p.id)
            text = notification_for([p], 1) or p.tool
            notifier.show(CallNotice(p.id, "Approval needed", text))
            self.notifications.append(text)
        return rest

    def _decide_from_notification(
        self, call_id: str, decision: Decision, reason: str | None
    ) -> None:
        if not self.api.decide(call_id, Decision(decision), reason, ApproverKind.TRAY):
            log.info("call %s was no longer waiting when its notification was answered", call_id)

    def _open_call(self, call_id: str) -> None:
        """A click on a call's notification: the approval page (the call is at its top)."""
        self.perform((ActionKind.OPEN_PAGE,))

    def notify(self, message: str, heading: str = "omp A2A bridge") -> None:
        self.notifications.append(message)
        if self.icon is not None and self.caps["notification"]:
            shown = message[: 255 if self.backend == "win32" else NOTIFY_MAX]
            if self.backend in LIBNOTIFY_BACKENDS:
                # pystray hands the text to libnotify, whose servers read body markup: agent
                # text could hide half a command or add a link. Escaped (tray.sni asks the
                # server first; here it cannot be asked, so markup is assumed).
                shown = body_text(shown, markup=True)
            try:
                self.icon.notify(shown, heading[:63])
                return
            except Exception as e:  # a notification daemon that is missing or broken
                log.info("notification not shown (%s)", e)
        log.info("%s", message)

    # -- menu actions ----------------------------------------------------------------------------

    def perform(self, action: Action) -> None:
        """Run a menu action; a failure shows as the error state, never as a dead menu."""
        try:
            self.actions.run(action)
        except Exception as e:
            log.exception("tray action %s failed", action[0])
            self.set_error(f"{action[0].replace('_', ' ')} failed: {e or type(e).__name__}")
        else:
            if self.error is not None and action[0] != ActionKind.QUIT:
                self.set_error(None)

    def set_error(self, message: str | None) -> None:
        self.error = message
        if message:
            self.notify(message, "omp A2A bridge: error")
        if self.icon is not None and self.snap is not None:
            self.icon.icon = self._image(self.snap)
            self.icon.update_menu()

    def read_autostart(self) -> bool | None:
        try:
            return self.autostart.enabled
        except Exception as e:
            log.info("autostart status unknown: %s", e)
            return None


def run_tray(headless_fallback: bool = False) -> int:
    """The tray with the backend :func:`~tray.backend.choose_backend` picks, saying why."""
    from .backend import choose_backend

    choice = choose_backend()
    for line in choice.lines:
        print(f"a2a-bridge: tray backend {line}", file=sys.stderr)
    if choice.name == WAITING:
        app = TrayApp(None, WAITING, panel_later=True, first_run=True)
    elif choice.pystray is None:
        from .sni import SniIcon

        app = TrayApp(None, choice.name, icon_cls=SniIcon, first_run=True)
    else:
        app = TrayApp(choice.pystray, choice.name, panel_later=choice.panel_later, first_run=True)
    return app.run(headless_fallback=headless_fallback)
