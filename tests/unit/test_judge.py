"""The one judge, on its own: every ruling and ground, the order in which they win, and the box.

Why: the live pipeline, ``rules test`` and every UI's "why" call :func:`judge`; these tests pin
what it rules for each kind of input (the table), so a change to the order of a security
decision fails here first. ``tests/integration/test_one_judge.py`` checks the callers agree.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from omp_a2a_bridge.server.policy.judge import DecisionRequest, judge
from omp_a2a_bridge.server.policy.paths import Escalation, EscalationKind
from omp_a2a_bridge.server.policy.rules import RuleList, parse_rules
from omp_a2a_bridge.server.vocab import CallOutcome, DecidedBy, Ground, Ruling, Tier

RULES = parse_rules(
    {
        "allow": ["bash(git status)", "read(/srv/**)", "write(/home/u/**)"],
        "ask": ["bash(git commit *)"],
        "deny": ["bash(rm *)", "read(**/secret*)"],
    }
)
OUTSIDE = Escalation(EscalationKind.OUTSIDE_ROOTS, "outside the configured roots", "/srv/x")
SSH = Escalation(EscalationKind.PROTECTED, "SSH keys", "/home/u/.ssh/id_rsa")
RC = Escalation(EscalationKind.PERSISTENCE, "shell startup file", "/home/u/.bashrc")


def req(tool: str = "bash", tier: Tier | None = Tier.PROMPT, **kw: Any) -> DecisionRequest:
    args = kw.pop("args", {"command": "ls"} if tool == "bash" else {"path": "/srv/a"})
    kw.setdefault("real", args.get("path"))
    return DecisionRequest(tool, args, tier, RULES, **kw)


def bash(command: str, tier: Tier = Tier.PROMPT, **kw: Any) -> DecisionRequest:
    """A command tool judged on its own (rules, tiers, grants), not boxable."""
    return req("bash", tier, args={"command": command, **kw.pop("extra", {})}, **kw)


def boxed(command: str, tier: Tier = Tier.PROMPT, **kw: Any) -> DecisionRequest:
    """``bash`` as the bridge has it: boxable, with a box here unless told otherwise."""
    kw.setdefault("box_available", True)
    return bash(command, tier, boxable=True, **kw)


TABLE: list[tuple[str, DecisionRequest, Ruling, Ground, str | None]] = [
    # tiers, no rule
    ("allow tier runs", req("ls", Tier.ALLOW), Ruling.RUN, Ground.TIER, None),
    ("prompt tier asks", req("ls"), Ruling.ASK, Ground.TIER, None),
    ("deny tier hides", req("ls", Tier.DENY), Ruling.NOT_EXPOSED, Ground.NOT_EXPOSED, None),
    ("unknown tool", req("nope", None), Ruling.NOT_EXPOSED, Ground.NOT_EXPOSED, None),
    # rules: deny > ask > allow
    ("deny rule", bash("rm -rf x", Tier.ALLOW), Ruling.REFUSE, Ground.RULE, "bash(rm *)"),
    ("ask rule", bash("git commit -m x", Tier.ALLOW), Ruling.ASK, Ground.RULE,
     "bash(git commit *)"),
    ("allow rule", bash("git status"), Ruling.RUN, Ground.RULE, "bash(git status)"),
    ("deny beats allow", bash("git status; rm x"), Ruling.REFUSE, Ground.RULE, "bash(rm *)"),
    ("guard", bash("git status > out", Tier.ALLOW), Ruling.ASK, Ground.GUARD, None),
    ("path deny", req("read", Tier.ALLOW, real="/srv/secret"), Ruling.REFUSE, Ground.RULE,
     "read(**/secret*)"),
    # escalations
    ("allow tier, outside", req("ls", Tier.ALLOW, escalation=OUTSIDE), Ruling.ASK,
     Ground.ESCALATION, None),
    ("allow rule covers outside", req("read", escalation=OUTSIDE), Ruling.RUN, Ground.RULE,
     "read(/srv/**)"),
    ("allow rule never covers protected", req("read", real="/srv/k", escalation=SSH),
     Ruling.ASK, Ground.ESCALATION, None),
    ("prompt tier with escalation", req("ls", escalation=SSH), Ruling.ASK, Ground.TIER, None),
    # grants
    ("grant", req("ls", granted=True), Ruling.RUN, Ground.GRANT, None),
    ("grant never covers escalation", req("ls", granted=True, escalation=OUTSIDE), Ruling.ASK,
     Ground.ESCALATION, None),
    ("ask rule beats grant", bash("git commit -m x", granted=True), Ruling.ASK, Ground.RULE,
     "bash(git commit *)"),
    # suspended upstream pins
    ("suspended allow tier", req("mcp__u__t", Tier.ALLOW, suspended=True), Ruling.ASK,
     Ground.SUSPENDED, None),
    ("suspended allow rule", req("read", suspended=True), Ruling.ASK, Ground.SUSPENDED,
     "read(/srv/**)"),
    ("suspended grant", req("mcp__u__t", granted=True, suspended=True), Ruling.ASK,
     Ground.SUSPENDED, None),
    # paused, shutdown, invalid: before everything else
    ("paused", bash("git status", paused=True), Ruling.REFUSE, Ground.PAUSED, None),
    ("paused hides nothing", req("nope", None, paused=True), Ruling.REFUSE, Ground.PAUSED, None),
    ("shutdown", bash("rm x", closing=True, paused=True), Ruling.REFUSE, Ground.SHUTDOWN, None),
    ("invalid", bash("rm x", invalid="bad"), Ruling.REFUSE, Ground.INVALID, None),
    ("not exposed before invalid", req("ls", Tier.DENY, invalid="bad"), Ruling.NOT_EXPOSED,
     Ground.NOT_EXPOSED, None),
    # the box (bash is boxable: it never runs outside the box unasked)
    ("box tier, box", boxed("make", Tier.BOX), Ruling.RUN_IN_BOX, Ground.TIER, None),
    ("allow tier means the box too", boxed("make", Tier.ALLOW), Ruling.RUN_IN_BOX, Ground.TIER,
     None),
    ("prompt tier asks, box or not", boxed("make"), Ruling.ASK, Ground.TIER, None),
    ("box tier, no box: asks", boxed("make", Tier.BOX, box_available=False), Ruling.ASK,
     Ground.NO_BOX, None),
    ("allow tier, no box: asks", boxed("make", Tier.ALLOW, box_available=False), Ruling.ASK,
     Ground.NO_BOX, None),
    ("a grant runs in the box", boxed("make", granted=True), Ruling.RUN_IN_BOX, Ground.GRANT,
     None),
    ("a grant, no box: asks", boxed("make", granted=True, box_available=False), Ruling.ASK,
     Ground.NO_BOX, None),
    ("the boxed call's folder still asks", boxed("make", Tier.BOX, escalation=OUTSIDE),
     Ruling.ASK, Ground.ESCALATION, None),
    ("box: false asks", boxed("make", Tier.BOX, extra={"box": False}), Ruling.ASK,
     Ground.OUTSIDE_BOX, None),
    ("box: false beats an allow rule", boxed("git status", extra={"box": False}), Ruling.ASK,
     Ground.OUTSIDE_BOX, None),
    ("allow rule runs in the box", boxed("git status"), Ruling.RUN_IN_BOX, Ground.RULE,
     "bash(git status)"),
    ("allow rule, no box: asks", boxed("git status", box_available=False), Ruling.ASK,
     Ground.NO_BOX, None),
    ("deny rule beats the box", boxed("rm x", Tier.BOX), Ruling.REFUSE, Ground.RULE,
     "bash(rm *)"),
    ("a box tier on a tool that cannot be boxed asks", req("ls", Tier.BOX, box_available=True),
     Ruling.ASK, Ground.TIER, None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "request_", "ruling", "ground", "rule"), TABLE)
def test_judge_table(name, request_, ruling, ground, rule):
    j = judge(request_)
    assert (j.ruling, j.ground, j.rule) == (ruling, ground, rule), name
    assert j.tool == request_.tool and j.tier == request_.tier


def test_deciding_rule_versus_matching_rule():
    """An allow rule that matches but loses to an always-asking path is shown (the match) but
    never recorded as the decider (the audit's ``rule``), and nothing can be proposed."""
    j = judge(req("read", real="/srv/k", escalation=SSH))
    assert j.match.decision is RuleList.ALLOW and j.match.rule == "read(/srv/**)"
    assert j.rule is None and not j.can_propose
    asked = judge(bash("git commit -m x"))
    assert asked.rule == "bash(git commit *)" and not asked.can_propose
    assert judge(req("ls")).can_propose


@pytest.mark.parametrize(
    ("request_", "decided_by", "outcome"),
    [
        (req("ls", Tier.ALLOW), DecidedBy.POLICY, None),
        (bash("git status"), DecidedBy.RULE, None),
        (req("ls", granted=True), DecidedBy.SESSION_RULE, None),
        (req("ls"), DecidedBy.USER, None),
        (bash("rm x"), DecidedBy.RULE, CallOutcome.DENIED),
        (bash("ls", paused=True), DecidedBy.POLICY, CallOutcome.PAUSED),
        (bash("ls", closing=True), DecidedBy.POLICY, CallOutcome.DENIED),
        (req("nope", None), DecidedBy.POLICY, CallOutcome.NOT_EXPOSED),
        (bash("ls", invalid="x"), DecidedBy.POLICY, CallOutcome.ERROR),
    ],
)
def test_what_the_audit_records(request_, decided_by, outcome):
    j = judge(request_)
    assert (j.decided_by, j.outcome) == (decided_by, outcome)


def test_the_judge_reads_only_its_request():
    """Pure: the same request, the same judgement (frozen, comparable, no hidden state)."""
    r = bash("git status > out", Tier.ALLOW)
    assert judge(r) == judge(replace(r))
    assert judge(replace(r, rules=parse_rules(None))).ground is Ground.TIER
    with pytest.raises(AttributeError):
        r.tier = Tier.DENY  # type: ignore[misc]


def test_every_ground_has_words():
    for g in Ground:
        j = judge(req("ls"))
        assert replace(j, ground=g).text


def test_the_tier_rule_is_written_once_and_always_a_tier():
    """Config tier, else the tool's default (a plugin may write a plain string), else the
    config's default; an unknown string asks (prompt), as it always did."""
    from omp_a2a_bridge.server.core.pipeline import tier_of
    from omp_a2a_bridge.server.infra.config import Config

    class Plugin:
        name = "shout"
        default_tier: Any = "allow"

    cfg = Config("config.json", tiers={}, default_tier=Tier.PROMPT)
    tool: Any = Plugin()
    assert tier_of(cfg)(tool) is Tier.ALLOW
    tool.default_tier = "sometimes"
    assert tier_of(cfg)(tool) is Tier.PROMPT
    tool.default_tier = None
    assert tier_of(cfg)(tool) is Tier.PROMPT
    assert tier_of(replace(cfg, tiers={"shout": Tier.DENY}))(tool) is Tier.DENY
