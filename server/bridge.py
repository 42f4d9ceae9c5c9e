"""The bridge's state and the MCP methods: sessions, the tool pipeline, approvals, snapshots.

Everything here runs on the bridge thread's event loop. The HTTP layer (:mod:`server.http`)
hands over messages that passed the header and shape checks; other threads reach the bridge
only through :class:`server.runner.BridgeRunner`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .approvals import ApprovalBroker, Decision, Ending, PendingCall, Verdict
from .audit import AuditLog, utc_now
from .config import Config, edit_config
from .controlfile import runtime_dir
from .paths import CallPaths, Escalation, EscalationKind, PathPolicy
from .protocol import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    SERVER_ERROR,
    error_body,
    initialize_result,
    negotiate_version,
    not_exposed_text,
    result_body,
)
from .rules import (
    PATH_TOOLS,
    Kind,
    RuleError,
    RuleList,
    RuleSet,
    edit_raw_rules,
    evaluate,
    parse_rule_lines,
    propose,
)
from .sessions import Session, SessionTable
from .tokens import TokenStore
from .tools import pools
from .tools.base import Tool, ToolContext, ToolError, ToolResult
from .tools.registry import ToolRegistry
from .upstream_config import ServerView

log = logging.getLogger("a2a-bridge")

PAUSED_TEXT = "bridge paused by the user"
NO_APPROVER_TEXT = (
    "approval required but no approver is available: the user must open the tray, "
    "the approval page or `a2a-bridge watch`"
)
SHUTDOWN_TEXT = "bridge shutting down"
SESSION_ENDED_TEXT = "session ended before the call was approved"
TOO_MANY_TEXT = "too many calls waiting for approval"
DISCONNECTED_TEXT = "client disconnected before the call was approved"


@dataclass(frozen=True, slots=True)
class SessionView:
    sid: str
    client: str
    version: str
    created: float
    last_seen: float
    calls: int
    pending: int
    protocol: str = "2025-11-25"  # the MCP revision negotiated in initialize


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable picture of the bridge for UIs on other threads."""

    seq: int
    url: str
    control_url: str
    host: str
    port: int
    paused: bool
    running: bool
    sessions: tuple[SessionView, ...]
    pending: tuple[PendingCall, ...]
    approvers: tuple[str, ...]
    token_source: str
    warnings: tuple[str, ...]
    calls_total: int
    servers: tuple[ServerView, ...] = ()  # upstream MCP servers (server.upstream)
    rules: RuleSet = field(default_factory=RuleSet)
    grants: tuple[GrantView, ...] = ()


@dataclass(frozen=True, slots=True)
class GrantView:
    """An "Allow for this session" grant: this session's calls of ``tool`` run unattended."""

    sid: str
    client: str
    tool: str


class DecisionError(ValueError):
    """A decision that cannot be applied as asked (e.g. an invalid edited rule)."""


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] | None = None


@dataclass(slots=True)
class CallHandle:
    """A tools/call in flight, so a cancel or a disconnect can find and end it."""

    pending_id: str | None = None
    task: asyncio.Task[Any] | None = None  # set while the tool runs
    cancelled: bool = False
    disconnected: bool = False
    cancel_on_disconnect: bool = False  # set while a tool runs that wants it (upstream calls)
    answer: Callable[[Reply], None] | None = None  # the HTTP layer's writer for this call


@dataclass(slots=True)
class _Outcome:
    result: ToolResult | None  # None: cancelled (202 if by the client, else a -32800 error)
    outcome: str
    decided_by: str
    wait_ms: int = 0
    queue_ms: int = 0  # time the tool's work waited for a pool worker (tools/pools.py)
    reason: str | None = None  # the user's words on a deny, or why the bridge refused
    approver: str | None = None  # which UI decided
    rule: str | None = None  # the rule that decided (or asked), for the audit record


@dataclass(slots=True)
class _Call:
    session: Session
    req_id: Any
    id: str  # the bridge's own UUID, pairs the audit records
    name: str
    args: Any
    started: float
    finished: bool = False  # the done record is written exactly once


@dataclass(slots=True)
class _Plan:
    """A call that passed every check: which tool, its context, and who decides."""

    tool: Tool
    ctx: ToolContext
    decided_by: str  # "policy" | "session_rule" | "user" (after approval)
    needs_human: bool
    escalation: Escalation | None
    rule: str | None = None  # the rule that allowed or asked
    can_propose: bool = True  # False: no allow rule could ever apply (ask rule, always-asks)


def always_asks(escalation: object) -> bool:
    """An escalation no rule may cover. Uses ``Escalation.always_asks`` (branch pathpolicy);
    a plain-text escalation (today's) is treated as always asking."""
    if escalation is None:
        return False
    return bool(getattr(escalation, "always_asks", True))


def safe_body(req_id: Any, result: dict[str, Any] | None) -> bytes:
    """A JSON-RPC result (or ``-32800`` when ``result`` is None) that always serialises.

    Client text can carry lone surrogates (a path, an id) that UTF-8 cannot encode: those are
    written as ``\\uXXXX`` escapes instead of failing the reply (and, once, auditing the call
    twice).
    """
    try:
        if result is None:
            return error_body(req_id, REQUEST_CANCELLED, "request cancelled")
        return result_body(req_id, result)
    except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
        pass
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id}
    if result is None:
        msg["error"] = {"code": REQUEST_CANCELLED, "message": "request cancelled"}
    else:
        msg["result"] = result
    try:
        return json.dumps(msg, separators=(",", ":")).encode()  # ASCII: surrogates escaped
    except (ValueError, TypeError, RecursionError):
        log.error("reply to a tools/call could not be serialised; answered with an error")
        return error_body(None, INTERNAL_ERROR, "internal error")


def _ok(result: ToolResult) -> str:
    return "error" if result.is_error else "ok"


def _bad_input(name: str, e: Exception, decided_by: str = "policy", wait_ms: int = 0) -> _Outcome:
    """Arguments the OS cannot take (lone surrogates, NUL bytes): one line, no traceback."""
    if isinstance(e, UnicodeError):
        why = "a string is not valid Unicode (lone surrogate?)"
    else:
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
    log.info("tools/call %r refused: %s", name[:64], why)
    text = f"invalid arguments for '{name[:64]}': {why}"
    return _Outcome(ToolResult.text(text, True), "error", decided_by, wait_ms)


def _internal(name: str) -> _Outcome:
    return _Outcome(
        ToolResult.text(f"tool '{name}' failed: internal error", True), "error", "policy"
    )


@dataclass
class BridgeOptions:
    config: Config
    tokens: TokenStore
    audit: AuditLog
    tools: list[Tool] = field(default_factory=list)
    discover_tools: bool = True
    session_table: SessionTable | None = None


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
        self.policy = PathPolicy(
            cfg.roots,
            cfg.sensitive_paths,
            own_files=(
                (cfg.path, "bridge config, may hold the token"),
                (opts.audit.path, "audit log"),
                # Pins decide whether a changed upstream tool keeps its allow rules.
                (self._pins_path(cfg), "upstream tool pins"),
            ),
            own_dirs=((runtime_dir(), "bridge control file"),),
            remove=cfg.protected_remove,
        )
        self.tiers = dict(cfg.tiers)
        self.broker = ApprovalBroker(
            on_change=self._pending_changed,
            max_pending=cfg.max_pending,
            max_pending_per_session=cfg.max_pending_per_session,
        )
        self.rules: RuleSet = cfg.rules
        self._rule_saves = 0  # "always allow" saves still being written
        self.paused = False
        self.closing = False
        self.unauthorized = 0
        self.calls_total = 0
        self.url = ""
        self.control_url = ""
        self.host = cfg.host
        self.port = cfg.port
        self.warnings: list[str] = []
        self._inflight: dict[tuple[str, Any], CallHandle] = {}
        self._listing: list[dict[str, Any]] | None = None
        self._listing_json: tuple[list[dict[str, Any]], bytes] | None = None
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._seq = 0
        self._publish_scheduled = False
        self._snapshot: Snapshot | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.audit.on_failure = self._audit_failed
        self.upstreams: Any = None  # server.upstream.UpstreamManager, when servers are configured
        if cfg.mcp_servers:
            from .upstream import UpstreamManager  # imports the mcp SDK: only when needed

            self.upstreams = UpstreamManager(
                cfg.mcp_servers,
                self.registry,
                self._pins_path(cfg),
                lambda: self.tokens.token if self.tokens.state else None,
                self._upstreams_changed,
            )

    @staticmethod
    def _pins_path(cfg: Config) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(cfg.path)), "upstream-pins.json")

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

    # -- tiers and the catalogue ---------------------------------------------------------------

    def tier(self, tool: Tool) -> str:
        return self.tiers.get(tool.name) or tool.default_tier or self.config.default_tier

    def exposed(self, name: str) -> Tool | None:
        tool = self.registry.get(name)
        if tool is None or self.tier(tool) == "deny":
            return None
        return tool

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
            self._listing = [t.describe() for t in tools if self.exposed(t.name) is not None]
        return self._listing

    # -- dispatch (steps 6-9 of the order of checks) ------------------------------------------

    def dispatch(
        self,
        msg: dict[str, Any],
        sid: str | None,
        version_header_reject: Any,
        handle: CallHandle | None = None,
    ) -> Reply | Coroutine[Any, Any, Reply]:
        method: str = msg["method"]
        req_id = msg.get("id")
        session: Session | None = None
        if method != "initialize":
            if sid is None:
                return Reply(400, error_body(req_id, SERVER_ERROR, "missing mcp-session-id"))
            session = self.sessions.touch(sid)
            if session is None:
                return Reply(404, error_body(req_id, SERVER_ERROR, "unknown session"))
            self._changed()
        if version_header_reject is not None:
            return Reply(version_header_reject.status, version_header_reject.body())
        if method.startswith("notifications/"):
            if method == "notifications/cancelled" and session is not None:
                self._cancel(session.sid, msg.get("params"))
            return Reply(202)
        if method == "initialize":
            return self._initialize(msg)
        assert session is not None
        if method == "ping":
            return Reply(200, result_body(req_id, {}))
        if method == "tools/list":
            return Reply(200, self._listing_body(req_id))
        if method == "tools/call":
            return self._tools_call(session, req_id, msg.get("params"), handle)
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
        for (owner, _), handle in list(self._inflight.items()):
            if owner == sid and handle.pending_id is not None and not handle.cancelled:
                handle.cancelled = True
                self.broker.end(handle.pending_id, Ending.CANCELLED)
                if handle.answer is not None:
                    handle.answer(Reply(202))
        self.broker.end_where(Ending.SESSION_ENDED, sid)

    # -- cancellation and disconnects ------------------------------------------------------------

    def _cancel(self, sid: str, params: Any) -> bool:
        """End the named call of this session; True when there was one to end."""
        if not isinstance(params, dict) or "requestId" not in params:
            return False
        try:
            handle = self._inflight.get((sid, params["requestId"]))
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
        handle.disconnected = True
        if handle.pending_id is not None:
            self.broker.end(handle.pending_id, Ending.DISCONNECTED)
        elif handle.cancel_on_disconnect and handle.task is not None and not handle.cancelled:
            handle.cancelled = True  # an upstream call: the upstream is told it was cancelled
            handle.task.cancel()

    # -- tools/call ------------------------------------------------------------------------------

    def _tools_call(
        self, session: Session, req_id: Any, params: Any, handle: CallHandle | None
    ) -> Reply | Coroutine[Any, Any, Reply]:
        """A finished Reply when the call completes at once, else a coroutine that finishes it.

        Most allow-tier calls never leave this function (no Task, no extra loop turn); a call
        that needs a human, or a tool that must run off the loop, continues in
        :meth:`_tools_call_async`.
        """
        if not isinstance(params, dict):
            params = {}
        name = params.get("name")
        name = name if isinstance(name, str) else ""
        args = params.get("arguments")
        if args is None:
            args = {}
        call = _Call(session, req_id, str(uuid.uuid4()), name, args, time.monotonic())
        self.calls_total += 1
        session.calls += 1
        self._audit(call, "start")
        try:
            step = self._prepare(call)
            if isinstance(step, _Outcome):
                return self._finish(call, step)
            if not step.needs_human:
                result = self._run_now(step, args)
                if result is not None:
                    out = _Outcome(result, _ok(result), step.decided_by, rule=step.rule)
                    return self._finish(call, out)
        except (UnicodeError, ValueError) as e:
            return self._finish(call, _bad_input(name, e))
        except Exception:
            log.exception("internal error: tools/call %r", name)
            return self._finish(call, _internal(name))
        return self._tools_call_async(call, step, handle or CallHandle())

    async def _tools_call_async(self, call: _Call, step: _Plan, handle: CallHandle) -> Reply:
        key = (call.session.sid, call.req_id)
        registered = False
        try:
            if call.req_id is not None and key not in self._inflight:
                self._inflight[key] = handle
                registered = True
            out = await self._run_plan(call, step, handle)
        except Exception:
            log.exception("internal error: tools/call %r", call.name)
            out = _internal(call.name)
        finally:
            if registered:
                self._inflight.pop(key, None)
        reply = self._finish(call, out)
        if out.result is None and handle.cancelled:
            # The client cancelled: MCP says no response is sent for the request, so the held
            # POST ends with a bare 202 (a -32800 body here crashed SDK clients at teardown).
            return Reply(202)
        return reply

    def _audit(self, call: _Call, phase: str, out: _Outcome | None = None) -> None:
        """Queue one audit record; never raises (the writer thread caps and serialises it)."""
        rec: dict[str, Any] = {
            "ts": utc_now(),
            "id": call.id,
            "sid": call.session.sid_hash,  # session ids are secrets: a short hash only
            "client": call.session.client,
            "tool": call.name,
            "phase": phase,
            "args": call.args,
        }
        if out is not None:
            rec["isError"] = True if out.result is None else out.result.is_error
            rec["outcome"] = out.outcome
            rec["decided_by"] = out.decided_by
            if out.rule is not None:
                rec["rule"] = out.rule
            rec["wait_ms"] = out.wait_ms
            rec["queue_ms"] = out.queue_ms
            if out.reason:
                rec["reason"] = out.reason[:500]
            if out.approver:
                rec["approver"] = out.approver[:40]
            rec["duration_ms"] = int((time.monotonic() - call.started) * 1000)
        self.audit.record(rec)

    def _finish(self, call: _Call, out: _Outcome) -> Reply:
        """The one place a call ends: exactly one ``done`` record, a reply that always encodes.

        A second finish of the same call (an internal error after the first) only answers.
        """
        if not call.finished:
            call.finished = True
            try:
                self._audit(call, "done", out)
            except Exception:
                log.exception("internal error: audit record of %r", call.name)
        if out.result is None:
            return Reply(200, safe_body(call.req_id, None))
        return Reply(200, safe_body(call.req_id, out.result.to_json()))

    def _prepare(self, call: _Call) -> _Outcome | _Plan:
        """Every check that needs no waiting: a refusal, or the plan to run the tool."""
        name, args, session = call.name, call.args, call.session
        if self.closing:
            return _Outcome(ToolResult.text(SHUTDOWN_TEXT, True), "denied", "policy")
        if self.paused:
            return _Outcome(ToolResult.text(PAUSED_TEXT, True), "paused", "policy")
        tool = self.exposed(name)
        if tool is None:
            return _Outcome(ToolResult.text(not_exposed_text(name), True), "not_exposed", "policy")
        if not isinstance(args, dict):
            text = f"invalid arguments for '{name}': arguments must be an object"
            return _Outcome(ToolResult.text(text, True), "error", "policy")
        problem = self.registry.validate(name, args)
        if problem is not None:
            return _Outcome(ToolResult.text(problem, True), "error", "policy")
        paths = CallPaths(self.policy)
        try:
            escalation = tool.escalation(args, paths)
        except ValueError as e:  # a NUL in a path argument: the OS cannot even name it
            text = f"invalid path for '{name}': {e}"
            return _Outcome(ToolResult.text(text, True), "error", "policy")
        ctx = ToolContext(call.id, session.sid, session.client, paths, self.config.limits)
        ctx.escalation = escalation
        suspended = tool.grants_suspended()  # an upstream tool changed since it was approved
        if self.rules:
            ruled = self._apply_rules(tool, args, paths, escalation, ctx, suspended)
            if ruled is not None:
                return ruled
        if self.tier(tool) == "allow" and escalation is None and not suspended:
            tool.on_allowed("policy")
            return _Plan(tool, ctx, "policy", False, escalation)
        # "Allow for this session" never covers an escalated call (outside the roots,
        # protected, persistence): only a human decision on this very call does.
        if escalation is None and not suspended and name in session.allowed_tools:
            return _Plan(tool, ctx, "session_rule", False, escalation)
        return _Plan(tool, ctx, "user", True, escalation)

    def _main_path(
        self, tool: Tool, args: dict[str, Any], paths: PathPolicy | CallPaths
    ) -> str | None:
        """The real path a path tool's rule is matched against (resolved like the tool does)."""
        if tool.name not in PATH_TOOLS or "path" not in tool.path_args:
            return None
        value = args.get("path", tool.default_paths.get("path"))
        return paths.resolve(value) if isinstance(value, str) else None

    def _apply_rules(
        self,
        tool: Tool,
        args: dict[str, Any],
        paths: CallPaths,
        escalation: Escalation | None,
        ctx: ToolContext,
        suspended: bool = False,
    ) -> _Outcome | _Plan | None:
        """deny > ask > allow; an always-asking escalation overrides an allow rule, and so does
        an upstream tool whose definition changed since it was approved (``suspended``)."""
        v = evaluate(self.rules, tool.name, args, self._main_path(tool, args, paths))
        if v.decision is None:
            return None
        if v.decision is RuleList.DENY:
            text = f"denied by rule {v.rule} (rules.deny)"
            return _Outcome(ToolResult.text(text, True), "denied", "rule", rule=v.rule)
        if v.decision is RuleList.ASK:
            return _Plan(tool, ctx, "user", True, escalation, v.rule, can_propose=False)
        if always_asks(escalation):
            return _Plan(tool, ctx, "user", True, escalation, can_propose=False)
        if suspended:
            return _Plan(tool, ctx, "user", True, escalation, v.rule)
        tool.on_allowed("rule")
        return _Plan(tool, ctx, "rule", False, escalation, v.rule)

    def _proposal(self, call: _Call, step: _Plan) -> str | None:
        """The narrow rule "Always allow calls like this" would save, or None."""
        if not step.can_propose or always_asks(step.escalation):
            return None
        try:
            real = self._main_path(step.tool, call.args, step.ctx.policy)
            return propose(call.name, call.args, real, base=self.policy.roots[0])
        except Exception:
            log.exception("no rule proposed for %r", call.name)
            return None

    def _run_now(self, step: _Plan, args: dict[str, Any]) -> ToolResult | None:
        """The tool's result if it can answer without waiting (see ``Tool.run_now``)."""
        try:
            return step.tool.run_now(args, step.ctx)
        except ToolError as e:
            return ToolResult.text(str(e), True)

    async def _run_plan(self, call: _Call, step: _Plan, handle: CallHandle) -> _Outcome:
        session, name = call.session, call.name
        wait_ms = 0
        if step.needs_human:
            waited = time.monotonic()
            session.pending += 1
            try:
                verdict = await self.broker.wait(
                    sid=session.sid,
                    client=session.client,
                    tool=name,
                    arguments=call.args,
                    timeout_s=self.config.approval_timeout_s,
                    escalation=step.escalation,
                    cwd=self._real_cwd(step, call.args),
                    upstream=step.tool.approval_info(),
                    proposed_rule=self._proposal(call, step),
                    on_created=lambda p: setattr(handle, "pending_id", p.id),
                )
            finally:
                session.pending -= 1
                handle.pending_id = None
            wait_ms = int((time.monotonic() - waited) * 1000)
            refusal = self._refusal(verdict, step.escalation)
            if refusal is not None:
                refusal.wait_ms = wait_ms
                return refusal
            step.ctx.approved = True
            if verdict.decision is not None:
                step.tool.on_allowed(verdict.decision.value)  # upstream tools re-pin
            if verdict.decision is Decision.ALLOW_SESSION:
                session.allowed_tools.add(name)
            elif verdict.decision is Decision.ALLOW_ALWAYS and verdict.rule:
                self.add_rules(RuleList.ALLOW, verdict.rule.splitlines())
            result = self._run_now(step, call.args)  # approved: may still finish at once
            if result is not None:
                return _Outcome(result, _ok(result), step.decided_by, wait_ms, rule=step.rule)
        # The tool runs inside this request's task (no extra Task per call); a cancel from the
        # client or the shutdown cancels this task while handle.task points at it.
        me = asyncio.current_task()
        handle.task = me
        meter = pools.QueueMeter()
        handle.cancel_on_disconnect = step.tool.cancel_on_disconnect
        try:
            with pools.queue_meter() as meter:
                result = await step.tool.run(call.args, step.ctx)
        except asyncio.CancelledError:
            if me is None or not (handle.cancelled or self.closing):
                raise
            me.uncancel()
            return _Outcome(None, "cancelled", step.decided_by, wait_ms, rule=step.rule)
        except ToolError as e:
            result = ToolResult.text(str(e), True)
        except (UnicodeError, ValueError) as e:
            return _bad_input(name, e, step.decided_by, wait_ms)
        except Exception as e:
            log.error("tool %r failed", name, exc_info=e)
            result = ToolResult.text(f"tool '{name}' failed: {type(e).__name__}", True)
        finally:
            handle.task = None
        return _Outcome(
            result, _ok(result), step.decided_by, wait_ms, meter.queue_ms, rule=step.rule
        )

    def _real_cwd(self, step: _Plan, args: dict[str, Any]) -> str | None:
        """The working directory a human is asked about: the real path the tool will use."""
        if "cwd" not in step.tool.path_args:
            return None
        value = args.get("cwd")
        try:
            return step.ctx.resolve(value if isinstance(value, str) else None)
        except (OSError, ValueError):
            return None

    def _refusal(self, v: Verdict, escalation: Any = None) -> _Outcome | None:
        """The agent's text and the audit outcome for a wait that did not end in approval.

        Each text says what the agent can do next; the audit tells "denied by the user"
        (with the reason and which UI), "no_approver", "timeout", "cancelled" and "paused" apart.
        """
        e = v.ending
        if e is Ending.APPROVED:
            return None
        if e is Ending.DENIED:
            text = f"denied by the user: {v.reason}" if v.reason else "denied by the user"
            return _Outcome(
                ToolResult.text(text, True), "denied", "user", reason=v.reason, approver=v.approver
            )
        if e is Ending.TIMEOUT:
            text = f"approval timed out after {self.config.approval_timeout_s:g} s"
            return _Outcome(ToolResult.text(text, True), "timeout", "policy")
        if e is Ending.CANCELLED:
            return _Outcome(None, "cancelled", "policy")
        if e is Ending.NO_APPROVER:
            text = self._no_approver_text(escalation)
            return _Outcome(ToolResult.text(text, True), "no_approver", "policy", reason=text)
        texts = {
            Ending.PAUSED: (PAUSED_TEXT, "paused"),
            Ending.SHUTDOWN: (SHUTDOWN_TEXT, "denied"),
            Ending.SESSION_ENDED: (SESSION_ENDED_TEXT, "cancelled"),
            Ending.DISCONNECTED: (DISCONNECTED_TEXT, "cancelled"),
            Ending.TOO_MANY: (TOO_MANY_TEXT, "limit"),
        }
        text, outcome = texts[e]
        return _Outcome(ToolResult.text(text, True), outcome, "policy")

    def _no_approver_text(self, escalation: Escalation | None) -> str:
        """Why a human was needed and what the agent can do, when no human can answer.

        Only "outside the roots" names the real path: for a protected location the agent
        learns neither the category nor where a symlink or hard link it used really points
        (the human sees both).
        """
        if escalation is None:
            return NO_APPROVER_TEXT
        head = "approval required but no approver is available"
        if escalation.kind == EscalationKind.OUTSIDE_ROOTS:
            roots = ", ".join(self.policy.roots[:3])
            return (
                f"{head}: {escalation.text}; outside the allowed roots: ask the user to add the "
                f"folder to roots, or use a path under {roots}"
            )
        where = {
            EscalationKind.PERSISTENCE: "is a persistence location (startup files, hooks)",
            EscalationKind.OWN_FILE: "is one of the bridge's own files",
        }.get(escalation.kind, "is in a protected location")
        return (
            f"{head}: the path {where}; "
            "the user must open the tray, the approval page or `a2a-bridge watch`"
        )

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
            if p.proposed_rule is None:
                raise DecisionError(
                    "no rule can allow calls like this one (it always asks a human): "
                    "approve it instead"
                )
            text = rule if isinstance(rule, str) and rule.strip() else p.proposed_rule
            try:
                parsed = parse_rule_lines(text, base=self.policy.roots[0])
            except RuleError as e:
                raise DecisionError(f"rule not saved: {e}") from None
            problem = None if text.strip() == p.proposed_rule else _not_like_this(p.tool, parsed)
            if problem is not None:
                raise DecisionError(f"rule not saved: {problem}")
            rule = "\n".join(r.text for r in parsed)
        return self.broker.decide(call_id, decision, reason, approver=approver, rule=rule)

    # -- rules and grants (on the bridge thread; file writes happen in a worker) ----------------

    def set_rules(self, rules: RuleSet) -> None:
        self.rules = rules
        self._changed(now=True)

    def add_rules(self, which: RuleList, texts: list[str]) -> None:
        """Effective at once in memory, then saved to the config (re-read, unknown keys kept)."""
        texts = [t.strip() for t in texts if t.strip()]
        base = self.policy.roots[0]
        current = self.rules.get(which)
        known = {r.text for r in current}
        new = tuple(r for r in parse_rule_lines("\n".join(texts), base=base) if r.text not in known)
        self.set_rules(RuleSet(**{**_lists(self.rules), which.value: current + new}))
        path = self.config.path
        self._rule_saves += 1

        def saved(rules: RuleSet | None) -> None:
            self._rule_saves -= 1
            if rules is not None and self._rule_saves == 0:
                self.set_rules(rules)  # the file's rules: picks up edits made by hand too

        def persist() -> None:
            rules = None
            try:
                rules = edit_config(path, lambda raw: edit_raw_rules(raw, which, add=texts)).rules
            except Exception as e:
                log.warning("could not save the rule(s) %s to %s: %s", texts, path, e)
            if self.loop is not None:
                self.loop.call_soon_threadsafe(saved, rules)

        assert self.loop is not None
        self.loop.run_in_executor(None, persist)

    def explain(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """What would happen to this call now (no session grant counted): for "test a rule"."""
        tool = self.registry.get(name)
        real = escalation = None
        if tool is not None:
            paths = CallPaths(self.policy)
            escalation = tool.escalation(args, paths)
            real = self._main_path(tool, args, paths)
        v = evaluate(self.rules, name, args, real)
        tier = self.tier(tool) if tool is not None else None
        if v.decision is RuleList.ASK and v.rule is None:
            outcome, by = "ask", "guard"  # deny rules exist and the command is unreadable
        elif v.decision is RuleList.DENY or v.decision is RuleList.ASK:
            outcome, by = v.decision.value, "rule"
        elif v.decision is RuleList.ALLOW:
            outcome, by = ("ask", "escalation") if always_asks(escalation) else ("allow", "rule")
        elif tool is None or tier == "deny":
            outcome, by = "deny", "not exposed"
        elif tier == "allow":
            outcome, by = ("ask", "escalation") if escalation is not None else ("allow", "tier")
        else:
            outcome, by = "ask", "tier"
        esc = escalation.to_json() if escalation is not None else None
        return {
            "tool": name,
            "outcome": outcome,
            "decided_by": by,
            "list": v.decision.value if v.decision else None,
            "rule": v.rule,
            "index": v.index,
            "tier": tier,
            "unsafe": v.unsafe,
            "escalation": esc,
        }

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
        for handle in list(self._inflight.values()):
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
        self._snapshot = snap
        for cb in list(self._subscribers):
            try:
                cb(snap)
            except Exception:
                log.exception("snapshot subscriber failed")

    # --- for the facade (server.runner.BridgeRunner; thread-safe where it says so)

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


def _not_like_this(tool: str, parsed: list[Any]) -> str | None:
    """Why an edited "Always allow calls like this" rule is not about calls like this one.

    It must name the call's own tool and must not be a catch-all (``bash``, ``bash(*)``): a
    click on one prompt never widens to another tool or to every call of it. A deliberate
    broad rule is added from the Rules section or ``a2a-bridge rules add`` instead. (The
    bridge's own proposal is taken as it is: for a tool without string arguments it is the
    tool alone.)
    """
    for r in parsed:
        if r.tool != tool:
            return f"{r.text} is not a rule for {tool}; add it from the Rules section instead"
        if r.kind is Kind.ANY or (r.kind is Kind.BASH and set(r.words) <= {"*"}):
            return (
                f"{r.text} would allow every {tool} call; add a broad rule from the Rules "
                "section or `a2a-bridge rules add` instead"
            )
    return None


def _lists(rules: RuleSet) -> dict[str, tuple[Any, ...]]:
    return {k.value: rules.get(k) for k in RuleList}
