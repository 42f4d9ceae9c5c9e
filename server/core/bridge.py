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
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

from .. import __version__, box
from ..control.controlfile import runtime_dir
from ..infra.audit import AuditLog
from ..infra.childenv import build_env
from ..infra.config import Config, log_path
from ..infra.tokens import TokenStore
from ..machines.identity import DEFAULT, MachineIndex, MachineRecord
from ..mcp.modern import (
    MODERN_VERSION,
    Envelope,
    decorate_body,
    discover_result,
    error_reply,
    listing_result,
)
from ..mcp.protocol import (
    METHOD_NOT_FOUND,
    Reply,
    error_body,
    initialize_result,
    negotiate_version,
    result_body,
)
from ..mcp.sessions import Session, SessionTable
from ..policy.judge import Judgement, judge
from ..policy.paths import PathPolicy
from ..policy.rulebook import RuleBook
from ..policy.rules import RuleList, RuleSet
from ..present.batch import BatchRefused, check_batch
from ..present.exposure import denied_tools, tier_changes
from ..present.secrets import remember
from ..tools.base import Tool, ToolContext, ToolError, ToolResult
from ..tools.registry import ToolRegistry
from ..types import (
    BatchOutcome,
    DecisionError,
    Exposure,
    GrantView,
    HumanDecision,
    MachineView,
    PendingCall,
    SessionView,
    Snapshot,
)
from ..vocab import Tier
from .approvals import ApprovalBroker, Decision, Ending
from .inflight import CallHandle, InFlight
from .pipeline import CallPipeline, prepare_request, tier_of
from .tasks import TaskTable

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 0.05
"""Coalesced snapshots (traffic, not waiting calls) go out at most this often: 20 a second is
smoother than any UI needs, and keeps publishing a small, fixed share of the loop whatever
the traffic (every loop turn published one before: 140-280 a second)."""

NO_GRANT = (
    "no session grant can cover this call (it always asks a human, or no scope as narrow as "
    "the call exists): approve it once instead"
)


@dataclass(slots=True)
class MachineUse:
    """What this run saw of one machine: when its last request came, how many calls."""

    last_seen: float = 0.0  # wall clock
    calls: int = 0


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
            (log_path(), "bridge log"),
        ),
        own_dirs=((runtime_dir(), "bridge control file"),),
        remove=cfg.protected_remove,
        private_allow=cfg.private_allow,
    )


class _Unconnected(Tool):
    """An upstream MCP tool in the offline ``rules test``: no server is connected, so its
    schema and the paths it names are unknown; its rules and its tier still judge it."""

    default_tier = Tier.PROMPT  # as every upstream tool (UpstreamTool.default_tier)
    input_schema: dict[str, Any] = {"type": "object"}

    def __init__(self, name: str) -> None:
        self.name = name
        self.description = ""

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ToolError("not connected")  # never run: the offline judge only judges


def offline_explain(
    cfg: Config, audit_path: str, name: str, args: dict[str, Any], machine: str | None = None
) -> Judgement:
    """``a2a-bridge rules test`` with no bridge running: the one judge on the inputs
    (:func:`~server.core.pipeline.prepare_request`) of a registry, path policy and tiers built
    from the saved config. Upstream MCP tools are unknown here (nothing is connected)."""
    from ..box import probe  # whether bash would run in the box, as the live bridge knows
    from ..tools.builtin import builtin_tools  # the tools' modules, only for this command

    probe.probe()
    registry = ToolRegistry(cfg.deny, cfg.deny_mcp_tools)
    for tool in builtin_tools(cfg.bash_env):
        registry.add(tool)
    registry.discover()
    if name.startswith("mcp__") and registry.get(name) is None:
        registry.add(_Unconnected(name))  # withheld names stay withheld (get() is None)
    policy = path_policy(cfg, audit_path)
    prepared = prepare_request(
        registry, policy, cfg.rules, tier_of(cfg), name, args, machine=machine
    )
    return judge(prepared.request)


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
        # What every UI states: roots, tiers changed from the defaults, tools withheld.
        self.exposure = Exposure(
            self.policy.roots,
            tier_changes(
                cfg.tiers, cfg.default_tier, {t.name: t.default_tier for t in self.registry.all()}
            ),
            denied_tools(cfg.deny, cfg.deny_mcp_tools),
        )
        self.broker = ApprovalBroker(
            on_change=self._pending_changed,
            max_pending=cfg.max_pending,
            max_pending_per_session=cfg.max_pending_per_session,
            box_status=box.known,
            machine_known=lambda name: name == DEFAULT or name in self.machine_records,
        )
        self.rulebook = RuleBook(cfg.rules, cfg.path, self.policy.roots[0], self.set_rules)
        self.inflight = InFlight(self.broker)  # the held calls and every way one ends early
        self.pipeline = CallPipeline(
            self,
            cfg,
            self.registry,
            self.policy,
            self.broker,
            opts.audit,
            self.rulebook,
            self.inflight,
        )
        self.tasks = TaskTable(__version__, self.inflight.end_early)
        # One identity per remote machine (server/machines): the request's token names it.
        self.machines = MachineIndex(cfg.machines)
        self.machine_records: dict[str, MachineRecord] = {m.name: m for m in cfg.machines}
        self.machine_use: dict[str, MachineUse] = {}
        self.paused = False
        self.closing = False
        self.unauthorized = 0
        self.url = ""
        self.control_url = ""
        self.host = cfg.host
        self.port = cfg.port
        self.warnings: list[str] = []
        self._listing: list[dict[str, Any]] | None = None
        self._listing_json: tuple[list[dict[str, Any]], bytes] | None = None
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._seq = 0
        self._publish_timer: asyncio.Handle | None = None  # a coalesced publication, armed
        self._last_publish = float("-inf")  # loop time of the last one
        self.loop: asyncio.AbstractEventLoop | None = None
        self.audit.on_failure = self._audit_failed
        self._bash_env: tuple[str | None, dict[str, str]] | None = None
        self.upstreams: Any = (
            None  # server.upstream.manager.UpstreamManager, when servers are configured
        )
        self.tunnels: Any = None  # server.tunnels.supervisor.TunnelManager (the runner's)
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

    def several_machines(self) -> bool:
        return bool(self.machine_records)

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

    def identify(self, presented: str | None) -> str | None:
        """Step 3: the machine whose token this is (``default``: the bridge's own), or None.

        The cost does not grow with the number of machines (one hash, one lookup:
        :class:`~server.machines.identity.MachineIndex`)."""
        name = self.machines.identify(presented, self.tokens.token)
        if name is None:
            return None
        use = self.machine_use.get(name)
        if use is None:
            # First request of this machine in this run: its token becomes a known secret
            # (the bridge keeps only digests), so an agent echoing it is scrubbed everywhere.
            remember(presented, "<token>")
            use = self.machine_use[name] = MachineUse()
        use.last_seen = time.time()
        return name

    def warn(self, text: str) -> None:
        """A warning every UI shows from now on (e.g. a machine's token fell back to the
        config file because the keyring was unusable)."""
        if text not in self.warnings:
            self.warnings.append(text)
        self._changed(now=True)

    def _count_call(self, machine: str) -> None:
        use = self.machine_use.get(machine)
        if use is not None:
            use.calls += 1

    def add_machine(self, record: MachineRecord) -> None:
        """A machine just added (its record is saved): its token works from now on."""
        self.machines.add(record)
        self.machine_records[record.name] = record
        self._changed(now=True)

    def revoke_machine(self, name: str) -> int:
        """A machine just removed (its record is gone from the config): its next request is a
        401, its sessions end now (their waiting calls end ``session ended``) and its running
        tools are cancelled (a ``bash`` it started is killed). Returns how many sessions
        ended."""
        self.machines.remove(name)
        self.machine_records.pop(name, None)
        self.machine_use.pop(name, None)  # a machine added again under this name starts afresh
        ended = [s.sid for s in self.sessions.all() if s.machine == name]
        for sid in ended:
            self.end_session(sid)
        self.end_waiting_calls_of(name)
        self.inflight.cancel_machine(name)
        self._changed(now=True)
        return len(ended)

    def end_waiting_calls_of(self, machine: str) -> int:
        """End every call of ``machine`` still waiting for a human, whatever carries it (a
        session, a sessionless 2026-07-28 call, a task): its token was revoked or rotated, so
        none is left for a human to approve. Returns how many ended."""
        n = self.broker.end_where(Ending.SESSION_ENDED, machine=machine)
        if n:
            self._changed(now=True)
        return n

    @staticmethod
    def _saved_last_seen(record: MachineRecord | None) -> float | None:
        return None if record is None else record.last_seen

    def machines_seen(self) -> dict[str, float]:
        """When each machine besides ``default`` was last seen in this run (saved at stop)."""
        return {n: u.last_seen for n, u in self.machine_use.items() if n in self.machine_records}

    def machine_views(self) -> tuple[MachineView, ...]:
        """``default`` first, then the others by name; sessions and use from this run."""
        counts: dict[str, int] = {}
        for s in self.sessions.all():
            counts[s.machine] = counts.get(s.machine, 0) + 1
        names = [DEFAULT, *sorted(self.machine_records)]
        tunnels = {t.name: t for t in self.tunnels.views()} if self.tunnels is not None else {}
        out = []
        for name in names:
            use = self.machine_use.get(name)
            record = self.machine_records.get(name)
            out.append(
                MachineView(
                    name,
                    record.created if record is not None else None,
                    use.last_seen if use is not None else self._saved_last_seen(record),
                    use.calls if use is not None else 0,
                    counts.get(name, 0),
                    tunnels[name].state.value if name in tunnels else None,
                )
            )
        return tuple(out)

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

    def touch_session(self, sid: str, machine: str | None = None) -> Session | None:
        """Step 6: the live session the header names (its idle timer refreshed), or None;
        with ``machine``, only a session that machine opened (ids never cross machines)."""
        session = self.sessions.touch(sid, machine)
        if session is not None:
            self._changed()
        return session

    def dispatch(
        self,
        msg: dict[str, Any],
        session: Session | None,
        handle: CallHandle | None = None,
        machine: str = DEFAULT,
    ) -> Reply | Coroutine[Any, Any, Reply]:
        """Step 9: run the method. ``session`` is None only for ``initialize``; ``machine``
        is the one step 3 found from the token (a new session belongs to it)."""
        method: str = msg["method"]
        req_id = msg.get("id")
        if method == "initialize":
            return self._initialize(msg, machine)
        assert session is not None
        if method == "ping":
            return Reply(200, result_body(req_id, {}))
        if method == "tools/list":
            return Reply(200, self._listing_body(req_id))
        if method == "tools/call":
            self._count_call(session.machine)
            return self.pipeline.tools_call(session, req_id, msg.get("params"), handle)
        return Reply(200, error_body(req_id, METHOD_NOT_FOUND, "method not found"))

    def dispatch_modern(
        self,
        msg: dict[str, Any],
        env: Envelope,
        handle: CallHandle | None = None,
        machine: str = DEFAULT,
    ) -> Reply | Coroutine[Any, Any, Reply]:
        """§ 9: a 2026-07-28 request, which passed its checks, has no session. A tools/call
        gets a one-call session (never in the table, so never granted "for this session")
        named by the client's ``_meta.clientInfo``; everything else about it is the same
        pipeline, approvals and audit as the 2025 era."""
        method: str = msg["method"]
        req_id = msg.get("id")
        if method == "server/discover":
            return Reply(200, result_body(req_id, discover_result(__version__)))
        if method == "tools/list":
            self._listing_body(req_id)  # refreshes the serialised catalogue
            assert self._listing_json is not None
            result = listing_result(self._listing_json[1], __version__)
            body = b'{"jsonrpc":"2.0","id":' + json.dumps(req_id).encode() + b',"result":'
            return Reply(200, body + result + b"}")
        if method in ("tasks/get", "tasks/result", "tasks/cancel") and env.wants_tasks:
            return self.tasks.request(method, req_id, msg.get("params"), machine)
        if method != "tools/call":
            return error_reply(req_id, METHOD_NOT_FOUND, "method not found")
        session = self.sessions.one_call(
            env.client_name, env.client_version, MODERN_VERSION, machine
        )
        self._count_call(machine)
        if env.wants_tasks:  # a call that waits for a human becomes a task (server/core/tasks)
            task = self.tasks.call(self.pipeline.tools_call, session, req_id, msg.get("params"))
            return self._decorated(task)
        reply = self.pipeline.tools_call(session, req_id, msg.get("params"), handle)
        if isinstance(reply, Reply):
            reply.body = decorate_body(reply.body, __version__)
            return reply
        return self._decorated(reply)

    @staticmethod
    async def _decorated(pending: Coroutine[Any, Any, Reply]) -> Reply:
        reply = await pending
        reply.body = decorate_body(reply.body, __version__)
        return reply

    def _initialize(self, msg: dict[str, Any], machine: str = DEFAULT) -> Reply:
        params = msg.get("params")
        info = params.get("clientInfo") if isinstance(params, dict) else None
        protocol_version = negotiate_version(params)
        session, evicted = self.sessions.create(info, protocol_version, machine)
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

    def remove_session(self, sid: str, machine: str | None = None) -> bool:
        """Drop the session from the table (later requests naming it get 404); with
        ``machine``, only a session that machine opened."""
        session = self.sessions.get(sid)
        if session is None or (machine is not None and session.machine != machine):
            return False
        self.sessions.remove(sid)
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
        self.inflight.end_held(sid)
        self.broker.end_where(Ending.SESSION_ENDED, sid)

    # -- cancellation and disconnects (server.core.inflight owns them) -------------------------

    def cancel(self, sid: str, params: Any) -> bool:
        """End the named call of this session; True when there was one to end."""
        return self.inflight.cancel(sid, params)

    def connection_closed(self, handle: CallHandle) -> None:
        """The client hung up while its call was held: withdraw a pending approval.

        A tool that is already running is left to finish (disconnection is not cancellation in
        MCP); its result and audit record still land (an upstream call is cancelled).
        """
        self.inflight.disconnected(handle)

    # -- control (called on the bridge thread by the runner) ------------------------------------

    def decide(self, d: HumanDecision) -> bool:
        """Apply a human decision; "Always allow" saves ``rule`` (edited) or the proposal.

        Raises :class:`DecisionError` when there is no rule to save (the call always asks)
        or the edited rule is invalid; False when the call is no longer pending.
        """
        call_id, decision = d.call_id, d.decision
        if decision is Decision.ALLOW_SESSION:
            p = self.broker.get(call_id)
            if p is None:
                return False
            if p.grant is None:
                raise DecisionError(NO_GRANT)
        if decision is Decision.RUN_OUTSIDE_BOX:
            p = self.broker.get(call_id)
            if p is None:
                return False
            if p.box is None or not p.box.inside:
                raise DecisionError(
                    "run_outside_box is only for a bash call that would run in the box"
                )
        if decision is Decision.ALLOW_ALWAYS:
            p = self.broker.get(call_id)
            if p is None:
                return False
            d = replace(d, rule=self.rulebook.rule_to_save(p, d.rule))
        return self.broker.decide(d)

    def decide_batch(
        self, ids: list[str], decision: Decision, reason: str | None, approver: str | None
    ) -> BatchOutcome:
        """*Approve all N* / *Deny all N*: exactly the calls named (server/present/batch.py),
        all of one kind, checked and decided in one step on the bridge thread, so no call that
        arrives meanwhile is covered. Raises :class:`DecisionError` (nothing decided) when the
        decision is not approve/deny or the calls are not of one kind."""
        if decision not in (Decision.APPROVE, Decision.DENY):
            raise DecisionError("a batch decision is approve or deny")
        try:
            live, gone = check_batch(self.broker.pending(), ids)
        except BatchRefused as e:
            raise DecisionError(str(e)) from None
        decided = [
            i for i in live if self.broker.decide(HumanDecision(i, decision, reason, approver))
        ]
        missed = [i for i in live if i not in decided]
        return BatchOutcome(tuple(decided), tuple(gone + missed))

    # -- rules and grants (on the bridge thread; file writes happen in a worker) ----------------

    def set_rules(self, rules: RuleSet) -> None:
        self.rulebook.rules = rules
        self._changed(now=True)

    def add_rules(self, which: RuleList, texts: list[str]) -> None:
        """Effective at once in memory, then saved to the config (re-read, unknown keys kept)."""
        assert self.loop is not None
        self.rulebook.add(which, texts, self.loop)

    def explain(self, name: str, args: dict[str, Any], machine: str | None = None) -> Judgement:
        """What would happen to this call now (no session grant counted): for "test a rule"
        (``machine``: as if from that machine, so rules scoped to it count)."""
        return self.pipeline.explain(name, args, machine)

    def grants(self) -> tuple[GrantView, ...]:
        return tuple(
            GrantView(s.sid, s.client_name, g.tool, g.scope, g.label, s.machine)
            for s in self.sessions.all()
            for g in s.grants
        )

    def revoke_grant(self, sid: str, tool: str) -> bool:
        """Every grant of ``tool`` in that session ends (the API names grants by tool)."""
        session = self.sessions.get(sid)
        if session is None or not any(g.tool == tool for g in session.grants):
            return False
        session.grants[:] = [g for g in session.grants if g.tool != tool]
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

    def probe_box(self) -> None:
        """Find out once, in a worker (it starts ``bwrap``), whether this machine can box;
        every UI hears the answer with the next snapshot (``Snapshot.box``)."""
        if box.known() is not None:
            return
        assert self.loop is not None
        probing = self.loop.run_in_executor(None, box.check)
        probing.add_done_callback(lambda _: self._changed(now=True))

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
        self.inflight.cancel_running()

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
                    s.machine,
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
            box=box.known(),
            grants=self.grants(),
            tunnels=self.tunnels.views() if self.tunnels is not None else (),
            exposure=self.exposure,
            log_path=log_path(),
            machines=self.machine_views(),
        )

    def _audit_warning(self) -> tuple[str, ...]:
        if self.audit.failures:
            return (f"the audit log {self.audit.path} cannot be written; calls are not recorded",)
        return ()

    def state_changed(self) -> None:
        """For the pipeline: a count changed (a call began, a wait ended); coalesced."""
        self._changed()

    def _pending_changed(self) -> None:
        self._changed(now=True)

    def _changed(self, now: bool = False) -> None:
        """Tell subscribers. A waiting call's arrival or end (and a human's action) goes out
        at once; everything else (a session's last call, the call count, a server's stderr)
        coalesces: at most one publication per ``PUBLISH_INTERVAL_S``, and the last state
        always goes out (the timer publishes whatever is current when it fires)."""
        if not self._subscribers:
            return
        if now:
            self._publish()
        elif self._publish_timer is None and self.loop is not None:
            due = self._last_publish + PUBLISH_INTERVAL_S
            if due <= self.loop.time():  # quiet until now: at the end of this loop turn
                self._publish_timer = self.loop.call_soon(self._publish)
            else:
                self._publish_timer = self.loop.call_at(due, self._publish)

    def _publish(self) -> None:
        if self._publish_timer is not None:
            self._publish_timer.cancel()  # this publication carries that change too
            self._publish_timer = None
        if self.loop is not None:
            self._last_publish = self.loop.time()
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
