"""One judge: the live pipeline and ``rules test`` rule the same on the same calls.

Why: "would this run unasked?" must have one answer, whoever asks. A real bridge (port 0, a
real upstream MCP server over stdio with a stale pin, the control API) takes a table of calls
over MCP/HTTP; what happened to each (did it wait for a human, the audit's outcome,
``decided_by`` and ``rule``) is compared with the typed :class:`Judgement` that ``rules test``
gives for the same call: over the control API (:class:`ControlClient`), through the CLI's JSON,
and, for what needs no live state, offline from the saved config after the bridge stopped.
Session grants are never counted by ``rules test`` (by design), so grant rows compare the live
call with the judge on the pipeline's own inputs for that session.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

import pytest

from omp_a2a_bridge.server.control.client import ControlClient
from omp_a2a_bridge.server.core.approvals import Decision
from omp_a2a_bridge.server.policy.judge import Judgement, judge
from omp_a2a_bridge.server.present.views import judgement_from_json
from omp_a2a_bridge.server.vocab import CallOutcome, Ground, Ruling

from ..conftest import write_config
from ..support.helpers import in_thread, wait_for
from .test_upstream_servers import ready, state, stdio_spec  # noqa: F401 - the fixture "state"


@dataclass(frozen=True)
class Row:
    name: str
    tool: str
    args: dict[str, Any]
    ruling: Ruling
    ground: Ground
    grant: str | None = None  # approve a first call "for this session" to get this grant
    live_only: bool = False  # depends on live state (an upstream, a grant): not offline
    extra: dict[str, Any] = field(default_factory=dict)


def rows(root: str, outside: str) -> list[Row]:
    R, A, X, N = Ruling.RUN, Ruling.ASK, Ruling.REFUSE, Ruling.NOT_EXPOSED
    B = Ruling.RUN_IN_BOX
    G = Ground
    p = os.path.join
    return [
        Row("allow tier", "ls", {"path": root}, R, G.TIER),
        Row("allow tier read", "read", {"path": p(root, "a.txt")}, R, G.TIER),
        Row("deny rule on a path", "read", {"path": p(root, "secret.txt")}, X, G.RULE),
        Row("outside the roots asks", "read", {"path": p(outside, "other.txt")}, A, G.ESCALATION),
        Row("allow rule covers outside", "read", {"path": p(outside, "ok.txt")}, R, G.RULE),
        Row("allow rule never covers a protected path", "read",
            {"path": p(outside, "ok-id_rsa")}, A, G.ESCALATION),
        Row("ls outside asks", "ls", {"path": outside}, A, G.ESCALATION),
        Row("prompt tier", "write", {"path": p(root, "n.txt"), "content": "x"}, A, G.TIER),
        Row("allow rule on a prompt tier", "write", {"path": p(root, "ok", "w.txt"),
            "content": "x"}, R, G.RULE),
        Row("persistence on a prompt tier", "write",
            {"path": p(root, ".git", "hooks", "pre-commit"), "content": "x"}, A, G.TIER),
        Row("deny tier", "find", {"pattern": "*"}, N, G.NOT_EXPOSED),
        Row("no such tool", "nope", {}, N, G.NOT_EXPOSED),
        Row("bash allow rule: in the box", "bash", {"command": "echo hi"}, B, G.RULE),
        Row("bash deny rule", "bash", {"command": "rm -f nothing"}, X, G.RULE),
        Row("deny beats allow", "bash", {"command": "echo hi; rm -f nothing"}, X, G.RULE),
        Row("bash ask rule", "bash", {"command": "git commit -m x"}, A, G.RULE),
        Row("guard", "bash", {"command": "echo hi > out"}, A, G.GUARD),
        Row("bash prompt tier", "bash", {"command": "pwd"}, A, G.TIER),
        Row("bash grant: in the box", "bash", {"command": "pwd"}, B, G.GRANT, grant="bash"),
        Row("ask rule beats a grant", "bash", {"command": "git commit -m y"}, A, G.RULE,
            grant="bash"),
        Row("write grant", "write", {"path": p(root, "g.txt"), "content": "x"}, R, G.GRANT,
            grant="write"),
        Row("a grant never covers a protected file", "write", {"path": p(root, ".env"),
            "content": "x"}, A, G.ESCALATION, grant="write"),
        Row("a grant's scope is its folder", "write", {"path": p(outside, "g.txt"),
            "content": "x"}, A, G.TIER, grant="write"),
        Row("suspended allow tier", "mcp__t__echo", {"text": "a"}, A, G.SUSPENDED,
            live_only=True),
        Row("suspended allow rule", "mcp__t__echo", {"text": "hi"}, A, G.SUSPENDED,
            live_only=True),
        Row("upstream prompt tier", "mcp__t__fail", {}, A, G.TIER, live_only=True),
        Row("invalid: schema", "read", {"path": 3}, X, G.INVALID),
        Row("invalid: NUL in a path", "read", {"path": "a\x00b"}, X, G.INVALID),
        Row("paused: a run", "ls", {"path": root}, X, G.PAUSED, extra={"paused": True}),
        Row("paused: a deny rule", "bash", {"command": "rm x"}, X, G.PAUSED,
            extra={"paused": True}),
        Row("paused: not exposed", "nope", {}, X, G.PAUSED, extra={"paused": True}),
    ]  # fmt: skip


@pytest.fixture
def judged_bridge(start_bridge, state, env, tmp_path):  # noqa: F811 - the fixture above
    root = env["root"]
    outside = str(tmp_path / "outside")
    os.makedirs(outside)
    for rel in ("a.txt", "secret.txt", "ok/.keep"):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write("x\n")
    # A pin that does not match the upstream's echo: "changed since it was approved".
    write_config(os.path.join(os.path.dirname(env["config"]), "upstream-pins.json"),
                 {"tools": {"mcp__t__echo": "stale"}})  # fmt: skip
    tiers = {"ls": "allow", "read": "allow", "find": "deny", "mcp__t__echo": "allow"}
    tiers["bash"] = "prompt"  # its default is the box; rows here show rules and grants over it
    config = {
        "mcp_servers": {"t": stdio_spec(state)},
        "approval": {"tiers": tiers, "default_tier": "prompt", "timeout_s": 30},
        "sensitive_paths": [os.path.join(outside, "ok-id_rsa")],
        "rules": {
            "allow": [
                "bash(echo *)",
                f"read({outside}/ok*)",
                f"write({root}/ok/**)",
                "mcp__t__echo(text=hi)",
            ],
            "ask": ["bash(git commit *)"],
            "deny": ["bash(rm *)", "read(**/secret*)"],
        },
    }
    running = start_bridge(config, control=True)
    ready(running)
    running.runner.attach_approver("test")
    return running, rows(root, outside)


def live(running, client, row: Row) -> dict[str, Any]:
    """Make the call over MCP; a call that waits for a human is denied. What happened."""
    before = {p.id for p in running.runner.snapshot().pending}
    t, out = in_thread(client.call, row.tool, row.args)

    def settled():
        new = [p for p in running.runner.snapshot().pending if p.id not in before]
        return new or not t.is_alive()

    waited = wait_for(settled, 60)
    asked = isinstance(waited, list)
    escalation = waited[0].escalation if asked else None
    if asked:
        running.runner.decide(waited[0].id, Decision.DENY)
    t.join(60)
    assert out, row.name
    done = [r for r in running.audit() if r["phase"] == "done" and r["tool"] == row.tool]
    return {"asked": asked, "escalation": escalation, "done": done[-1]}


def agrees(seen: dict[str, Any], j: Judgement, row: Row) -> None:
    """What the live call did is what the judgement says."""
    assert seen["asked"] == (j.ruling is Ruling.ASK), (row.name, j)
    done = seen["done"]
    if seen["asked"]:
        assert seen["escalation"] == j.escalation, row.name
        assert done["outcome"] == CallOutcome.DENIED and done["decided_by"] == "user"
        return
    assert done["decided_by"] == j.decided_by, (row.name, done, j)
    assert done.get("rule") == j.rule, (row.name, done, j)
    if j.outcome is not None:
        assert done["outcome"] == j.outcome, (row.name, done, j)
    else:
        assert done["outcome"] in (CallOutcome.OK, CallOutcome.ERROR), (row.name, done)


def grant(running, client, tool: str, args: dict[str, Any]) -> None:
    t, _ = in_thread(client.call, tool, args)
    (p,) = running.pending()
    running.runner.decide(p.id, Decision.ALLOW_SESSION)
    t.join(60)


def test_the_live_pipeline_and_rules_test_judge_alike(judged_bridge, cli):
    running, table = judged_bridge
    bridge = running.runner.bridge
    control = ControlClient.connect()
    client = running.client()
    granted: set[str] = set()
    by_row: dict[str, Judgement] = {}
    for row in table:
        if row.grant and row.grant not in granted:
            first = {"command": "pwd"} if row.grant == "bash" else {
                "path": os.path.join(running.env["root"], "first.txt"), "content": "x"}  # fmt: skip
            grant(running, client, row.grant, first)
            granted.add(row.grant)
        running.runner.pause(bool(row.extra.get("paused")))
        tested = control.test_rule(row.tool, row.args)  # over the control API, typed
        printed = cli("rules", "test", "--json", "--tool", row.tool, json.dumps(row.args))
        assert printed.returncode == 0, printed.stderr
        assert judgement_from_json(json.loads(printed.stdout)) == tested, row.name
        if row.grant:
            # rules test counts no grant; the pipeline counts this session's.
            assert tested.ground is not Ground.GRANT
            sessions = list(bridge.sessions.all())
            allowed = next(s.grants for s in sessions if s.sid == client.sid)
            prepare = functools.partial(bridge.pipeline.prepare, row.tool, row.args, allowed)
            prepared = running.runner.call(prepare)
            tested = judge(prepared.request)
        assert (tested.ruling, tested.ground) == (row.ruling, row.ground), (row.name, tested)
        agrees(live(running, client, row), tested, row)
        by_row[row.name] = tested
    running.runner.pause(False)

    # Offline (no bridge): the same judgement from the saved config, for what needs no live
    # state (no upstream connected, no session, not paused).
    running.runner.stop()
    for row in table:
        if row.live_only or row.grant or row.extra:
            continue
        printed = cli("rules", "test", "--json", "--tool", row.tool, json.dumps(row.args))
        offline = json.loads(printed.stdout)
        assert "not running" in offline.pop("note")
        assert judgement_from_json(offline) == by_row[row.name], row.name


def test_a_refused_call_never_reaches_the_tool(judged_bridge):
    """A deny judgement is final: the command never ran (no file appeared)."""
    running, _ = judged_bridge
    target = os.path.join(running.env["root"], "made")
    r = running.client().call("bash", {"command": f"rm -f x; touch {target}"})
    assert r.result["isError"] and "denied by rule bash(rm *)" in r.text
    assert not os.path.exists(target)
