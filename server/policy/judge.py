"""The one judge: whether a tools/call runs, runs in the box, asks a human or is refused.

Why one function: in a security product the answer to "would this run unasked?" must not
depend on who asks. The live pipeline (:mod:`server.core.pipeline`), ``a2a-bridge rules test``
(offline and live), the offline explain and every UI's "why" (``POST /api/rules/test``) all
call :func:`judge`, and get the same typed :class:`Judgement`.

The judge is pure: no file system, no clock, no bridge. Whatever needs I/O or state — the
path escalation (``realpath``, ``stat``), the real path a rule matches against, the rules in
force, whether a session grant covers the call, whether an upstream tool's pin changed, the
pause — is worked out by the caller and handed over in a :class:`DecisionRequest`.

The order (the first that applies decides): shutting down, paused, not exposed, invalid
arguments, deny rules, ask rules (and the guard), ``"box": false``, allow rules, the tier
with its grants. An escalation that always asks (protected, persistence, own files) beats an
allow rule, a grant and the allow tier. A boxable tool (``bash``) never runs outside the box
unasked: an allow rule, a grant and the allow or box tier mean "in the box", and where no box
can be made it asks (``no box``). For a boxed call the caller judges only the call's folder,
not the paths its text names: the kernel, not the text check, keeps it inside its limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..vocab import CallOutcome, DecidedBy, Ground, Ruling, Tier
from .paths import Escalation, always_asks
from .rules import RuleList, RuleSet, Verdict, evaluate

__all__ = ["DecisionRequest", "Judgement", "judge"]

_TEXTS = {
    Ground.RULE: "a rule decides",
    Ground.TIER: "the tool's tier decides",
    Ground.ESCALATION: "the path needs a human",
    Ground.GUARD: "deny rules exist and the command cannot be read",
    Ground.NOT_EXPOSED: "the tool is not exposed",
    Ground.SUSPENDED: "the upstream tool changed since it was approved",
    Ground.GRANT: "an 'Allow for this session' grant covers it",
    Ground.NO_BOX: "no box is available here, so it asks as a prompt tier",
    Ground.OUTSIDE_BOX: "the agent asked to run it outside the box",
    Ground.PAUSED: "the bridge is paused",
    Ground.SHUTDOWN: "the bridge is shutting down",
    Ground.INVALID: "the arguments are invalid",
}


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    """Everything the judge needs about one call, the I/O already done by the caller.

    ``tier`` is None when no tool has that name. ``invalid`` says why the arguments cannot
    be judged (then ``real`` and ``escalation`` are None). ``granted``: a session grant
    covers this call (how narrow a grant is, is the grant's business). ``suspended``: an
    upstream tool changed since its rules and grants were given.
    """

    tool: str
    args: Mapping[str, Any]
    tier: Tier | None
    rules: RuleSet = field(default_factory=RuleSet)
    real: str | None = None  # the real path a path rule is matched against
    escalation: Escalation | None = None
    invalid: str | None = None
    suspended: bool = False
    granted: bool = False
    paused: bool = False
    closing: bool = False
    boxable: bool = False  # the tool runs in the box when it runs unasked (bash)
    box_available: bool = False
    machine: str | None = None  # the calling machine (from its token): scoped rules need it


@dataclass(frozen=True, slots=True)
class Judgement:
    """The judge's answer. ``match`` is what the rules said (even when something else
    decided, so a UI can say "this rule matches, but the path always asks"); ``rule`` is
    the rule the audit records with the call, if any."""

    ruling: Ruling
    ground: Ground
    tool: str
    tier: Tier | None = None
    match: Verdict = field(default_factory=lambda: Verdict(None))
    rule: str | None = None
    escalation: Escalation | None = None
    invalid: str | None = None

    @property
    def text(self) -> str:
        """Why, in words (no agent text in it: rules and paths are shown apart, rendered)."""
        return _TEXTS[self.ground]

    @property
    def runs(self) -> bool:
        return self.ruling in (Ruling.RUN, Ruling.RUN_IN_BOX)

    @property
    def decided_by(self) -> DecidedBy:
        """Who the audit names: a rule, the policy, a grant, or (after the wait) the user."""
        if self.ruling is Ruling.ASK:
            return DecidedBy.USER
        if self.ground is Ground.RULE:
            return DecidedBy.RULE
        if self.ground is Ground.GRANT:
            return DecidedBy.SESSION_RULE
        return DecidedBy.POLICY

    @property
    def outcome(self) -> CallOutcome | None:
        """The audit outcome of a call refused here; None when it runs or asks."""
        if self.ruling is Ruling.NOT_EXPOSED:
            return CallOutcome.NOT_EXPOSED
        if self.ruling is not Ruling.REFUSE:
            return None
        if self.ground is Ground.PAUSED:
            return CallOutcome.PAUSED
        if self.ground is Ground.INVALID:
            return CallOutcome.ERROR
        return CallOutcome.DENIED

    @property
    def can_propose(self) -> bool:
        """Whether "Always allow calls like this" could ever apply: not under an ask rule (or
        the guard), not for an escalation that always asks."""
        return self.match.decision is not RuleList.ASK and not always_asks(self.escalation)


def judge(request: DecisionRequest) -> Judgement:
    """Run, run in the box, ask or refuse: see the module docstring for the order."""
    r = request
    if r.closing:
        return Judgement(Ruling.REFUSE, Ground.SHUTDOWN, r.tool, r.tier)
    if r.paused:
        return Judgement(Ruling.REFUSE, Ground.PAUSED, r.tool, r.tier)
    if r.tier is None or r.tier is Tier.DENY:
        return Judgement(Ruling.NOT_EXPOSED, Ground.NOT_EXPOSED, r.tool, r.tier)
    if r.invalid is not None:
        return Judgement(Ruling.REFUSE, Ground.INVALID, r.tool, r.tier, invalid=r.invalid)
    match = evaluate(r.rules, r.tool, r.args, r.real, r.machine)
    outside = r.boxable and r.args.get("box") is False
    boxed = r.boxable and r.box_available and not outside

    def ruled(ruling: Ruling, ground: Ground, rule: str | None = None) -> Judgement:
        return Judgement(ruling, ground, r.tool, r.tier, match, rule, r.escalation)

    if match.decision is RuleList.DENY:
        return ruled(Ruling.REFUSE, Ground.RULE, match.rule)
    if match.decision is RuleList.ASK:
        return ruled(Ruling.ASK, Ground.RULE if match.rule else Ground.GUARD, match.rule)
    if outside:  # nothing runs outside the box without a human decision on that very call
        return ruled(Ruling.ASK, Ground.OUTSIDE_BOX)
    if match.decision is RuleList.ALLOW:
        if always_asks(r.escalation):
            return ruled(Ruling.ASK, Ground.ESCALATION)
        if r.suspended:
            return ruled(Ruling.ASK, Ground.SUSPENDED, match.rule)
        if r.boxable:  # an allow rule for a boxable tool means "in the box"
            if not boxed:
                return ruled(Ruling.ASK, Ground.NO_BOX)
            return ruled(Ruling.RUN_IN_BOX, Ground.RULE, match.rule)
        return ruled(Ruling.RUN, Ground.RULE, match.rule)
    return ruled(*_by_tier(r, boxed))


def _by_tier(r: DecisionRequest, boxed: bool) -> tuple[Ruling, Ground]:
    """No rule decided: the tier, and a session grant where the tier asks."""
    if r.boxable:
        # The box and allow tiers, and a grant, run a boxable tool in the box only; its
        # escalation is the call's folder alone (the kernel keeps the command's paths in
        # bounds, so the caller judges no text paths for a boxed call).
        runs = r.tier in (Tier.ALLOW, Tier.BOX) or r.granted
        if not runs:
            return Ruling.ASK, Ground.TIER
        if r.escalation is not None:
            return Ruling.ASK, Ground.ESCALATION
        if not boxed:
            return Ruling.ASK, Ground.NO_BOX
        by_grant = r.granted and r.tier not in (Tier.ALLOW, Tier.BOX)
        return Ruling.RUN_IN_BOX, Ground.GRANT if by_grant else Ground.TIER
    if r.tier is Tier.ALLOW and r.escalation is None and not r.suspended:
        return Ruling.RUN, Ground.TIER
    # "Allow for this session" never covers an escalated call (outside the roots,
    # protected, persistence) nor a changed upstream tool: only a human decision does.
    if r.escalation is not None and (r.granted or r.tier is Tier.ALLOW):
        return Ruling.ASK, Ground.ESCALATION
    if r.suspended and (r.granted or r.tier is Tier.ALLOW):
        return Ruling.ASK, Ground.SUSPENDED
    if r.granted:
        return Ruling.RUN, Ground.GRANT
    return Ruling.ASK, Ground.TIER  # prompt; a box tier on a tool that cannot be boxed too
