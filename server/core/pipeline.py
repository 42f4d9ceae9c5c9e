"""The tools/call pipeline: prepare → rules → approve → run → audit, for one call at a time.

:meth:`CallPipeline.tools_call` takes a ``tools/call`` that passed the order of checks
(:mod:`server.mcp.http`) and ends it with exactly one reply and exactly one pair of audit records.
The stages are methods, each with one job: ``_prepare`` (every check that needs no waiting:
pause, exposure, schema, path escalation), ``_apply_rules`` (the rules lists; deny > ask >
allow), the approval wait through the :class:`~server.core.approvals.ApprovalBroker`, running the
tool (at once when it can answer without waiting, else inside the request's task) and
``_finish`` (the done record and a reply that always encodes). Protected paths plug in through
``Tool.escalation``, upstream MCP tools through the :class:`~server.tools.base.Tool` hooks
(``approval_info``, ``grants_suspended``, ``on_allowed``, ``cancel_on_disconnect``).

The pipeline owns the policy state a call is judged by (tiers, the path policy, and reads the
rules in force from the :class:`~server.policy.rulebook.RuleBook`); the
:class:`~server.core.bridge.Bridge` owns the sessions, the in-flight table and pause/shutdown, and
hands those to the pipeline as its :class:`PipelineHost`. (A little over 400 lines: the
stages read best in order, in one place; how a call ends for the agent is
:mod:`server.core.outcome`.)
"""

from __future__ import annotations

import asyncio
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
from ..policy.paths import CallPaths, Escalation, PathPolicy, always_asks
from ..policy.proposals import propose
from ..policy.rulebook import RuleBook
from ..policy.rules import PATH_TOOLS, RuleList, RuleSet, evaluate
from ..present.textsafe import render
from ..tools import pools
from ..tools.base import Tool, ToolContext, ToolError, ToolResult
from ..tools.registry import ToolRegistry
from ..vocab import AuditPhase, CallOutcome, DecidedBy, Tier
from .approvals import ApprovalBroker, Decision
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

log = logging.getLogger("a2a-bridge")


@dataclass(slots=True)
class CallHandle:
    """A tools/call in flight, so a cancel or a disconnect can find and end it."""

    pending_id: str | None = None
    task: asyncio.Task[Any] | None = None  # set while the tool runs
    cancelled: bool = False
    cancel_on_disconnect: bool = False  # set while a tool runs that wants it (upstream calls)
    answer: Callable[[Reply], None] | None = None  # the HTTP layer's writer for this call


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
    box_note: str | None = None  # why a boxable call asks: no box here, or "box": false


class PipelineHost(Protocol):
    """What the pipeline needs from its bridge: the pause/shutdown flags, the in-flight table
    (so a cancel or a disconnect finds a held call) and saving an "Always allow" rule."""

    paused: bool
    closing: bool
    inflight: dict[tuple[str, Any], CallHandle]

    def add_rules(self, which: RuleList, texts: list[str]) -> None: ...

    def child_env(self) -> dict[str, str]: ...


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
    ) -> None:
        self.host = host
        self.config = config
        self.registry = registry
        self.policy = policy
        self.broker = broker
        self.audit = audit
        self.tiers = dict(config.tiers)
        self.rulebook = rulebook
        self.calls_total = 0
        self.box = box_request(config, policy.roots, audit.path)

    def tier(self, tool: Tool) -> Tier:
        return self.tiers.get(tool.name) or tool.default_tier or self.config.default_tier

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
        self._audit(call, AuditPhase.START)
        try:
            step = self._prepare(call)
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

    async def _tools_call_async(self, call: Call, step: Plan, handle: CallHandle) -> Reply:
        key = (call.session.sid, call.req_id)
        registered = False
        try:
            if call.req_id is not None and key not in self.host.inflight:
                self.host.inflight[key] = handle
                registered = True
            out = await self._run_plan(call, step, handle)
        except Exception:
            log.exception("internal error: tools/call %r", call.name)
            out = internal(call.name)
        finally:
            if registered:
                self.host.inflight.pop(key, None)
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

    def _prepare(self, call: Call) -> Outcome | Plan:
        """Every check that needs no waiting: a refusal, or the plan to run the tool."""
        name, args, session = call.name, call.args, call.session
        if self.host.closing:
            return refused(SHUTDOWN_TEXT, CallOutcome.DENIED)
        if self.host.paused:
            return refused(PAUSED_TEXT, CallOutcome.PAUSED)
        tool = self.exposed(name)
        if tool is None:
            return refused(
                not_exposed_text(name),
                CallOutcome.NOT_EXPOSED,
                DecidedBy.POLICY,
            )
        if not isinstance(args, dict):
            text = f"invalid arguments for '{name}': arguments must be an object"
            return refused(text, CallOutcome.ERROR)
        problem = self.registry.validate(name, args)
        if problem is not None:
            return refused(problem, CallOutcome.ERROR)
        paths = CallPaths(self.policy)
        try:
            escalation = tool.escalation(args, paths)
        except ValueError as e:  # a NUL in a path argument: the OS cannot even name it
            text = f"invalid path for '{name}': {e}"
            return refused(text, CallOutcome.ERROR)
        ctx = ToolContext(call.id, session.sid, session.client, paths, self.config.limits)
        ctx.env = self.host.child_env()
        box_asks = None  # the box: why this boxable call must ask anyway (no box, "box": false)
        ctx.box = self.box  # bash runs in it; grep and find walk in a read-only one
        if tool.boxable:
            ctx.box, box_asks = self.box, box_gate(args, box_probe.status())
            if box_asks is None:  # in the box the kernel enforces what the command text names;
                escalation = Tool.escalation(tool, args, paths)  # the cwd is still judged
        ctx.escalation = escalation
        suspended = tool.grants_suspended() or box_asks is not None
        if self.rulebook.rules:
            ruled = self._apply_rules(tool, args, paths, escalation, ctx, suspended)
            if ruled is not None:
                return _box_note(ruled, box_asks)
        tier = self.tier(tool)
        if tier == Tier.BOX:  # unasked in the box; where there is none, as prompt
            tier = Tier.ALLOW if tool.boxable and box_asks is None else Tier.PROMPT
        if tier == Tier.ALLOW and escalation is None and not suspended:
            tool.on_allowed(DecidedBy.POLICY)
            return Plan(tool, ctx, DecidedBy.POLICY, False, escalation)
        # "Allow for this session" never covers an escalated call (outside the roots,
        # protected, persistence): only a human decision on this very call does.
        if escalation is None and not suspended and name in session.allowed_tools:
            return Plan(tool, ctx, DecidedBy.SESSION_RULE, False, escalation)
        return _box_note(Plan(tool, ctx, DecidedBy.USER, True, escalation), box_asks)

    def main_path(
        self, tool: Tool, args: dict[str, Any], paths: PathPolicy | CallPaths
    ) -> str | None:
        return main_path(tool, args, paths)

    def _apply_rules(
        self,
        tool: Tool,
        args: dict[str, Any],
        paths: CallPaths,
        escalation: Escalation | None,
        ctx: ToolContext,
        suspended: bool = False,
    ) -> Outcome | Plan | None:
        """deny > ask > allow; an always-asking escalation overrides an allow rule, and so does
        an upstream tool whose definition changed since it was approved (``suspended``)."""
        v = evaluate(self.rulebook.rules, tool.name, args, self.main_path(tool, args, paths))
        if v.decision is None:
            return None
        if v.decision is RuleList.DENY:
            text = f"denied by rule {v.rule} (rules.deny)"
            return refused(text, CallOutcome.DENIED, DecidedBy.RULE, rule=v.rule)
        if v.decision is RuleList.ASK:
            return Plan(tool, ctx, DecidedBy.USER, True, escalation, v.rule, can_propose=False)
        if always_asks(escalation):
            return Plan(tool, ctx, DecidedBy.USER, True, escalation, can_propose=False)
        if suspended:
            return Plan(tool, ctx, DecidedBy.USER, True, escalation, v.rule)
        tool.on_allowed(DecidedBy.RULE)
        return Plan(tool, ctx, DecidedBy.RULE, False, escalation, v.rule)

    def _proposal(self, call: Call, step: Plan) -> str | None:
        """The narrow rule "Always allow calls like this" would save, or None."""
        if not step.can_propose or always_asks(step.escalation):
            return None
        try:
            real = self.main_path(step.tool, call.args, step.ctx.policy)
            return propose(call.name, call.args, real, base=self.policy.roots[0])
        except Exception:
            log.exception("no rule proposed for %r", call.name)
            return None

    def _run_now(self, step: Plan, args: dict[str, Any]) -> ToolResult | None:
        """The tool's result if it can answer without waiting (see ``Tool.run_now``)."""
        try:
            return step.tool.run_now(args, step.ctx)
        except ToolError as e:
            return ToolResult.text(str(e), True)

    async def _run_plan(self, call: Call, step: Plan, handle: CallHandle) -> Outcome:
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
            if verdict.decision is Decision.ALLOW_SESSION:
                session.allowed_tools.add(name)
            elif verdict.decision is Decision.ALLOW_ALWAYS and verdict.rule:
                self.host.add_rules(RuleList.ALLOW, verdict.rule.splitlines())
            result = self._run_now(step, call.args)  # approved: may still finish at once
            if result is not None:
                return Outcome(
                    result, ok_or_error(result), step.decided_by, wait_ms, rule=step.rule
                )
        # The tool runs inside this request's task (no extra Task per call); a cancel from the
        # client or the shutdown cancels this task while handle.task points at it.
        if step.tool.boxable:
            call.box = "outside" if step.ctx.outside_box else "in"
        me = asyncio.current_task()
        handle.task = me
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

    def _real_cwd(self, step: Plan, args: dict[str, Any]) -> str | None:
        """The working directory a human is asked about: the real path the tool will use."""
        if "cwd" not in step.tool.path_args:
            return None
        value = args.get("cwd")
        try:
            return step.ctx.resolve(value if isinstance(value, str) else None)
        except (OSError, ValueError):
            return None

    def explain(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """What would happen to this call now (no session grant counted): for "test a rule"."""
        return explain_call(self.registry, self.policy, self.rulebook.rules, self.tier, name, args)


def main_path(tool: Tool, args: dict[str, Any], paths: PathPolicy | CallPaths) -> str | None:
    """The real path a path tool's rule is matched against (resolved like the tool does)."""
    if tool.name not in PATH_TOOLS or "path" not in tool.path_args:
        return None
    value = args.get("path", tool.default_paths.get("path"))
    return paths.resolve(value) if isinstance(value, str) else None


def explain_call(
    registry: ToolRegistry,
    policy: PathPolicy,
    rules: RuleSet,
    tier_of: Callable[[Tool], Tier],
    name: str,
    args: dict[str, Any],
) -> dict[str, Any]:
    """What would happen to this call (no session grant counted): "test a rule".

    One function for the live bridge (``POST /api/rules/test``) and the offline
    ``a2a-bridge rules test``, so both judge paths, escalations and tiers the same way.
    """
    tool = registry.get(name)
    real = escalation = None
    if tool is not None:
        paths = CallPaths(policy)
        escalation = tool.escalation(args, paths)
        real = main_path(tool, args, paths)
    v = evaluate(rules, name, args, real)
    tier = tier_of(tool) if tool is not None else None
    box_asks = box_gate(args, box_probe.status()) if tool is not None and tool.boxable else None
    if tool is not None and tool.boxable and box_asks is None:
        escalation = Tool.escalation(tool, args, paths)  # the box judges the text: cwd only
    if v.decision is RuleList.ASK and v.rule is None:
        outcome, by = "ask", "guard"  # deny rules exist and the command is unreadable
    elif v.decision is RuleList.DENY or v.decision is RuleList.ASK:
        outcome, by = v.decision.value, "rule"
    elif v.decision is RuleList.ALLOW and box_asks is not None:
        outcome, by = "ask", "box"  # nothing runs outside the box unasked
    elif v.decision is RuleList.ALLOW:
        outcome, by = ("ask", "escalation") if always_asks(escalation) else ("allow", "rule")
    elif tool is None or tier == "deny":
        outcome, by = "deny", "not exposed"
    elif tool.boxable and tier in ("box", "allow"):
        outcome, by = ("ask", "box") if box_asks is not None else ("allow", "box")
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
        # The matching rule may hold an agent's path or value: for display, rendered.
        "rule_display": None if v.rule is None else render(v.rule).text,
        "index": v.index,
        "tier": tier,
        "unsafe": v.unsafe,
        "escalation": esc,
    }


def _box_note(plan: Outcome | Plan, box_asks: str | None) -> Outcome | Plan:
    """A plan that runs unasked becomes one that asks when the box cannot be used."""
    if box_asks is None or not isinstance(plan, Plan):
        return plan
    plan.box_note = box_asks
    if plan.needs_human:
        return plan
    plan = Plan(plan.tool, plan.ctx, DecidedBy.USER, True, plan.escalation, plan.rule)
    plan.box_note = box_asks
    return plan


def box_request(config: Config, roots: Sequence[str], audit_path: str) -> BoxRequest:
    """What bash builds each call's box from; the bridge's own files stay private in it."""
    own = [config.path, audit_path, os.path.dirname(config.path), os.path.dirname(audit_path)]
    own.append(runtime_dir())
    own.append(os.environ.get("XDG_RUNTIME_DIR", ""))  # and all of /run (server/box/policy)
    return BoxRequest(config.box, tuple(roots), tuple(p for p in own if p))
