"""The tray app: pystray on the main thread, the bridge on its own thread, one small bridge API.

The app never touches bridge state directly: it reads immutable snapshots (delivered through a
coalescing :class:`~tray.dispatch.Dispatcher`) and acts through :class:`BridgeRunner`. Slow
things (keyring during rotation, the clipboard, opening files) run in worker threads so the
menu never freezes.
"""

from __future__ import annotations

import json
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

from omp_a2a_bridge.server.cli import client_config
from omp_a2a_bridge.server.config import audit_path
from omp_a2a_bridge.server.controlfile import AlreadyRunning
from omp_a2a_bridge.server.runner import BridgeRunner, RunnerOptions, StartupError
from omp_a2a_bridge.server.snapshot import Snapshot

from .autostart import Autostart
from .backend import capabilities
from .clipboard import copy_text
from .dispatch import Dispatcher, ui_poster
from .icons import render_icon, state_for
from .menu import Action, menu_model, notification_for, title
from .notifier import MAX_LIVE, ActionableNotifier, CallNotice
from .render import to_pystray
from .stopping import StopGuard

log = logging.getLogger("a2a-bridge")

ICON_SIZE = 64
NOTIFY_GAP_S = 2.0  # at most one "waiting for approval" notification per gap (coalesced)


def open_path(path: str) -> None:
    """Open a file or folder with the desktop's default application."""
    if sys.platform == "win32":
        os.startfile(path)  # noqa: S606
    elif sys.platform == "darwin":
        subprocess.Popen(["open", path])
    else:
        subprocess.Popen(["xdg-open", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class TrayApp:
    def __init__(
        self,
        pystray: ModuleType | None,
        backend: str,
        runner: BridgeRunner | None = None,
        icon_cls: type | None = None,
        autostart: Autostart | None = None,
        opener: Callable[[str], None] = open_path,
        browser: Callable[[str], Any] = webbrowser.open,
        copier: Callable[[str], None] | None = None,
        interval: float = 0.15,
        notifier: ActionableNotifier | None = None,
    ) -> None:
        self.pystray = pystray
        self.backend = backend
        self.runner = runner or BridgeRunner(RunnerOptions(control=True))
        if icon_cls is None:
            assert pystray is not None, "a backend that is not pystray brings its icon class"
            icon_cls = pystray.Icon
        self.icon_cls = icon_cls
        self.caps = capabilities(self.icon_cls)
        self.autostart = autostart or Autostart()
        self.opener = opener
        self.browser = browser
        self.copier = copier
        self.dispatcher: Dispatcher[Snapshot] = Dispatcher(self.apply, interval, ui_poster(backend))
        self.snap: Snapshot | None = None
        self.icon: Any = None
        self.error: str | None = None
        self.notifications: list[str] = []  # what was shown (or logged), newest last
        self._autostart_on: bool | None = None
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

    # -- lifecycle -------------------------------------------------------------------------------

    def start_bridge(self) -> Snapshot:
        snap = self.runner.start()
        if self.caps["menu"]:
            # The menu can approve, so prompt-tier calls may wait for the human at the tray.
            self._approver = self.runner.attach_approver("tray")
        self._autostart_on = self._read_autostart()
        self.snap = self.runner.snapshot()
        self._unsubscribe = self.runner.subscribe(self.dispatcher.submit)
        return snap

    def make_icon(self) -> Any:
        assert self.snap is not None
        if getattr(self.icon_cls, "MODEL_MENU", False):
            # A backend of our own (tray.sni): it takes the pure menu model and the actions.
            self.icon = self.icon_cls(
                "omp-a2a-bridge",
                icon=self._image(self.snap),
                title=title(self.snap),
                menu=self._model_or_quit,
                perform=self.perform,
            )
            self.icon.attention = bool(self.snap.pending)
            return self.icon
        assert self.pystray is not None
        self.icon = self.icon_cls(
            "omp-a2a-bridge",
            icon=self._image(self.snap),
            title=title(self.snap),
            menu=self.pystray.Menu(self._menu_items),
        )
        if self.backend == "xorg":
            from .xorg import enable_clicks, keep_docked

            enable_clicks(self.icon)
            keep_docked(self.icon, self._quitting)
        return self.icon

    def run(self, headless_fallback: bool = False) -> int:
        """Start the bridge, run the icon on this (main) thread until Quit or a signal.

        SIGTERM/SIGINT go through a :class:`~tray.stopping.StopGuard`, installed before the
        bridge starts, so a stop asked for in any state ends the process in under 2 s with 0.
        A tray that fails to start says so in one line, then either keeps the bridge serving
        headless (``headless_fallback``: plain ``a2a-bridge``) or exits 1 (``a2a-bridge tray``).
        """
        guard = self.guard = StopGuard(
            self.quit, lambda: not self.runner.running, self._force_cleanup
        )
        if threading.current_thread() is threading.main_thread():
            guard.install()
        from .liblogs import quiet_library_logs

        quiet_library_logs()
        try:
            self._start_notifier()  # before the bridge: the first waiting call gets buttons too
            try:
                self.start_bridge()
            except AlreadyRunning as e:
                print(f"a2a-bridge: {e}", file=sys.stderr)
                return 0
            except StartupError as e:
                print(f"a2a-bridge: failed to start: {e}", file=sys.stderr)
                return 1
            if guard.requested.is_set():
                return 0
            try:
                icon = self.make_icon()
                print(f"a2a-bridge tray ({self.backend}) on {self.runner.url}", file=sys.stderr)
                icon.run(setup=self._setup)
            except Exception as e:
                if guard.requested.is_set():
                    return 0
                log.debug("the tray failed", exc_info=True)
                print(f"a2a-bridge: the tray failed ({type(e).__name__}: {e})", file=sys.stderr)
                if not headless_fallback:
                    return 1
                return self._serve_headless(guard)
            return 0
        finally:
            self.shutdown()  # the bridge stops and the control file goes, whatever happened
            guard.finished.set()

    def _serve_headless(self, guard: StopGuard) -> int:
        """The icon is gone but the bridge is fine: keep serving until asked to stop."""
        self.icon = None
        if self._approver is not None and self.runner.bridge is not None:
            self.runner.detach_approver(self._approver)  # no menu to approve from any more
            self._approver = None
        print(
            f"a2a-bridge: running headless on {self.runner.url} - approve with "
            "'a2a-bridge watch' or 'a2a-bridge open'",
            file=sys.stderr,
        )
        while not guard.requested.wait(0.5):
            pass
        return 0

    def _start_notifier(self) -> None:
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

    def _force_cleanup(self) -> None:
        """The watchdog's last resort: the control file must not outlive the process."""
        from omp_a2a_bridge.server.controlfile import release

        if self.runner.control is not None:
            release(self.runner.control)

    def request_stop(self) -> None:
        """Quit from the menu or a signal: through the guard when there is one."""
        if self.guard is not None:
            self.guard.request()
        else:
            threading.Thread(target=self.quit, daemon=True).start()

    def _setup(self, icon: Any) -> None:
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

    def shutdown(self) -> None:
        """Stop the bridge first (its records land), then the notifications; idempotent, and
        a second caller (the main thread after a signal's stop thread) waits for the first."""
        with self._shutdown_lock:
            self.dispatcher.close()
            if self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None
            if self._approver is not None and self.runner.bridge is not None:
                self.runner.detach_approver(self._approver)
                self._approver = None
            self.runner.stop()
            if self.actionable is not None:
                self.actionable.close()

    def quit(self) -> None:
        """Stop the bridge (pending calls are denied: 'bridge shutting down'), then the icon."""
        if self._quitting.is_set():
            return
        self._quitting.set()
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
        model = menu_model(self.snap, autostart=self._autostart_on, error=self.error)
        return to_pystray(self.pystray, model, self.perform)

    def model(self) -> tuple:
        assert self.snap is not None
        return menu_model(self.snap, autostart=self._autostart_on, error=self.error)

    def _model_or_quit(self) -> tuple:
        """The model for backends that take it; never empty (hosts misbehave on empty menus)."""
        from .menu import Item

        return self.model() if self.snap is not None else (Item("Quit", ("quit",)),)

    def apply(self, snap: Snapshot) -> None:
        """On the UI thread: icon, title, menu, and a notification for new pending calls."""
        self.snap = snap
        if self.icon is not None:
            self.icon.icon = self._image(snap)
            self.icon.title = title(snap)
            if getattr(self.icon, "HAS_ATTENTION", False):
                self.icon.attention = bool(snap.pending)
            self.icon.update_menu()
        for warning in snap.warnings:
            if warning not in self._seen_warnings:
                self._seen_warnings.add(warning)
                self.notify(warning, "omp A2A bridge")
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

    def _decide_from_notification(self, call_id: str, decision: str, reason: str | None) -> None:
        if not self.runner.decide(call_id, decision, reason):
            log.info("call %s was no longer waiting when its notification was answered", call_id)

    def _open_call(self, call_id: str) -> None:
        """A click on a call's notification: the approval page (the call is at its top)."""
        self.perform(("open_page",))

    def notify(self, message: str, heading: str = "omp A2A bridge") -> None:
        self.notifications.append(message)
        if self.icon is not None and self.caps["notification"]:
            try:
                self.icon.notify(message[:255], heading[:63])
                return
            except Exception as e:  # a notification daemon that is missing or broken
                log.info("notification not shown (%s)", e)
        log.info("%s", message)

    # -- menu actions ----------------------------------------------------------------------------

    def perform(self, action: Action) -> None:
        """Run a menu action; a failure shows as the error state, never as a dead menu."""
        try:
            self._perform(action)
        except Exception as e:
            log.exception("tray action %s failed", action[0])
            self.set_error(f"{action[0].replace('_', ' ')} failed: {e or type(e).__name__}")
        else:
            if self.error is not None and action[0] != "quit":
                self.set_error(None)

    def set_error(self, message: str | None) -> None:
        self.error = message
        if message:
            self.notify(message, "omp A2A bridge: error")
        if self.icon is not None and self.snap is not None:
            self.icon.icon = self._image(self.snap)
            self.icon.update_menu()

    def _perform(self, action: Action) -> None:
        kind, *rest = action
        runner = self.runner
        snap = self.snap
        if kind == "decide":
            call_id, decision = rest
            if not runner.decide(call_id, decision):
                self.notify("That call is no longer waiting (decided, cancelled or timed out).")
        elif kind == "deny_all" and snap is not None:
            for p in snap.pending:
                runner.decide(p.id, "deny")
        elif kind == "end_session":
            runner.end_session(rest[0])
        elif kind == "restart_server":
            runner.restart_server(rest[0])
        elif kind == "rule_remove":
            self._in_worker(self._remove_rule, rest[0], rest[1])
        elif kind == "grant_revoke":
            runner.revoke_grant(rest[0], rest[1])
        elif kind == "pause":
            runner.pause(rest[0] == "on")
        elif kind == "autostart":
            self._in_worker(self._toggle_autostart, rest[0] == "on")
        elif kind == "copy_url" and snap is not None:
            self._in_worker(self._copy, snap.url, "connection URL", True)
        elif kind == "copy_config" and snap is not None:
            config = json.dumps(client_config(snap.url, runner.token), indent=2)
            self._in_worker(self._copy, config, "client config", False)
        elif kind == "copy_token":
            self._in_worker(self._copy, runner.token, "token", False)
        elif kind == "rotate":
            self._in_worker(self._rotate)
        elif kind == "open_audit":
            self._open(audit_path())
        elif kind == "open_config":
            self._open(os.path.dirname(runner.config.path))
        elif kind in ("open_page", "open_call"):
            if runner.control is not None:
                # A one-time login page opened by path: the code is never on the browser's
                # command line; it opens the page at that call.
                anchor = f"#call-{rest[0]}" if kind == "open_call" else ""
                self.browser(runner.login_page(anchor))
        elif kind == "quit":
            self.request_stop()

    def _in_worker(self, fn: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=fn, args=args, daemon=True).start()

    def _remove_rule(self, which: str, rule: str) -> None:
        try:
            self.runner.edit_rules(which, remove=[rule])
        except Exception as e:
            self.notify(f"Rule not removed: {e}")
            return
        self.notify(f"Removed the rule {rule} ({which}).")

    def _copy(self, text: str, what: str, may_show: bool) -> None:
        problem = copy_text(text, copier=self.copier)
        if problem is None:
            self.notify(f"Copied the {what}.")
            return
        # Never put the token in a notification or the log; the URL is fine to show.
        shown = f" It is: {text}" if may_show else " Run 'a2a-bridge client-config' instead."
        self.notify(f"Could not copy the {what}: {problem}.{shown}")

    def _rotate(self) -> None:
        try:
            self.runner.rotate_token()
        except Exception as e:
            self.notify(f"Token not rotated: {e}")
            return
        self.notify(
            "Token rotated: the old one no longer works. Update remote client configs "
            "('Copy client config' has the new token)."
        )

    def _read_autostart(self) -> bool | None:
        try:
            return self.autostart.enabled
        except Exception as e:
            log.info("autostart status unknown: %s", e)
            return None

    def _toggle_autostart(self, on: bool) -> None:
        try:
            self.autostart.enable() if on else self.autostart.disable()
        except Exception as e:
            self.notify(f"Could not change 'Start at login': {e}")
        self._autostart_on = self._read_autostart()
        if self.icon is not None:
            self.icon.update_menu()

    def _open(self, path: str) -> None:
        try:
            self.opener(path)
        except Exception as e:
            self.notify(f"Could not open {path}: {e}")


def run_tray(headless_fallback: bool = False) -> int:
    """The tray with the backend :func:`~tray.backend.choose_backend` picks, saying why."""
    from .backend import choose_backend

    choice = choose_backend()
    for line in choice.lines:
        print(f"a2a-bridge: tray backend {line}", file=sys.stderr)
    if choice.pystray is None:
        from .sni import SniIcon

        app = TrayApp(None, choice.name, icon_cls=SniIcon)
    else:
        app = TrayApp(choice.pystray, choice.name)
    return app.run(headless_fallback=headless_fallback)
