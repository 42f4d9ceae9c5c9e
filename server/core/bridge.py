"""The bridge's state: routing of MCP methods, sessions, in-flight calls, pause/shutdown,
rules and grants, and publishing snapshots to the UIs.

Everything here runs on the bridge thread's event loop. The HTTP layer (:mod:`server.mcp.http`)
runs the whole order of checks and hands over messages that passed it (:meth:`Bridge.dispatch`
is its last step); a ``tools/call`` goes on to the :class:`~server.core.pipeline.CallPipeline`.
Other threads reach the bridge only through :class:`server.core.runner.BridgeRunner`.

(A little over 400 lines: one class whose jobs share its state — sessions, the in-flight
table and the publishing of snapshots; the call pipeline, the rules and the wire checks live in
their own modules.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..control.controlfile import runtime_dir
from ..infra.audit import AuditLog
from ..infra.childenv import build_env
from ..infra.config import Config
from ..infra.tokens import TokenStore
from ..mcp.protocol import (
    METHOD_NOT_FOUND,
    Reply,
    error_body,
    initialize_result,
    negotiate_version,
    result_body,
)
from ..mcp.sessions import Session, SessionTable
from ..policy.paths import PathPolicy
from ..policy.rulebook import RuleBook
from ..policy.rules import RuleList, RuleSet
from ..tools.base import Tool
from ..tools.registry import ToolRegistry
from ..types import GrantView, PendingCall, SessionView, Snapshot
from ..vocab import Tier
from .approvals import ApprovalBroker, Decision, Ending
from .pipeline import CallHandle, CallPipeline, explain_call

log = logging.getLogger("a2a-bridge")


@dataclass
class BridgeOptions:
    config: Config
    tokens: TokenStore
    audit: AuditLog
    tools: list[Tool] = field(default_factory=list)
    discover_tools: bool = True
    session_table: SessionTable | None = None


def pins_path(cfg: Config) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(cfg.path)), "upstream-pins.json")


def path_policy(cfg: Config, audit_path: str) -> PathPolicy:
    """The path policy of a bridge with this config: the live one and the offline
    ``rules test`` build it here, so both judge a path the same way."""
    return PathPolicy(
        cfg.roots,
        cfg.sensitive_paths,
        own_files=(
            (cfg.path, "bridge config, may hold the token"),
            (audit_path, "audit log"),
            # Pins decide whether a changed upstream tool keeps its allow rules.
            (pins_path(cfg), "upstream tool pins"),
        ),
        own_dirs=((runtime_dir(), "bridge control file"),),
        remove=cfg.protected_remove,
    )


def offline_explain(
    cfg: Config, audit_path: str, name: str, args: dict[str, Any]
) -> dict[str, Any]:
    """``a2a-bridge rules test`` with no bridge running: the live bridge's judgement
    (:func:`~server.core.pipeline.explain_call`) on a registry, path policy and tiers built from
    the saved config. Upstream MCP tools are unknown here (nothing is connected)."""
    from ..box import probe  # whether bash would run in the box, as the live bridge knows
    from ..tools.builtin import builtin_tools  # the tools' modules, only for this command

    probe.probe()
    registry = ToolRegistry(cfg.deny, cfg.deny_mcp_tools)
    for tool in builtin_tools(cfg.bash_env):
        registry.add(tool)
    registry.discover()
    policy = path_policy(cfg, audit_path)

    def tier(tool: Tool) -> Tier:
        return cfg.tiers.get(tool.name) or tool.default_tier or cfg.default_tier

    return explain_call(registry, policy, cfg.rules, tier, name, args)


class Bridge:
    def __init__(self, opts: BridgeOptions) -> None:
        cfg = opts.config
        self.config = cfg
        self.tokens = opts.tokens
        self.audit = opts.audit
        self.sessions = SessionTable() if opts.session_table is None else opts.session_table
        self.registry = ToolRegistry(cfg.deny, cfg.deny_mcp_tools)
        for tool in opts.tools:
            self.registry.add(tool)
        if opts.discover_tools:
            self.registry.discover()
        self.policy = path_policy(cfg, opts.audit.path)
        self.broker = ApprovalBroker(
            on_change=self._pending_changed,
            max_pending=cfg.max_pending,
            max_pending_per_session=cfg.max_pending_per_session,
        )
        self.rulebook = RuleBook(cfg.rules, cfg.path, self.policy.roots[0], self.set_rules)
        self.pipeline = CallPipeline(
            self, cfg, self.registry, self.policy, self.broker, opts.audit, self.rulebook
        )
        self.paused = False
        self.closing = False
        self.unauthorized = 0
        self.url = ""
        self.control_url = ""
        self.host = cfg.host
        self.port = cfg.port
        self.warnings: list[str] = []
        self.inflight: dict[tuple[str, Any], CallHandle] = {}
        self._listing: list[dict[str, Any]] | None = None
        self._listing_json: tuple[list[dict[str, Any]], bytes] | None = None
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._seq = 0
        self._publish_scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.audit.on_failure = self._audit_failed
        self._bash_env: tuple[str | None, dict[str, str]] | None = None
        self.upstreams: Any = (
            None  # server.upstream.manager.UpstreamManager, when servers are configured
        )
        if cfg.mcp_servers:
            from ..upstream.manager import UpstreamManager  # imports the mcp SDK: only when needed

            self.upstreams = UpstreamManager(
                cfg.mcp_servers,
                self.registry,
                self._pins_path(cfg),
                lambda: self.tokens.token if self.tokens.state else None,
                self._upstreams_changed,
                default_cwd=self.policy.roots[0],
                box=self.pipeline.box,
            )

    def child_env(self) -> dict[str, str]:
        """What ``bash`` runs with: the safe list plus ``bash.env`` (server/infra/childenv.py).

        Built once per token (a value holding the token is withheld), not per call; the
        names the config asked for but that were refused are logged once.
        """
        secret = self.tokens.token if self.tokens.state else None
        cached = self._bash_env
        if cached is not None and cached[0] == secret:
            return cached[1]
        built = build_env(self.config.bash_env, secret)
        if built.withheld and cached is None:
            log.warning(
                "bash environment: %s withheld (secret-looking names reached by a bash.env.pass "
                "glob, or holding the token); list a name exactly in bash.env.pass to pass it",
                ", ".join(built.withheld),
            )
        self._bash_env = (secret, built.env)
        return built.env

    @staticmethod
    def _pins_path(cfg: Config) -> str:
        return pins_path(cfg)

    def _upstreams_changed(self, tools: bool) -> None:
        if tools:
            self._listing = None  # tools/list is rebuilt from the registry
        self._changed()

    def _audit_failed(self) -> None:
        """From the audit thread: republish so UIs show the warning."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._changed, True)

    # -- auth ---------------------------------------------------------------------------------

    def note_unauthorized(self) -> None:
        self.unauthorized += 1
        n = self.unauthorized
        if n == 1 or n % 50 == 0:
            log.warning("%d unauthorized attempt(s) - check the token in the client's config", n)

    @property
    def rules(self) -> RuleSet:
        """The rules in force (the pipeline judges calls by them)."""
        return self.rulebook.rules

    @property
    def calls_total(self) -> int:
        return self.pipeline.calls_total

    # -- the catalogue --------------------------------------------------------------------------

    def _listing_body(self, req_id: Any) -> bytes:
        """The tools/list response, serialised once per catalogue change."""
        listing = self.listing()
        if self._listing_json is None or self._listing_json[0] is not listing:
            result = json.dumps({"tools": listing}, separators=(",", ":"), ensure_ascii=False)
            self._listing_json = (listing, result.encode())
        return b"".join(
            (
                b'{"jsonrpc":"2.0","id":',
                json.dumps(req_id).encode(),
                b',"result":',
                self._listing_json[1],
                b"}",
            )
        )

    def listing(self) -> list[dict[str, Any]]:
        if self._listing is None:
            # Built-in tools first in their order, then upstream tools by name: deterministic
            # whichever upstream answered first.
            tools = sorted(
                self.registry.all(),
                key=lambda t: (t.name.startswith("mcp__"), t.name if t.name[:5] == "mcp__" else ""),
            )
            exposed = self.pipeline.exposed
            self._listing = [t.describe() for t in tools if exposed(t.name) is not None]
        return self._listing

    # -- routing (the order of checks itself is in server.mcp.http) -------------------------

    def touch_session(self, sid: str) -> Session | None:
        """Step 6: the live session the header names (its idle timer refreshed), or None."""
        session = self.sessions.touch(sid)
        if session is not None:
            self._changed()
        return session

    def dispatch(
        self, msg: dict[str, Any], session: Session | None, handle: CallHandle | None = None
    ) -> Reply | Coroutine[Any, Any, Reply]:
        """Step 9: run the method. ``session`` is None only for ``initialize``."""
        method: str = msg["method"]
        req_id = msg.get("id")
        if method == "initialize":
            return self._initialize(msg)
        assert session is not None
        if method == "ping":
            return Reply(200, result_body(req_id, {}))
        if method == "tools/list":
            return Reply(200, self._listing_body(req_id))
        if method == "tools/call":
            return self.pipeline.tools_call(session, req_id, msg.get("params"), handle)
        return Reply(200, error_body(req_id, METHOD_NOT_FOUND, "method not found"))

    def _initialize(self, msg: dict[str, Any]) -> Reply:
        params = msg.get("params")
        info = params.get("clientInfo") if isinstance(params, dict) else None
        protocol_version = negotiate_version(params)
        session, evicted = self.sessions.create(info, protocol_version)
        if evicted is not None:
            self.broker.end_where(Ending.SESSION_ENDED, evicted.sid)
        self._changed()
        return Reply(
            200,
            result_body(msg.get("id"), initialize_result(__version__, protocol_version)),
            {"mcp-session-id": session.sid},
        )

    def end_session(self, sid: str) -> bool:
        """The tray's "End session" or the control API: pending calls of it end at once.

        The client did not give them up, so they get an answer (``session ended ...``).
        """
        if not self.remove_session(sid):
            return False
        self.broker.end_where(Ending.SESSION_ENDED, sid)
        return True

    def remove_session(self, sid: str) -> bool:
        """Drop the session from the table (later requests naming it get 404)."""
        if self.sessions.remove(sid) is None:
            return False
        self._changed()
        return True

    def end_held_calls(self, sid: str) -> None:
        """A DELETE: end the session's calls that still wait for approval, before its 204.

        The client that ends its session has given up on them, as with its own cancel, so each
        held POST ends with a bare ``202`` and no JSON-RPC response. A JSON answer here is what
        the 1.x Python SDK transport (its read stream already closed when it sends DELETE)
        logged as ``Error parsing JSON response`` in 45-60% of exits, whichever came first;
        a 202 it ignores by design. The 202 goes out just *before* the 204: the TS SDK closes
        at once on the 204 and reported the still-open POST as aborted every time when the
        order was the other way (measured, 40/40); no SDK measured minded this order.
        """
        for (owner, _), handle in list(self.inflight.items()):
            if owner == sid and handle.pending_id is not None and not handle.cancelled:
                handle.cancelled = True
                self.broker.end(handle.pending_id, Ending.CANCELLED)
                if handle.answer is not None:
                    handle.answer(Reply(202))
        self.broker.end_where(Ending.SESSION_ENDED, sid)

    # -- cancellation and disconnects ------------------------------------------------------------

    def cancel(self, sid: str, params: Any) -> bool:
        """End the named call of this session; True when there was one to end."""
        if not isinstance(params, dict) or "requestId" not in params:
            return False
        try:
            handle = self.inflight.get((sid, params["requestId"]))
        except TypeError:  # an unhashable requestId names nothing
            return False
        if handle is None or handle.cancelled:
            return False
        handle.cancelled = True
        if handle.pending_id is not None:
            self.broker.end(handle.pending_id, Ending.CANCELLED)
        elif handle.task is not None:
            handle.task.cancel()
        if handle.answer is not None:
            # The held POST ends now, before the notification's own 202: a client that tears
            # down right after its timeout (the official SDKs do) finds nothing still open.
            handle.answer(Reply(202))
        return True

    def connection_closed(self, handle: CallHandle) -> None:
        """The client hung up while its call was held: withdraw a pending approval.

        A tool that is already running is left to finish (disconnection is not cancellation in
        MCP); its result and audit record still land.
        """
        if handle.pending_id is not None:
            self.broker.end(handle.pending_id, Ending.DISCONNECTED)
        elif handle.cancel_on_disconnect and handle.task is not None and not handle.cancelled:
            handle.cancelled = True  # an upstream call: the upstream is told it was cancelled
            handle.task.cancel()

    # -- control (called on the bridge thread by the runner) ------------------------------------

    def decide(
        self,
        call_id: str,
        decision: Decision,
        reason: str | None = None,
        approver: str | None = None,
        rule: str | None = None,
    ) -> bool:
        """Apply a human decision; "Always allow" saves ``rule`` (edited) or the proposal.

        Raises :class:`DecisionError` when there is no rule to save (the call always asks)
        or the edited rule is invalid; False when the call is no longer pending.
        """
        if decision is Decision.ALLOW_ALWAYS:
            p = self.broker.get(call_id)
            if p is None:
                return False
            rule = self.rulebook.rule_to_save(p, rule)
        return self.broker.decide(call_id, decision, reason, approver=approver, rule=rule)

    # -- rules and grants (on the bridge thread; file writes happen in a worker) ----------------

    def set_rules(self, rules: RuleSet) -> None:
        self.rulebook.rules = rules
        self._changed(now=True)

    def add_rules(self, which: RuleList, texts: list[str]) -> None:
        """Effective at once in memory, then saved to the config (re-read, unknown keys kept)."""
        assert self.loop is not None
        self.rulebook.add(which, texts, self.loop)

    def explain(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """What would happen to this call now (no session grant counted): for "test a rule"."""
        return self.pipeline.explain(name, args)

    def grants(self) -> tuple[GrantView, ...]:
        return tuple(
            GrantView(s.sid, s.client_name, tool)
            for s in self.sessions.all()
            for tool in sorted(s.allowed_tools)
        )

    def revoke_grant(self, sid: str, tool: str) -> bool:
        session = self.sessions.get(sid)
        if session is None or tool not in session.allowed_tools:
            return False
        session.allowed_tools.discard(tool)
        self._changed(now=True)
        return True

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if paused:
            self.broker.end_where(Ending.PAUSED)
        self._changed(now=True)

    def begin_shutdown(self) -> None:
        """New calls are refused and pending approvals denied; running tools may finish.

        The runner cancels whatever still runs after its grace period (``cancel_running``).
        """
        self.closing = True
        self.broker.end_where(Ending.SHUTDOWN)
        self._changed(now=True)

    def start_upstreams(self) -> None:
        """Connect the configured upstream MCP servers in the background (never blocks)."""
        if self.upstreams is not None:
            self.upstreams.start()

    async def stop_upstreams(self, timeout: float) -> None:
        if self.upstreams is not None:
            await self.upstreams.stop(timeout)

    def restart_upstream(self, name: str) -> bool:
        return self.upstreams is not None and self.upstreams.restart(name)

    def cancel_running(self) -> None:
        for handle in list(self.inflight.values()):
            if handle.task is not None:
                handle.task.cancel()

    # -- snapshots ----------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def snapshot(self) -> Snapshot:
        self._seq += 1
        state = self.tokens.state
        return Snapshot(
            seq=self._seq,
            url=self.url,
            control_url=self.control_url,
            host=self.host,
            port=self.port,
            paused=self.paused,
            running=not self.closing,
            sessions=tuple(
                SessionView(
                    s.sid,
                    s.client_name,
                    s.client_version,
                    s.created,
                    s.last_seen_wall,
                    s.calls,
                    s.pending,
                    s.protocol_version,
                )
                for s in self.sessions.all()
            ),
            pending=tuple(self.broker.pending()),
            approvers=tuple(self.broker.approvers),
            token_source=state.source if state else "",
            warnings=tuple(self.warnings) + self._audit_warning(),
            calls_total=self.calls_total,
            servers=self.upstreams.views() if self.upstreams is not None else (),
            rules=self.rules,
            grants=self.grants(),
        )

    def _audit_warning(self) -> tuple[str, ...]:
        if self.audit.failures:
            return (f"the audit log {self.audit.path} cannot be written; calls are not recorded",)
        return ()

    def _pending_changed(self) -> None:
        self._changed(now=True)

    def _changed(self, now: bool = False) -> None:
        """Tell subscribers; pending changes go out at once, the rest coalesce per loop turn."""
        if not self._subscribers:
            return
        if now:
            self._publish()
        elif not self._publish_scheduled and self.loop is not None:
            self._publish_scheduled = True
            self.loop.call_soon(self._publish)

    def _publish(self) -> None:
        self._publish_scheduled = False
        snap = self.snapshot()
        for cb in list(self._subscribers):
            try:
                cb(snap)
            except Exception:
                log.exception("snapshot subscriber failed")

    # --- for the facade (server.core.runner.BridgeRunner; thread-safe where it says so)

    def publish_now(self) -> None:
        """Publish a snapshot at once (an approver came or went, the token changed)."""
        self._changed(now=True)

    def attach_approver(self, name: str) -> int:
        """Thread-safe (the broker locks); the caller publishes."""
        return self.broker.attach(name)

    def detach_approver(self, handle: int) -> None:
        """Thread-safe (the broker locks); the caller publishes."""
        self.broker.detach(handle)

    def pending_call(self, call_id: str) -> PendingCall | None:
        return self.broker.get(call_id)
