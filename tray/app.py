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
import signal
import subprocess
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from types import ModuleType
from typing import Any

from server.bridge import Snapshot
from server.cli import client_config
from server.config import audit_path
from server.controlfile import AlreadyRunning
from server.runner import BridgeRunner, RunnerOptions, StartupError

from .autostart import Autostart
from .backend import capabilities
from .clipboard import copy_text
from .dispatch import Dispatcher, ui_poster
from .icons import render_icon, state_for
from .menu import Action, menu_model, notification_for, title
from .render import to_pystray

log = logging.getLogger("a2a-bridge")

ICON_SIZE = 64
NOTIFY_GAP_S = 2.0  # at most one "waiting for approval" notification per gap (coalesced)


def open_path(path: str) -> None:
    """Open a file or folder with the desktop's default application."""
    if sys.platform == "win32":
        os.startfile(path)  # type: ignore[attr-defined]  # noqa: S606
    elif sys.platform == "darwin":
        subprocess.Popen(["open", path])
    else:
        subprocess.Popen(["xdg-open", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class TrayApp:
    def __init__(
        self,
        pystray: ModuleType,
        backend: str,
        runner: BridgeRunner | None = None,
        icon_cls: type | None = None,
        autostart: Autostart | None = None,
        opener: Callable[[str], None] = open_path,
        browser: Callable[[str], Any] = webbrowser.open,
        copier: Callable[[str], None] | None = None,
        interval: float = 0.15,
    ) -> None:
        self.pystray = pystray
        self.backend = backend
        self.runner = runner or BridgeRunner(RunnerOptions(control=True))
        self.icon_cls = icon_cls or pystray.Icon
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
        self.icon = self.icon_cls(
            "omp-a2a-bridge",
            icon=self._image(self.snap),
            title=title(self.snap),
            menu=self.pystray.Menu(self._menu_items),
        )
        return self.icon

    def run(self) -> int:
        """Start the bridge, run the icon on this (main) thread until Quit or a signal."""
        try:
            self.start_bridge()
        except AlreadyRunning as e:
            print(f"a2a-bridge: {e}", file=sys.stderr)
            return 0
        except StartupError as e:
            print(f"a2a-bridge: failed to start: {e}", file=sys.stderr)
            return 1
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: threading.Thread(target=self.quit, daemon=True).start())
        try:
            icon = self.make_icon()
            print(f"a2a-bridge tray ({self.backend}) on {self.runner.url}", file=sys.stderr)
            icon.run(setup=self._setup)
        except Exception as e:
            log.exception("the tray failed")
            print(f"a2a-bridge: the tray failed ({type(e).__name__}: {e})", file=sys.stderr)
            return 1
        finally:
            self.shutdown()  # the bridge stops and the control file goes, whatever happened
        return 0

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
        self.dispatcher.close()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._approver is not None and self.runner.bridge is not None:
            self.runner.detach_approver(self._approver)
            self._approver = None
        self.runner.stop()

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
        if self.snap is None:
            return to_pystray(self.pystray, (), self.perform)
        model = menu_model(self.snap, autostart=self._autostart_on, error=self.error)
        return to_pystray(self.pystray, model, self.perform)

    def model(self) -> tuple:
        assert self.snap is not None
        return menu_model(self.snap, autostart=self._autostart_on, error=self.error)

    def apply(self, snap: Snapshot) -> None:
        """On the UI thread: icon, title, menu, and a notification for new pending calls."""
        self.snap = snap
        if self.icon is not None:
            self.icon.icon = self._image(snap)
            self.icon.title = title(snap)
            self.icon.update_menu()
        for warning in snap.warnings:
            if warning not in self._seen_warnings:
                self._seen_warnings.add(warning)
                self.notify(warning, "omp A2A bridge")
        new = [p for p in snap.pending if p.id not in self._seen_pending]
        self._seen_pending = {p.id for p in snap.pending}
        text = notification_for([(p.tool, p.summary, p.client) for p in new], len(snap.pending))
        if text:
            now = time.monotonic()
            if now - self._last_notify >= NOTIFY_GAP_S or len(snap.pending) == 1:
                self._last_notify = now
                if not self.caps["menu"]:
                    text += " — click the icon to open the approval page"
                self.notify(text, "Approval needed")

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
        elif kind == "open_page":
            control = runner.control
            if control is not None:
                self.browser(f"{control.url}login?k={control.secret}")
        elif kind == "quit":
            threading.Thread(target=self.quit, daemon=True).start()

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


def run_tray() -> int:
    from .backend import load_pystray

    pystray, backend = load_pystray()
    return TrayApp(pystray, backend).run()
