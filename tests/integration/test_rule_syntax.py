"""Rule syntax as Claude Code users write it (issue 23 item 5): a ``*`` glued to the end of the
last word matches the rest of the command, for deny, ask and allow alike; ``rules add`` prints
two commands a rule matches and one it does not before saving it."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.policy.examples import examples
from omp_a2a_bridge.server.policy.rules import RuleList, evaluate, parse_rule, parse_rules


@pytest.mark.parametrize("which", ["deny", "ask", "allow"])
def test_a_glued_star_matches_the_rest_of_the_command(which):
    rules = parse_rules({which: ["bash(echo forbidden*)"]})

    def decided(command):
        return evaluate(rules, "bash", {"command": command}, None).decision

    for command in ("echo forbidden now", "echo forbidden", "echo forbiddenly a b c"):
        assert decided(command) is RuleList(which), command
    assert decided("echo allowed now") is None
    assert decided("echo now forbidden") is None
    # The proposal's literal star (``[*]``) stays one literal word: no rest-of-command.
    literal = parse_rules({"allow": ["bash(echo a[*])"]})
    assert evaluate(literal, "bash", {"command": "echo 'a*'"}, None).decision is RuleList.ALLOW
    assert evaluate(literal, "bash", {"command": "echo 'a*' x"}, None).decision is None


def test_a_deny_rule_with_a_glued_star_refuses_over_http(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"bash": "allow"}}, "rules": {"deny": ["bash(echo forbidden*)"]}}
    )
    c = running.client()
    r = c.call("bash", {"command": "echo forbidden now"})
    assert r.result["isError"] and "denied by rule bash(echo forbidden*)" in r.text
    assert c.call("bash", {"command": "echo fine now"}).text.strip() == "fine now"


@pytest.mark.parametrize(
    ("rule", "which"),
    [
        ("bash(echo forbidden*)", "deny"),
        ("bash(git diff *)", "allow"),
        ("bash(git status)", "allow"),
        ("read(~/proj/**)", "allow"),
        ("write(**/*.lock)", "ask"),
        ("mcp__gh__get(repo=acme/*, n=3)", "allow"),
    ],
)
def test_examples_are_true(rule, which):
    """Two examples that the rule matches and one it does not, each checked by evaluate."""
    parsed = parse_rule(rule, home="/home/u", allow=which == "allow")
    ex = examples(parsed, RuleList(which), home="/home/u")
    assert len(ex.matches) == 2 and len(ex.misses) == 1, ex


def test_rules_add_prints_its_examples_before_saving(start_bridge, cli):
    running = start_bridge(control=True)
    r = cli("rules", "add", "--deny", "bash(echo forbidden*)")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == [
        "  matches:         echo forbidden",
        "  matches:         echo forbidden now",
        "  does not match:  echo other",
    ]
    assert lines[3] == "added to rules.deny: bash(echo forbidden*)"
    assert [x.text for x in running.runner.snapshot().rules.deny] == ["bash(echo forbidden*)"]


def test_the_page_asks_the_api_for_examples_before_saving(start_bridge):
    from ..support.control_client import Api

    running = start_bridge(control=True)
    api = Api(running.runner.control)
    r = api.call("POST", "/api/rules/examples", {"list": "deny", "rule": "bash(echo forbidden*)"})
    assert r.status == 200, r.json
    assert r.json["matches"] == ["echo forbidden", "echo forbidden now"]
    assert r.json["misses"] == ["echo other"]
    bad = api.call("POST", "/api/rules/examples", {"list": "allow", "rule": "bash(a; b)"})
    assert bad.status == 400 and "one simple command" in bad.json["error"]
    assert running.runner.snapshot().rules.deny == ()  # nothing saved
