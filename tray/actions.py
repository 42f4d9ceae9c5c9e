"""What each tray menu item does: :class:`MenuActions` turns an :data:`~tray.menu.Action` into
calls of the bridge's API (:class:`~server.api.BridgeApi`) and the desktop (browser, file
manager, clipboard, login items).

Why apart from :mod:`tray.app`: the app is the lifecycle and the snapshot-to-icon path; this is
the other direction, one small method per action, each testable through the real menu. Slow
things (a keyring call in a rotation, a config write, the clipboard, the login item) run in a
worker thread, so the menu never freezes; what fails is told in a notification.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from omp_a2a_bridge.server.api import ApproverKind, BridgeApi, Decision, RuleList, Snapshot
from omp_a2a_bridge.server.present.textsafe import safe

from .autostart import Autostart
from .clipboard import copy_text
from .menu import Action, ActionKind


class ActionHost(Protocol):
    """What the actions use of the app: its API, its last snapshot, the desktop helpers it was
    given, its notifications, its login item and its icon.

    Why a Protocol: :class:`~tray.app.TrayApp` (the one implementation) builds its
    :class:`MenuActions` from this module; naming its class here would make the two modules
    import each other.
    """

    autostart_on: bool | None  # written back after a toggle

    @property
    def api(self) -> BridgeApi: ...

    @property
    def snap(self) -> Snapshot | None: ...

    @property
    def autostart(self) -> Autostart: ...

    @property
    def icon(self) -> Any: ...

    @property
    def copier(self) -> Callable[[str], None] | None: ...

    @property
    def opener(self) -> Callable[[str], None]: ...

    @property
    def browser(self) -> Callable[[str], Any]: ...

    def notify(self, message: str, heading: str = ...) -> None: ...

    def request_stop(self) -> None: ...

    def read_autostart(self) -> bool | None: ...


class MenuActions:
    """Each menu action as one small method on the app's API and desktop helpers."""

    def __init__(self, app: ActionHost) -> None:
        self.app = app

    def run(self, action: Action) -> None:
        """On the UI thread (pystray) or the SNI worker thread; raises on failure (the app
        shows the error state)."""
        kind, *rest = action
        app = self.app
        api, snap = app.api, app.snap
        if kind == ActionKind.DECIDE:
            call_id, decision = rest
            if not api.decide(call_id, Decision(decision), approver=ApproverKind.TRAY):
                app.notify("That call is no longer waiting (decided, cancelled or timed out).")
        elif kind == ActionKind.DENY_ALL and snap is not None:
            for p in snap.pending:
                api.decide(p.id, Decision.DENY, approver=ApproverKind.TRAY)
        elif kind == ActionKind.BATCH:
            decision, *ids = rest
            out = api.decide_batch(list(ids), Decision(decision), approver=ApproverKind.TRAY)
            if out.gone:
                app.notify(f"{len(out.gone)} of those calls were no longer waiting.")
        elif kind == ActionKind.END_SESSION:
            api.end_session(rest[0])
        elif kind == ActionKind.RESTART_SERVER:
            api.restart_server(rest[0])
        elif kind == ActionKind.RULE_REMOVE:
            self.in_worker(self.remove_rule, RuleList(rest[0]), rest[1])
        elif kind == ActionKind.GRANT_REVOKE:
            api.revoke_grant(rest[0], rest[1])
        elif kind == ActionKind.PAUSE:
            api.pause(rest[0] == "on")
        elif kind == ActionKind.AUTOSTART:
            self.in_worker(self.toggle_autostart, rest[0] == "on")
        elif kind == ActionKind.COPY_URL and snap is not None:
            self.in_worker(self.copy, snap.url, "connection URL", True)
        elif kind == ActionKind.COPY_CONFIG and snap is not None:
            config = json.dumps(api.client_config(), indent=2)
            self.in_worker(self.copy, config, "client config", False)
        elif kind == ActionKind.COPY_TOKEN:
            self.in_worker(self.copy, api.token, "token", False)
        elif kind == ActionKind.ROTATE:
            self.in_worker(self.rotate)
        elif kind == ActionKind.OPEN_AUDIT:
            self.open(api.audit_path)
        elif kind == ActionKind.SHOW_LOGS:
            self.open(api.log_path)
        elif kind == ActionKind.REVOKE_MACHINE:
            self.in_worker(self.revoke_machine, rest[0])
        elif kind == ActionKind.RECONNECT_TUNNEL:
            self.in_worker(self.reconnect_tunnel, rest[0])
        elif kind == ActionKind.OPEN_CONFIG:
            self.open(os.path.dirname(api.config_path))
        elif kind in (ActionKind.OPEN_PAGE, ActionKind.OPEN_CALL):
            if api.control is not None:
                # A one-time login page opened by path: the code is never on the browser's
                # command line; it opens the page at that call.
                anchor = f"#call-{rest[0]}" if kind == ActionKind.OPEN_CALL else ""
                app.browser(api.login_page(anchor))
        elif kind == ActionKind.QUIT:
            app.request_stop()

    def in_worker(self, fn: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=fn, args=args, daemon=True).start()

    def remove_rule(self, which: RuleList, rule: str) -> None:
        try:
            self.app.api.remove_rule(which, rule)
        except Exception as e:
            self.app.notify(f"Rule not removed: {safe(e)}")
            return
        # A rule may hold a path or a value an agent wrote: rendered like any agent text.
        self.app.notify(f"Removed the rule {safe(rule)} ({which}).")

    def copy(self, text: str, what: str, may_show: bool) -> None:
        problem = copy_text(text, copier=self.app.copier)
        if problem is None:
            self.app.notify(f"Copied the {what}.")
            return
        # Never put the token in a notification or the log; the URL is fine to show.
        shown = f" It is: {text}" if may_show else " Run 'a2a-bridge client-config' instead."
        self.app.notify(f"Could not copy the {what}: {problem}.{shown}")

    def rotate(self) -> None:
        try:
            self.app.api.rotate_token()
        except Exception as e:
            self.app.notify(f"Token not rotated: {e}")
            return
        self.app.notify(
            "Token rotated: the old one no longer works. Update remote client configs "
            "('Copy client config' has the new token)."
        )

    def revoke_machine(self, name: str) -> None:
        """Only from the confirming submenu (*Revoke…* → *Revoke*); a config write: a worker."""
        try:
            removed = self.app.api.remove_machine(name)
        except Exception as e:
            self.app.notify(f"Machine {safe(name)} not revoked: {safe(e)}")
            return
        if not removed:
            self.app.notify(f"There is no machine {safe(name)} any more.")
            return
        self.app.notify(
            f"Revoked {safe(name)}: its sessions ended and its token no longer works. "
            "Other machines keep working."
        )

    def reconnect_tunnel(self, name: str) -> None:
        try:
            found = self.app.api.reconnect_tunnel(name)
        except Exception as e:
            self.app.notify(f"Tunnel {safe(name)} not restarted: {safe(e)}")
            return
        if not found:
            self.app.notify(f"There is no tunnel {safe(name)} any more.")

    def toggle_autostart(self, on: bool) -> None:
        app = self.app
        try:
            app.autostart.enable() if on else app.autostart.disable()
        except Exception as e:
            app.notify(f"Could not change 'Start at login': {e}")
        app.autostart_on = app.read_autostart()
        if app.icon is not None:
            app.icon.update_menu()

    def open(self, path: str) -> None:
        try:
            self.app.opener(path)
        except Exception as e:
            self.app.notify(f"Could not open {path}: {e}")
