"""The one API every front end uses: what the tray, the approval page, ``watch`` and the CLI
may ask of the bridge.

Why a Protocol: the same actions exist in process and over HTTP, and they used to be written
three times (the tray through the runner, the control API's handlers reaching into the bridge,
the CLI building requests). Now there is one list of them:

- :class:`BridgeControl` — the actions (decide, pause, end a session, rotate the token, rules,
  grants, servers, the client config, the audit tail, a page login link). Implemented in
  process by :class:`~server.core.runner.BridgeRunner` and over HTTP by
  :class:`~server.control.client.ControlClient`; the control API
  (:mod:`server.control.server`) is its HTTP form and calls nothing else.
- :class:`BridgeApi` — those plus what only an in-process front end can have: immutable
  snapshots (:mod:`server.types`'s types), a subscription to them, approvers attached by
  handle, the token itself, the lifecycle. The tray and the control API's handlers hold one.
  (Over HTTP the snapshot is ``GET /api/status`` and "subscribe + attach" is the events
  WebSocket: ``ControlClient`` offers those as JSON, since that is what the CLI prints.)

Errors: every method raises a :class:`~server.errors.BridgeError` subclass for a refusal the
user should read (a bad rule, a rotation that cannot happen, a request the API refused);
``False`` means "not there any more" (the call was decided, the session ended).

This module holds no behaviour. It imports only the modules that define its vocabulary (the
data types, the enums, the errors), never the bridge, the runner or the control API
(``tests/architecture/test_boundaries.py`` checks it, type-only imports included); the in-process
implementation is built by :func:`server.local.local_bridge`, and each implementation proves
it conforms in its own module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .errors import AlreadyRunning, BridgeError, StartupError
from .policy.judge import Judgement
from .policy.rules import RuleList, RuleSet
from .types import (
    BatchOutcome,
    DecisionError,
    Exposure,
    GrantView,
    MachineView,
    NewMachine,
    PendingCall,
    ServerView,
    SessionView,
    Snapshot,
    TierChange,
    TunnelView,
    UpstreamInfo,
)
from .vocab import ApproverKind, Decision, TokenSource

if TYPE_CHECKING:
    from .control.info import ControlInfo

__all__ = [
    "AlreadyRunning",
    "ApproverKind",
    "BatchOutcome",
    "BridgeApi",
    "BridgeControl",
    "BridgeError",
    "Decision",
    "DecisionError",
    "Exposure",
    "GrantView",
    "Judgement",
    "MachineView",
    "NewMachine",
    "PendingCall",
    "RuleList",
    "RuleSet",
    "ServerView",
    "SessionView",
    "Snapshot",
    "StartupError",
    "TierChange",
    "TokenSource",
    "TunnelView",
    "UpstreamInfo",
]


@runtime_checkable
class BridgeControl(Protocol):
    """The actions, the same in process and over HTTP."""

    def decide(
        self,
        call_id: str,
        decision: Decision | str,
        reason: str | None = None,
        approver: str | None = None,
        rule: str | None = None,
    ) -> bool:
        """Apply a human decision; False when the call no longer waits. ``rule``: the edited
        rule(s) "Always allow" saves (raises when invalid or when no rule can apply)."""
        ...

    def decide_batch(
        self,
        ids: list[str],
        decision: Decision | str,
        reason: str | None = None,
        approver: str | None = None,
    ) -> BatchOutcome:
        """*Approve all N* / *Deny all N*: approve or deny exactly the calls ``ids`` (as listed
        when the human clicked; never a call that arrives after), which must all be of one
        kind (:mod:`server.present.batch`). Ids no longer waiting come back in ``gone``;
        raises :class:`DecisionError` (nothing decided) when the calls are not of one kind."""
        ...

    def pause(self, paused: bool) -> None:
        """Pause (every waiting and new call ends ``paused``) or resume."""
        ...

    def end_session(self, sid: str) -> bool:
        """End a live session like its client's DELETE; False when there is none."""
        ...

    def rotate_token(self) -> TokenSource:
        """Store a new MCP token, then switch to it (the old one stops working at once);
        returns where it is stored. Blocks on the keyring: not on a UI or event-loop thread."""
        ...

    def revoke_grant(self, sid: str, tool: str) -> bool:
        """Revoke an "Allow for this session" grant; False when there is none."""
        ...

    def restart_server(self, name: str) -> bool:
        """Restart an upstream MCP server now; False when none has that name."""
        ...

    def add_rules(self, which: RuleList, texts: list[str]) -> None:
        """Add rules to a list: saved to the config (a file write) and effective at once."""
        ...

    def remove_rule(self, which: RuleList, key: str) -> None:
        """Remove one rule, by its text or its index in the list (raises when absent)."""
        ...

    def test_rule(
        self, tool: str, arguments: dict[str, Any], machine: str | None = None
    ) -> Judgement:
        """What the one judge rules for this call now (no session grant counted; ``machine``:
        as if from that machine, so rules scoped to it count); its JSON form is
        :func:`server.present.views.judgement_json`."""
        ...

    def add_machine(self, name: str) -> NewMachine:
        """Mint a token for a new remote machine (saved first, the secret in the keyring
        where one works) and let it in at once; raises when the name is invalid or taken.
        Blocks on the keyring: not on a UI or event-loop thread."""
        ...

    def remove_machine(self, name: str) -> bool:
        """Revoke a machine: its token never works again (also after a restart), its
        sessions end now; False when there is none. ``default`` is rotated, not removed.
        Writes the config: not on a UI or event-loop thread."""
        ...

    def client_config(self) -> dict[str, Any]:
        """The MCP client config snippet for this bridge, token included."""
        ...

    def audit_tail(self, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` calls of the audit log, start and done paired, agent text safe.
        Reads files: not on a UI or event-loop thread."""
        ...

    def log_tail(self, limit: int) -> dict[str, Any]:
        """``{"path", "lines"}``: the last ``limit`` lines of the bridge's log file, each
        rendered safe (the page's *Show logs*). Reads files: not on a UI or event-loop thread."""
        ...

    def login_url(self) -> str:
        """A one-time link that logs a browser into the approval page (60 s, first use)."""
        ...

    def add_tunnel(
        self, name: str, target: str, remote_port: int | None = None, client: str | None = None
    ) -> None:
        """Save a tunnel (``ssh -N -R``) to ``target`` and start it now (one of that name is
        replaced); ``remote_port`` None: the bridge's live port. Raises a
        :class:`BridgeError` naming a bad argument. Writes the config: not on the loop."""
        ...

    def remove_tunnel(self, name: str) -> bool:
        """Stop the tunnel and forget it (config); False when there is none."""
        ...

    def reconnect_tunnel(self, name: str) -> bool:
        """Start the tunnel's ssh again now, without waiting for its back-off."""
        ...

    def install_client(self, name: str) -> str:
        """Write the tunnel's client config on its remote machine over ssh (merged; the token
        through ssh's stdin into a 0600 file); returns what changed, in one line. Runs ssh:
        not on a UI or event-loop thread."""
        ...

    def login_page(self, anchor: str = "") -> str:
        """A ``file://`` URL of a one-time login page (0600, in the runtime directory) that
        opens the approval page at ``anchor``: what a browser is started with, so the code is
        never on its command line (other local users can read command lines)."""
        ...


@runtime_checkable
class BridgeApi(BridgeControl, Protocol):
    """Everything an in-process front end may use: the actions plus snapshots, approvers,
    the token and the lifecycle. Methods are thread-safe (they hop onto the bridge loop)."""

    @property
    def url(self) -> str:
        """The MCP URL (never contains the token)."""
        ...

    @property
    def token(self) -> str:
        """The live MCP bearer token (for *Copy token*; never logged)."""
        ...

    @property
    def config_path(self) -> str:
        """The config file (the tray opens its folder)."""
        ...

    @property
    def audit_path(self) -> str:
        """The audit log (the tray opens it)."""
        ...

    @property
    def log_path(self) -> str:
        """The bridge's log file, what it prints on stderr (the tray's *Show logs* opens it);
        snapshots carry it too, with what is exposed (:class:`~server.types.Exposure`)."""
        ...

    @property
    def running(self) -> bool: ...

    @property
    def control(self) -> ControlInfo | None:
        """The control API's address and secret, when it runs."""
        ...

    def start(self, timeout: float = 15.0) -> Snapshot:
        """Load config and token, bind, serve; raises :class:`StartupError` or
        :class:`AlreadyRunning`."""
        ...

    def stop(self, timeout: float = 5.0) -> None:
        """Stop gracefully (waiting calls end with ``bridge shutting down``); idempotent."""
        ...

    def release_control_file(self) -> None:
        """The last resort of a watchdog: the control file must not outlive the process."""
        ...

    def snapshot(self) -> Snapshot: ...

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]:
        """``callback(snapshot)`` on the bridge thread after changes; returns the
        unsubscribe. A waiting call's arrival or end goes out at once, other changes coalesce
        (at most one snapshot per 50 ms, the last state always delivered). Callbacks must be
        quick and hand the snapshot to their own thread."""
        ...

    def attach_approver(self, name: str) -> int:
        """While at least one approver is attached, prompt-tier calls wait for a human."""
        ...

    def detach_approver(self, handle: int) -> None: ...

    def pending_call(self, call_id: str) -> PendingCall | None:
        """One waiting call with its full arguments (snapshots carry them too, but this
        finds one without building a snapshot)."""
        ...

    def servers(self) -> tuple[ServerView, ...]:
        """Upstream MCP servers with their whole stderr ring."""
        ...

    def rules(self) -> RuleSet: ...

    def grants(self) -> tuple[GrantView, ...]: ...

    def tunnels(self) -> tuple[TunnelView, ...]:
        """The tunnels the app keeps up, with their state (``Snapshot.tunnels`` too)."""
        ...

    def machines(self) -> tuple[MachineView, ...]:
        """The remote machines, ``default`` first (snapshots carry them too)."""
        ...
