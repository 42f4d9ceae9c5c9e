"""The tools/call pipeline: prepare → rules → approve → run → audit, for one call at a time.

:meth:`CallPipeline.tools_call` takes a ``tools/call`` that passed the order of checks
(:mod:`server.mcp.http`) and ends it with exactly one reply and exactly one pair of audit records.
The stages are methods, each with one job: ``_prepare`` (:func:`prepare_request` works out
what needs I/O — exposure, schema, path escalation — and the one judge,
:func:`server.policy.judge.judge`, rules on it), the approval wait through the
:class:`~server.core.approvals.ApprovalBroker`, running the tool (at once when it can answer
without waiting, else inside the request's task) and ``_finish`` (the done record and a reply
that always encodes). Protected paths plug in through ``Tool.escalation``, upstream MCP tools
through the :class:`~server.tools.base.Tool` hooks (``approval_info``, ``grants_suspended``,
``on_allowed``, ``cancel_on_disconnect``).

The pipeline owns the policy state a call is judged by (tiers, the path policy, and reads the
rules in force from the :class:`~server.policy.rulebook.RuleBook`); the
:class:`~server.core.bridge.Bridge` owns the sessions and pause/shutdown (the pipeline's
:class:`PipelineHost`); a held call registers in the :class:`~server.core.inflight.InFlight`
table, which owns every way it ends early. (A little over 400 lines: the
stages read best in order, in one place; how a call ends for the agent is
:mod:`server.core.outcome`.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..box import probe as box_probe
from ..box.policy import box_gate
from ..box.run import BoxRequest
from ..control.controlfile import runtime_dir
from ..infra.audit import AuditLog, utc_now
from ..infra.config import Config
from ..mcp.protocol import (
    Reply,
    not_exposed_text,
)
from ..mcp.sessions import Session
from ..policy.grants import Grant, covering, offer, project_of
from ..policy.judge import DecisionRequest, Judgement, judge
from ..policy.paths import GIT_CONFIG_CATEGORY, CallPaths, Escalation, PathPolicy, always_asks
from ..policy.proposals import propose, why_no_rule
from ..policy.protected import EscalationKind
from ..policy.rulebook import RuleBook
from ..policy.rules import PATH_TOOLS, RuleList, RuleSet, scoped_proposal
from ..present.diffview import DIFF_READ_MAX, change_view
from ..present.risk import call_cues
from ..present.textsafe import shorten
from ..tools import pools
from ..tools.base import Tool, ToolContext, ToolError, ToolResult
from ..tools.files import read_before
from ..tools.registry import ToolRegistry
from ..vocab import AuditPhase, CallOutcome, DecidedBy, Ground, Ruling, Tier
from .approvals import ApprovalBroker, Decision
from .inflight import CallHandle, InFlight
from .outcome import (
    PAUSED_TEXT,
    SHUTDOWN_TEXT,
    Outcome,
    bad_input,
    internal,
    ok_or_error,
    refusal_for,
    refused,
    safe_body,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Call:
    session: Session
    req_id: Any
    id: str  # the bridge's own UUID, pairs the audit records
    name: str
    args: Any
    started: float
    finished: bool = False  # the done record is written exactly once
    box: str | None = None  # a boxable tool's run: "in" the box or "outside" (audit)


@dataclass(frozen=True, slots=True)
class _Unread:
    """Git config files a call names whose content must be read (off the loop) first."""

    paths: tuple[str, ...]


@dataclass(slots=True)
class Plan:
    """A call that passed every check: which tool, its context, and who decides."""

    tool: Tool
    ctx: ToolContext
    decided_by: DecidedBy  # POLICY, RULE, SESSION_RULE, or USER (after approval)
    needs_human: bool
    escalation: Escalation | None
    rule: str | None = None  # the rule that allowed or asked
    can_propose: bool = True  # False: no allow rule could ever apply (ask rule, always-asks)
    judgement: Judgement | None = None  # the judge's ruling (RUN_IN_BOX: the box runs it)
    box_note: str | None = None  # why a boxable call asks: no box here, or "box": false


class PipelineHost(Protocol):
    """What the pipeline needs from its bridge: the pause/shutdown flags and the child
    environment. (The in-flight table is handed over as such, the rules as the RuleBook.)"""

    paused: bool
    closing: bool

    def child_env(self) -> dict[str, str]: ...

    def several_machines(self) -> bool:
        """More than machine ``default`` has a token: proposals name the call's machine."""
        ...

    def state_changed(self) -> None:
        """A count the UIs show changed: publish it (coalesced)."""
        ...


class CallPipeline:
    """Judges and runs tools/call requests; see the module docstring for the stages."""

    def __init__(
        self,
        host: PipelineHost,
        config: Config,
        registry: ToolRegistry,
        policy: PathPolicy,
        broker: ApprovalBroker,
        audit: AuditLog,
        rulebook: RuleBook,
        inflight: InFlight,
    ) -> None:
        self.host = host
        self.inflight = inflight
        self.config = config
        self.registry = registry
        self.policy = policy
        self.broker = broker
        self.audit = audit
        self._tier = tier_of(config)
        self.rulebook = rulebook
        self.calls_total = 0
        self.box = box_request(config, policy.roots, audit.path)

    def tier(self, tool: Tool) -> Tier:
        return self._tier(tool)

    def exposed(self, name: str) -> Tool | None:
        tool = self.registry.get(name)
        if tool is None or self.tier(tool) == Tier.DENY:
            return None
        return tool

    def tools_call(
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
        call = Call(session, req_id, str(uuid.uuid4()), name, args, time.monotonic())
        self.calls_total += 1
        session.calls += 1
        self.host.state_changed()  # the UIs' counts (coalesced: cheap per call)
        self._audit(call, AuditPhase.START)
        try:
            step = self._prepare(call)
            if isinstance(step, _Unread):  # a git config file to read first: in a worker
                return self._read_configs_first(call, step, handle or CallHandle())
            if isinstance(step, Outcome):
                return self._finish(call, step)
            if not step.needs_human:
                result = self._run_now(step, args)
                if result is not None:
                    out = Outcome(result, ok_or_error(result), step.decided_by, rule=step.rule)
                    return self._finish(call, out)
        except (UnicodeError, ValueError) as e:
            return self._finish(call, bad_input(name, e))
        except Exception:
            log.exception("internal error: tools/call %r", name)
            return self._finish(call, internal(name))
        return self._tools_call_async(call, step, handle or CallHandle())

    async def _read_configs_first(self, call: Call, unread: _Unread, handle: CallHandle) -> Reply:
        """The call names a git config file whose content the policy has not read in its
        present state (it is private when it holds a credential): read it in a file worker,
        never on the loop, then judge the call as usual."""
        try:
            await pools.run(pools.Pool.FILE, self.policy.inspect_git_configs, unread.paths)
            step = self._prepare(call, inspected=True)
            if isinstance(step, _Unread):  # never: once read, an unread one counts as holding one
                return self._finish(call, internal(call.name))
            if isinstance(step, Outcome):
                return self._finish(call, step)
        except (UnicodeError, ValueError) as e:
            return self._finish(call, bad_input(call.name, e))
        except Exception:
            log.exception("internal error: tools/call %r", call.name)
            return self._finish(call, internal(call.name))
        return await self._tools_call_async(call, step, handle)

    async def _tools_call_async(self, call: Call, step: Plan, handle: CallHandle) -> Reply:
        handle.machine = call.session.machine
        try:
            with self.inflight.holding(call.session.sid, call.req_id, handle):
                out = await self._run_plan(call, step, handle)
        except Exception:
            log.exception("internal error: tools/call %r", call.name)
            out = internal(call.name)
        reply = self._finish(call, out)
        if out.result is None and handle.cancelled:
            # The client cancelled: MCP says no response is sent for the request, so the held
            # POST ends with a bare 202 (a -32800 body here crashed SDK clients at teardown).
            return Reply(202)
        return reply

    def _audit(self, call: Call, phase: AuditPhase, out: Outcome | None = None) -> None:
        """Queue one audit record; never raises (the writer thread caps and serialises it)."""
        rec: dict[str, Any] = {
            "ts": utc_now(),
            "id": call.id,
            "sid": call.session.sid_hash,  # session ids are secrets: a short hash only
            "client": call.session.client,
            "machine": call.session.machine,  # from the token, never from clientInfo
            "tool": call.name,
            "phase": phase,
            "args": call.args,
        }
        if call.session.one_call:  # a 2026-07-28 request (§ 9): the era is on the record
            rec["era"] = call.session.protocol_version
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
            if call.box is not None:
                rec["box"] = call.box
            rec["duration_ms"] = int((time.monotonic() - call.started) * 1000)
        self.audit.record(rec)

    def _finish(self, call: Call, out: Outcome) -> Reply:
        """The one place a call ends: exactly one ``done`` record, a reply that always encodes.

        A second finish of the same call (an internal error after the first) only answers.
        """
        if not call.finished:
            call.finished = True
            try:
                self._audit(call, AuditPhase.DONE, out)
            except Exception:
                log.exception("internal error: audit record of %r", call.name)
        if out.result is None:
            return Reply(200, safe_body(call.req_id, None))
        return Reply(200, safe_body(call.req_id, out.result.to_json()))

    def _prepare(self, call: Call, inspected: bool = False) -> Outcome | Plan | _Unread:
        """Every check that needs no waiting, judged by the one judge: a refusal, or the plan
        (or, first, the git config files to read: see :meth:`_read_configs_first`)."""
        session = call.session
        prep = self.prepare(call.name, call.args, session.grants, session.machine)
        if prep.paths is not None and prep.paths.unread_git_configs:
            if not inspected:
                return _Unread(tuple(prep.paths.unread_git_configs))
            # changed again while it was read: judged as holding one (a human looks)
            esc = Escalation(
                EscalationKind.PROTECTED, GIT_CONFIG_CATEGORY, prep.paths.unread_git_configs[0]
            )
            prep = dataclasses.replace(
                prep, request=dataclasses.replace(prep.request, escalation=esc)
            )
        j = judge(prep.request)
        if prep.tool is None or prep.paths is None or not (j.runs or j.ruling is Ruling.ASK):
            return refusal(j)
        tool = prep.tool
        ctx = ToolContext(call.id, session.sid, session.client, prep.paths, self.config.limits)
        ctx.escalation = j.escalation
        ctx.env = self.host.child_env()
        ctx.box = self.box  # bash runs in it; grep and find walk in a read-only one
        if j.runs and j.ground in (Ground.TIER, Ground.RULE):
            tool.on_allowed(j.decided_by)  # an upstream tool re-pins what was allowed
        needs_human = j.ruling is Ruling.ASK
        plan = Plan(tool, ctx, j.decided_by, needs_human, j.escalation, j.rule, j.can_propose, j)
        if tool.boxable and needs_human:
            # Why this call would run outside the box once approved: no box here, or the
            # agent asked ("box": false). None: approved, it runs in the box.
            plan.box_note = box_gate(prep.request.args, box_probe.status())
        return plan

    def prepare(
        self, name: str, args: Any, grants: Sequence[Grant] = (), machine: str | None = None
    ) -> Prepared:
        """The judge's inputs for this call now (``grants``: the session's scoped grants,
        :mod:`server.policy.grants`; ``machine``: the caller's, for scoped rules), with the
        I/O they need done here."""
        return prepare_request(
            self.registry,
            self.policy,
            self.rulebook.rules,
            self.tier,
            name,
            args,
            grants=grants,
            paused=self.host.paused,
            closing=self.host.closing,
            machine=machine,
        )

    def main_path(
        self, tool: Tool, args: dict[str, Any], paths: PathPolicy | CallPaths
    ) -> str | None:
        return main_path(tool, args, paths)

    def _proposal(self, call: Call, step: Plan) -> str | None:
        """The narrow rule "Always allow calls like this" would save, or None."""
        if not step.can_propose or always_asks(step.escalation):
            return None
        try:
            real = self.main_path(step.tool, call.args, step.ctx.policy)
            rule = propose(call.name, call.args, real, base=self.policy.roots[0])
            return scoped_proposal(rule, call.session.machine, self.host.several_machines())
        except Exception:
            log.exception("no rule proposed for %r", call.name)
            return None

    async def _grant_offer(self, call: Call, step: Plan) -> Grant | None:
        """What "Allow … for this session" would grant on this call, or None (not offered).
        Finding a write's project looks for ``.git`` up the tree: in a file worker."""
        if step.escalation is not None:
            return None
        # A one-call session (main's 2026-07-28 era, § 9) has nothing "for this session".
        if getattr(call.session, "one_call", False):
            return None
        try:
            project = None
            if call.name in ("write", "edit"):
                real = self.main_path(step.tool, call.args, step.ctx.policy)
                if real is None:
                    return None
                roots, home = self.policy.roots, self.policy.home
                project = await pools.run(pools.Pool.FILE, project_of, real, roots, home)
            return offer(
                call.name, call.args, escalated=False, project=project, home=self.policy.home
            )
        except Exception:
            log.exception("no session grant offered for %r", call.name)
            return None

    async def _ask_context(self, call: Call, step: Plan) -> dict[str, Any]:
        """What the human sees beside the call (server/present/diffview.py, risk.py): the diff
        of a write/edit from the file as it is now (read in a file worker, bounded), the risk
        cues, and why no "Always allow" is offered. Never fails the call: a part that cannot
        be computed is left out."""
        out: dict[str, Any] = {}
        real = None
        try:
            real = self.main_path(step.tool, call.args, step.ctx.policy)
            if call.name in ("write", "edit") and real is not None:
                before = await pools.run(pools.Pool.FILE, read_before, real, DIFF_READ_MAX)
                out["change"] = change_view(call.name, call.args, before)
                step.ctx.shown_digest = before.digest  # what an approval of this diff covers
            cwd = self._real_cwd(step, call.args)
            cues = call_cues(
                call.name, call.args, escalation=step.escalation, roots=self.policy.roots, cwd=cwd
            )
            out["risks"] = [c.to_json() for c in cues]
            j, esc = step.judgement, step.escalation
            why = why_no_rule(
                call.name,
                call.args,
                real,
                always_asks=_asks_always(esc),
                ask_rule=step.rule if j is not None and j.match.decision is RuleList.ASK else None,
                guard=j is not None and j.ground is Ground.GUARD,
                base=self.policy.roots[0],
            )
            if why is not None:
                out["no_rule"] = shorten(why, 300).text
        except Exception:
            log.exception("no approval context for %r", call.name)
        return out

    def _run_now(self, step: Plan, args: dict[str, Any]) -> ToolResult | None:
        """The tool's result if it can answer without waiting (see ``Tool.run_now``)."""
        try:
            return step.tool.run_now(args, step.ctx)
        except ToolError as e:
            return ToolResult.text(str(e), True)

    async def _run_plan(self, call: Call, step: Plan, handle: CallHandle) -> Outcome:
        session, name, wait_ms = call.session, call.name, 0
        if step.needs_human:
            waited = time.monotonic()
            grant = await self._grant_offer(call, step)
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
                    grant=grant,
                    on_created=lambda p: setattr(handle, "pending_id", p.id),
                    machine=session.machine,
                    context=await self._ask_context(call, step),  # diff, risk cues, no-rule why
                )
            finally:
                self._wait_ended(session, handle)
            wait_ms = int((time.monotonic() - waited) * 1000)
            refusal = refusal_for(
                verdict, step.escalation, self.config.approval_timeout_s, self.policy.roots
            )
            if refusal is not None:
                refusal.wait_ms = wait_ms
                if step.box_note and refusal.result is not None and verdict.decision is None:
                    said = refusal.result.content[0].get("text", "")
                    refusal.result = ToolResult.text(f"{said}\n[{step.box_note}]", True)
                return refusal
            step.ctx.approved = True
            # A human decided on this very call: it runs outside the box only when they chose
            # "Run outside the box", approved a call that asked for it, or there is no box.
            step.ctx.outside_box = step.tool.boxable and (
                verdict.decision is Decision.RUN_OUTSIDE_BOX or step.box_note is not None
            )
            if verdict.decision is not None:
                step.tool.on_allowed(verdict.decision.value)  # upstream tools re-pin
            if verdict.decision is Decision.ALLOW_SESSION and grant is not None:
                session.grants.append(grant)
            elif verdict.decision is Decision.ALLOW_ALWAYS and verdict.rule:
                loop = asyncio.get_running_loop()
                self.rulebook.add(RuleList.ALLOW, verdict.rule.splitlines(), loop)
            result = self._run_now(step, call.args)  # approved: may still finish at once
            if result is not None:
                return Outcome(
                    result, ok_or_error(result), step.decided_by, wait_ms, rule=step.rule
                )
        # The tool runs inside this request's task (no extra Task per call); a cancel from the
        # client or the shutdown cancels this task while handle.task points at it.
        if step.tool.boxable:
            call.box = "outside" if step.ctx.outside_box else "in"
        handle.task = me = asyncio.current_task()
        meter = pools.QueueMeter()
        handle.cancel_on_disconnect = step.tool.cancel_on_disconnect
        try:
            with pools.queue_meter() as meter:
                result = await step.tool.run(call.args, step.ctx)
        except asyncio.CancelledError:
            if me is None or not (handle.cancelled or self.host.closing):
                raise
            me.uncancel()
            return Outcome(None, CallOutcome.CANCELLED, step.decided_by, wait_ms, rule=step.rule)
        except ToolError as e:
            result = ToolResult.text(str(e), True)
        except (UnicodeError, ValueError) as e:
            return bad_input(name, e, step.decided_by, wait_ms)
        except Exception as e:
            log.error("tool %r failed", name, exc_info=e)
            result = ToolResult.text(f"tool '{name}' failed: {type(e).__name__}", True)
        finally:
            handle.task = None
        return Outcome(
            result, ok_or_error(result), step.decided_by, wait_ms, meter.queue_ms, rule=step.rule
        )

    def _wait_ended(self, session: Session, handle: CallHandle) -> None:
        session.pending -= 1
        handle.pending_id = None
        self.host.state_changed()  # the broker published before this count fell

    def _real_cwd(self, step: Plan, args: dict[str, Any]) -> str | None:
        """The working directory a human is asked about: the real path the tool will use."""
        if "cwd" not in step.tool.path_args:
            return None
        value = args.get("cwd")
        try:
            return step.ctx.resolve(value if isinstance(value, str) else None)
        except (OSError, ValueError):
            return None

    def explain(self, name: str, args: dict[str, Any], machine: str | None = None) -> Judgement:
        """What would happen to this call now, no session grant counted: "test a rule"
        (``machine``: as from that machine; None: rules scoped to a machine are left out)."""
        return judge(self.prepare(name, args, machine=machine).request)


_ALWAYS_ASKS_WORDS = {
    EscalationKind.PROTECTED: "a protected location",
    EscalationKind.PERSISTENCE: "a persistence location",
    EscalationKind.OWN_FILE: "one of the bridge's own files",
    EscalationKind.UNCHECKED: "a call too large to check for protected paths",
}


def _asks_always(esc: Escalation | None) -> str | None:
    """``a protected location (SSH keys)``: the short words of an escalation that always asks
    (the card shows its path above), or None."""
    if esc is None or not always_asks(esc):
        return None
    return f"{_ALWAYS_ASKS_WORDS.get(esc.kind, 'a protected location')} ({esc.category})"


def tier_of(cfg: Config) -> Callable[[Tool], Tier]:
    """The tier rule, written once: the config's per-tool tier, else the tool's own default
    (a plugin's), else the config's default; always a :class:`Tier` (the judge compares
    members)."""

    def tier(tool: Tool) -> Tier:
        value = cfg.tiers.get(tool.name) or tool.default_tier or cfg.default_tier
        try:
            return Tier(value)  # a plugin may write its default_tier as a plain string
        except ValueError:
            return Tier.PROMPT  # a tier no one knows asks, as it always did

    return tier


def main_path(tool: Tool, args: dict[str, Any], paths: PathPolicy | CallPaths) -> str | None:
    """The real path a path tool's rule is matched against (resolved like the tool does)."""
    if tool.name not in PATH_TOOLS or "path" not in tool.path_args:
        return None
    value = args.get("path", tool.default_paths.get("path"))
    return paths.resolve(value) if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call's :class:`DecisionRequest` and what running it needs (None when it cannot)."""

    request: DecisionRequest
    tool: Tool | None = None
    paths: CallPaths | None = None


def prepare_request(
    registry: ToolRegistry,
    policy: PathPolicy,
    rules: RuleSet,
    tier_of: Callable[[Tool], Tier],
    name: str,
    args: Any,
    *,
    grants: Sequence[Grant] = (),
    paused: bool = False,
    closing: bool = False,
    machine: str | None = None,
) -> Prepared:
    """The judge's inputs, for the live pipeline and the offline ``rules test`` alike.

    What the judge cannot do itself happens here: the tier, the schema check, the path
    escalation and the real path a rule matches (``realpath``, ``stat``), the upstream pin.
    Nothing is worked out that the judge would not look at (paused, not exposed, invalid).
    """
    tool = registry.get(name)
    tier = tier_of(tool) if tool is not None else None
    paths: CallPaths | None = None
    escalation: Escalation | None = None
    real: str | None = None
    invalid: str | None = None
    suspended = False
    if tool is None or tier is Tier.DENY or closing or paused:
        tool = None  # judged without running anything: nothing to work out
    elif not isinstance(args, dict):
        invalid = f"invalid arguments for '{name}': arguments must be an object"
    else:
        invalid = registry.validate(name, args)
    if tool is not None and invalid is None:
        paths = CallPaths(policy)
        try:
            # In the box the kernel keeps what the command's text names in bounds: a boxed
            # call's escalation is its folder alone (the base Tool.escalation judges the cwd).
            boxed = tool.boxable and box_gate(args, box_probe.status()) is None
            escalation = (Tool.escalation if boxed else type(tool).escalation)(tool, args, paths)
            real = main_path(tool, args, paths) if rules else None
            suspended = tool.grants_suspended()  # an upstream tool changed since approved
        except ValueError as e:  # a NUL in a path argument: the OS cannot even name it
            invalid, paths = f"invalid path for '{name}': {e}", None
    as_dict = args if isinstance(args, dict) else {}
    # Whether a session grant's scope (bash: program + subcommand; write/edit: the project,
    # server.policy.grants) covers the call. The judge still asks when the call is escalated
    # (outside the roots, private, persistence) or the upstream tool changed: a grant never
    # covers those, and the judge names that as the reason.
    granted = False
    if grants and tool is not None and paths is not None:
        real_path = real if real is not None else main_path(tool, as_dict, paths)
        granted = covering(grants, name, as_dict, real_path) is not None
    request = DecisionRequest(
        name,
        as_dict,
        tier,
        rules,
        real,
        escalation,
        invalid,
        suspended,
        granted=granted,
        paused=paused,
        closing=closing,
        boxable=tool is not None and tool.boxable,
        box_available=box_probe.status().available,
        machine=machine,
    )
    return Prepared(request, tool if paths is not None else None, paths)


def refusal(j: Judgement) -> Outcome:
    """The agent's text and the audit record of a call the judge did not let run or ask."""
    if j.ground is Ground.RULE:
        text = f"denied by rule {j.rule} (rules.deny)"
        return refused(text, CallOutcome.DENIED, DecidedBy.RULE, rule=j.rule)
    if j.ground is Ground.SHUTDOWN:
        text = SHUTDOWN_TEXT
    elif j.ground is Ground.PAUSED:
        text = PAUSED_TEXT
    elif j.ground is Ground.INVALID and j.invalid is not None:
        text = j.invalid
    else:
        text = not_exposed_text(j.tool)
    return refused(text, j.outcome or CallOutcome.DENIED, j.decided_by)


def box_request(config: Config, roots: Sequence[str], audit_path: str) -> BoxRequest:
    """What bash builds each call's box from; the bridge's own files stay private in it."""
    own = [config.path, audit_path, os.path.dirname(config.path), os.path.dirname(audit_path)]
    own.append(runtime_dir())
    own.append(os.environ.get("XDG_RUNTIME_DIR", ""))  # and all of /run (server/box/policy)
    named = tuple(config.roots)  # as configured: a root named by a link (the box makes it again)
    return BoxRequest(config.box, tuple(roots), tuple(p for p in own if p), named)
