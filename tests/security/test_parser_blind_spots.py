"""Parser blind spots (issue 23 item 6): code bash runs that the simple-command walk did not
see. Each case ran under an allow rule for its harmless-looking program; now none matches an
allow rule (it asks), and a deny rule sees the command hidden inside it."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.policy.rules import RuleList, evaluate, parse_rules

from ..support.helpers import in_thread

ALLOW = [
    "bash(cat *)", "bash(printf *)", "bash(test *)", "bash(read *)", "bash(getopts *)",
    "bash(dbus-launch *)", "bash(echo *)", "bash(wait *)", "bash(uv run *)",
]  # fmt: skip

HIDDEN = [
    "cat <<EOF\n`rm -rf x`\nEOF",
    "cat <<EOF\nhello $(rm -rf x)\nEOF",
    "cat <<-EOF\n\t`rm -rf x`\n\tEOF",
    "printf -v 'a[$(rm -rf x)]' %s 1",
    "printf -v'a[`rm -rf x`]' %s 1",
    "test -v 'a[$(rm -rf x)]'",
    "[ -v 'a[$(rm -rf x)]' ]",
    "[[ -v 'a[$(rm -rf x)]' ]]",
    "read 'a[$(rm -rf x)]' </dev/null",
    "getopts ab 'a[$(rm -rf x)]'",
    "let 'a[$(rm -rf x)]=1'",
    "declare 'a[$(rm -rf x)]=1'",
    "(( 'a[$(rm -rf x)]' ))",
    "compgen -C 'rm -rf x' a",
    "compgen -W '$(rm -rf x)' a",
    "dbus-launch rm -rf x",
    "dbus-launch --exit-with-session rm -rf x",
    "uv run rm -rf x",
]


@pytest.mark.parametrize("command", HIDDEN)
def test_hidden_code_never_matches_an_allow_rule_and_a_deny_rule_sees_it(command):
    allow = parse_rules({"allow": [*ALLOW, "bash(rm *)"]})
    v = evaluate(allow, "bash", {"command": command}, None)
    hidden_rm = "rm" not in command.split()[0]
    if hidden_rm and not command.startswith(("dbus-launch", "uv run")):
        assert v.decision is not RuleList.ALLOW, (command, v)
        assert v.unsafe, command  # the reason every UI shows
    deny = parse_rules({"deny": ["bash(rm *)"], "allow": ALLOW})
    v = evaluate(deny, "bash", {"command": command}, None)
    assert v.decision is RuleList.DENY, (command, v)


def test_a_quoted_here_doc_is_literal_text_and_still_allowed():
    rules = parse_rules({"allow": ["bash(cat *)"]})
    for command in (
        "cat <<'EOF'\n`rm -rf x`\nEOF",
        'cat <<"EOF"\n$(rm x)\nEOF',
        "cat <<EOF\nhi\nEOF",
    ):
        assert evaluate(rules, "bash", {"command": command}, None).decision is RuleList.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "cat <<EOF\n`touch PWNED`\nEOF",
        "printf -v 'a[$(touch PWNED)]' %s 1",
        "test -v 'a[$(touch PWNED)]'",
        "read 'a[$(touch PWNED)]' </dev/null",
    ],
)
def test_over_http_an_allow_rule_does_not_run_them(start_bridge, env, command):
    """bash is prompt-tier and the rules allow cat/printf/test/read: each call waits for a
    human (denied here), and the payload never ran."""
    # bash at prompt: its default tier, the box, would run these unasked (in the box)
    approval = {"timeout_s": 20, "tiers": {"bash": "prompt"}}
    running = start_bridge({"rules": {"allow": ALLOW}, "approval": approval})
    handle = running.runner.attach_approver("pytest")
    try:
        c = running.client()
        t, out = in_thread(c.call, "bash", {"command": command, "cwd": env["root"]})
        [p] = running.pending()
        assert p.proposed_rule is None and p.grant_label is None
        assert running.runner.decide(p.id, "deny")
        t.join(60)
        assert "denied by the user" in out[0].text
    finally:
        running.runner.detach_approver(handle)
    assert not os.path.exists(os.path.join(env["root"], "PWNED"))
    # And the same payload really runs in bash once a human approves it: the test can fail.
    handle = running.runner.attach_approver("pytest")
    try:
        t, out = in_thread(c.call, "bash", {"command": command, "cwd": env["root"]})
        [p] = running.pending()
        assert running.runner.decide(p.id, "approve")
        t.join(60)
    finally:
        running.runner.detach_approver(handle)
    assert os.path.exists(os.path.join(env["root"], "PWNED")), out[0].text
