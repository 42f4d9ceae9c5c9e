"""Who lets a bash call run, and where: the box tier, rules, grants and "Run outside the box".

Nothing runs outside the box unasked (not by rule, grant or tier); ``"box": false`` always asks
a human; deny and ask rules still apply to boxed calls; where there is no box, bash asks and
says why. A real bridge over real HTTP, real bubblewrap.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.box import probe
from omp_a2a_bridge.server.box.plan import BoxStatus, Mechanism
from omp_a2a_bridge.server.core.approvals import Decision

from ..support.boxworld import require_bwrap
from ..support.helpers import err, in_thread, ok, read_text


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_bwrap()


@pytest.fixture
def approver(start_bridge):
    handles = []

    def attach(running):
        handles.append((running, running.runner.attach_approver("pytest")))

    yield attach
    for running, handle in handles:
        running.runner.detach_approver(handle)


def _outside(tmp_path) -> str:
    """A file outside the project (the root), under /tmp: a box writes its own /tmp only."""
    return str(tmp_path / "outside.txt")


def _done(running) -> list[dict]:
    return [r for r in running.audit() if r["phase"] == "done" and r["tool"] == "bash"]


def test_default_tier_runs_in_the_box_unasked(start_bridge, tmp_path):
    running = start_bridge()
    c = running.client()
    c.call("bash", {"command": f"echo x > {_outside(tmp_path)}"})  # into the box's own /tmp
    assert not os.path.exists(_outside(tmp_path))
    assert ok(c.call("bash", {"command": "echo in-project > f.txt; cat f.txt"})) == "in-project"
    assert [(r["decided_by"], r["box"]) for r in _done(running)] == [("policy", "in")] * 2


def test_a_protected_path_in_the_text_does_not_ask_in_the_box(start_bridge):
    running = start_bridge()
    text = ok(running.client().call("bash", {"command": "cat ~/.ssh/id_rsa 2>&1; echo done"}))
    assert text.endswith("done")
    assert _done(running)[0]["decided_by"] == "policy"


@pytest.mark.parametrize("config", [{}, {"rules": {"allow": ["bash(*)"]}}])
def test_box_false_always_asks_and_runs_outside_when_approved(
    start_bridge, approver, tmp_path, config
):
    running = start_bridge(config)
    approver(running)
    args = {"command": f"echo out > {_outside(tmp_path)}", "box": False, "reason": "a test"}
    t, out = in_thread(running.client().call, "bash", args)
    [p] = running.pending()
    assert p.arguments["reason"] == "a test"
    assert running.runner.decide(p.id, Decision.APPROVE)
    t.join(60)
    ok(out[0])
    assert read_text(_outside(tmp_path)) == "out\n"
    assert (_done(running)[0]["decided_by"], _done(running)[0]["box"]) == ("user", "outside")


def test_box_false_without_an_approver_says_why(start_bridge):
    running = start_bridge()
    text = err(running.client().call("bash", {"command": "true", "box": False, "reason": "net"}))
    assert "outside the box" in text and "net" in text


def test_run_outside_the_box_on_a_boxed_call(start_bridge, approver, tmp_path):
    running = start_bridge({"approval": {"tiers": {"bash": "prompt"}}})
    approver(running)
    for decision, written in ((Decision.APPROVE, False), (Decision.RUN_OUTSIDE_BOX, True)):
        args = {"command": f"echo out > {_outside(tmp_path)}"}
        t, out = in_thread(running.client().call, "bash", args)
        [p] = running.pending()
        running.runner.decide(p.id, decision)
        t.join(60)
        assert os.path.exists(_outside(tmp_path)) is written, out[0]


def test_deny_and_ask_rules_still_apply_in_the_box(start_bridge):
    rules = {"deny": ["bash(rm *)"], "ask": ["bash(git push *)"]}
    running = start_bridge({"rules": rules})
    c = running.client()
    assert "denied by rule" in err(c.call("bash", {"command": "rm -rf x"}))
    assert "approval" in err(c.call("bash", {"command": "git push origin"}))
    assert ok(c.call("bash", {"command": "echo fine"})) == "fine"


@pytest.fixture
def no_box() -> Iterator[None]:
    """This machine without a box (bubblewrap missing: an OS edge, so set at the probe)."""
    saved = probe._result  # noqa: SLF001
    probe._result = (BoxStatus(False, Mechanism.NONE, "bubblewrap is missing"), None)  # noqa: SLF001
    yield
    probe._result = saved  # noqa: SLF001


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"approval": {"tiers": {"bash": "allow"}}},
        {"rules": {"allow": ["bash(*)"]}},
    ],
)
def test_without_a_box_every_bash_call_asks_and_says_why(start_bridge, no_box, config):
    running = start_bridge(config)
    text = err(running.client().call("bash", {"command": "echo hi"}))
    assert "no approver" in text and "bubblewrap is missing" in text


def test_without_a_box_an_approved_call_runs(start_bridge, approver, no_box):
    running = start_bridge()
    approver(running)
    t, out = in_thread(running.client().call, "bash", {"command": "echo hi"})
    [p] = running.pending()
    running.runner.decide(p.id, Decision.APPROVE)
    t.join(60)
    assert ok(out[0]) == "hi"


def test_a_session_grant_runs_in_the_box(start_bridge, approver, tmp_path):
    running = start_bridge({"approval": {"tiers": {"bash": "prompt"}}})
    approver(running)
    c = running.client()
    t, out = in_thread(c.call, "bash", {"command": "touch inside.txt && echo one"})
    [p] = running.pending()
    assert p.grant is not None  # "Allow `touch …` + `echo …` for this session" is offered
    running.runner.decide(p.id, Decision.ALLOW_SESSION)
    t.join(60)
    assert ok(out[0]) == "one"
    # The grant covers `touch …` (scoped, server/policy/grants.py), unasked, and in the box.
    c.call("bash", {"command": f"touch {_outside(tmp_path)}"})
    assert not os.path.exists(_outside(tmp_path))


def test_box_network_on_gives_the_network_back(start_bridge):
    """``box.network: "on"``: here only loopback exists, so the bridge's own port answers."""
    running = start_bridge({"box": {"network": "on"}})
    port = running.port
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port})); print('CONNECTED')"
    command = f'python3 -c "{connect}"'
    assert ok(running.client().call("bash", {"command": command})) == "CONNECTED"


def test_a_project_with_too_many_secrets_to_hide_is_refused_not_leaked(start_bridge):
    running = start_bridge()
    root = running.env["root"]
    for i in range(300):
        with open(os.path.join(root, f"k{i}.pem"), "w") as f:
            f.write("SECRET-PEM\n")
    text = err(running.client().call("bash", {"command": "cat *.pem"}))
    assert "SECRET-PEM" not in text and '"box": false' in text, text
