"""One API, two implementations: every action of ``BridgeControl`` behaves the same in process
(``BridgeRunner``, what the tray holds) and over HTTP (``ControlClient``, what the CLI and
``watch`` hold), against one real bridge. Each test runs once per implementation."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.api import (
    ApproverKind,
    BridgeApi,
    BridgeControl,
    BridgeError,
    Decision,
    RuleList,
    TokenSource,
)
from omp_a2a_bridge.server.control.client import ControlClient
from omp_a2a_bridge.server.vocab import Ground, Ruling

from ..support.helpers import in_thread, wait_for


@pytest.fixture(params=["in process", "over HTTP"])
def both(request, start_bridge):
    """``(running, api)``: the api is the runner itself, or a ControlClient to it."""
    approval = {"timeout_s": 20, "tiers": {"bash": "prompt"}}  # bash asks (default: the box)
    running = start_bridge({"approval": approval}, control=True)
    api = running.runner if request.param == "in process" else ControlClient(running.runner.control)
    return running, api


def test_each_implementation_matches_its_protocol(both):
    running, api = both
    assert isinstance(api, BridgeControl)
    assert isinstance(running.runner, BridgeApi)
    assert not isinstance(ControlClient(running.runner.control), BridgeApi)  # no snapshots


def test_decide_then_gone(both):
    running, api = both
    approver = running.runner.attach_approver("pytest")
    c = running.client()
    th, out = in_thread(c.call, "bash", {"command": "echo decided"})
    (p,) = running.pending()
    assert api.decide(p.id, Decision.APPROVE) is True
    th.join(60)
    assert out[0].text == "decided"
    assert api.decide(p.id, Decision.DENY) is False  # no longer waiting: False, not an error
    th, out = in_thread(c.call, "bash", {"command": "echo denied"})
    (p,) = running.pending()
    assert api.decide(p.id, Decision.DENY, "no", approver=ApproverKind.WATCH) is True
    th.join(60)
    assert out[0].text == "denied by the user: no"
    done = [r for r in running.audit() if r.get("phase") == "done"]
    assert done[-1]["approver"] == "terminal (watch)"
    running.runner.detach_approver(approver)


def test_an_invalid_edited_rule_is_a_bridge_error(both):
    running, api = both
    running.runner.attach_approver("pytest")
    c = running.client()
    th, out = in_thread(c.call, "bash", {"command": "git log --oneline"})
    (p,) = running.pending()
    with pytest.raises(BridgeError, match="rule not saved"):
        api.decide(p.id, Decision.ALLOW_ALWAYS, rule="read(**)")
    assert running.runner.snapshot().pending  # still waiting
    assert api.decide(p.id, "deny", "not now") is True
    th.join(60)
    assert out[0].text == "denied by the user: not now"


def test_pause_sessions_grants_servers(both):
    running, api = both
    api.pause(True)
    assert running.runner.snapshot().paused is True
    api.pause(False)
    assert running.runner.snapshot().paused is False
    c = running.client()
    assert api.end_session("no-such-session") is False
    assert api.end_session(c.sid) is True
    wait_for(lambda: not running.runner.snapshot().sessions)
    assert api.revoke_grant(c.sid, "bash") is False
    assert api.restart_server("nothing") is False


def test_rules_add_remove_and_test(both):
    running, api = both
    api.add_rules(RuleList.ALLOW, ["bash(git status)", "bash(git diff *)"])
    assert [r.text for r in running.runner.rules().get(RuleList.ALLOW)] == [
        "bash(git status)",
        "bash(git diff *)",
    ]
    verdict = api.test_rule("bash", {"command": "git status"})
    assert (verdict.ruling, verdict.ground, verdict.match.index) == (
        Ruling.RUN_IN_BOX,
        Ground.RULE,
        0,
    )
    # The same typed judgement in process and over HTTP (the JSON view round-trips).
    assert verdict == running.runner.test_rule("bash", {"command": "git status"})
    api.remove_rule(RuleList.ALLOW, "0")  # by index
    api.remove_rule(RuleList.ALLOW, "bash(git diff *)")  # by text
    assert running.runner.rules().get(RuleList.ALLOW) == ()
    with pytest.raises(BridgeError, match="has no entry 3"):
        api.remove_rule(RuleList.ALLOW, "3")
    with pytest.raises(BridgeError):
        api.add_rules(RuleList.DENY, ["bash(unclosed"])


def test_client_config_audit_and_login(both):
    running, api = both
    assert api.client_config() == running.runner.client_config()
    assert running.runner.token in str(api.client_config())
    running.client().call("ls", {})
    wait_for(lambda: api.audit_tail(5))
    calls = api.audit_tail(5)
    assert calls[-1]["tool"] == "ls" and calls[-1]["pending"] is False
    assert api.login_url().startswith(running.runner.control.url + "login?code=")


def test_rotate_token_says_where_it_is_stored(keyring_token, both):
    running, api = both
    old = running.runner.token
    assert api.rotate_token() is TokenSource.KEYRING
    assert running.runner.token != old
    assert keyring_token.store[("omp-a2a-bridge", "token")] == running.runner.token


def test_a_token_from_the_environment_is_not_rotated(both):
    _, api = both
    with pytest.raises(BridgeError, match="A2A_BRIDGE_TOKEN"):
        api.rotate_token()


def test_the_log_tail(both, env):
    _, api = both
    os.makedirs(os.path.dirname(env["log"]), exist_ok=True)
    with open(env["log"], "w", encoding="utf-8") as f:
        f.write("one\ntwo \x1b[2J\n")
    assert api.log_tail(5) == {"path": env["log"], "lines": ["one", "two \\x1b[2J"]}


def test_decide_batch_decides_the_named_calls_of_one_kind(both, tmp_path):
    """*Approve all N* through the typed API: the same answer in process and over HTTP."""
    running, api = both
    approver = running.runner.attach_approver("pytest")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for i in range(3):
        (outside / f"{i}.txt").write_text(f"n{i}")
    calls = [
        in_thread(running.client().call, "read", {"path": f"{outside}/{i}.txt"}) for i in range(3)
    ]
    pending = running.pending(3)
    named = [p.id for p in pending[:2]]
    out = api.decide_batch([*named, "a999"], Decision.DENY, "not now", approver=ApproverKind.WATCH)
    assert sorted(out.decided) == sorted(named) and out.gone == ("a999",)
    wait_for(lambda: [p.id for p in running.runner.snapshot().pending] == [pending[2].id])
    with pytest.raises(BridgeError, match="approve or deny"):
        api.decide_batch([pending[2].id], Decision.ALLOW_ALWAYS)
    assert api.decide_batch([pending[2].id], Decision.APPROVE).decided == (pending[2].id,)
    for t, _ in calls:
        t.join(60)
    texts = sorted(out[0].text for _, out in calls)
    assert texts[0].startswith("    1\tn") and texts[1:] == ["denied by the user: not now"] * 2
    running.runner.detach_approver(approver)
