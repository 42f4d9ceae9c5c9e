"""Rule values are typed: an allow rule matches what the human read, and only that type.

``recursive=false`` saved from a prompt must not also allow the string ``"false"`` (truthy in
Python and JavaScript upstreams), ``id=7`` not ``"7"``, ``x=null`` not ``"null"``. A deny or
ask rule matches the other way round: more, never less, so another JSON type never slips a
denied value past it.
"""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.policy.proposals import propose
from omp_a2a_bridge.server.policy.rules import (
    RuleError,
    RuleList,
    ValueKind,
    evaluate,
    parse_rule,
    parse_rules,
)

T = "mcp__up__t"


def allows(rule: str, args: dict) -> bool:
    return evaluate(parse_rules({"allow": [rule]}), T, args, None).decision is RuleList.ALLOW


def denies(rule: str, args: dict) -> bool:
    return evaluate(parse_rules({"deny": [rule]}), T, args, None).decision is RuleList.DENY


def asks(rule: str, args: dict) -> bool:
    return evaluate(parse_rules({"ask": [rule]}), T, args, None).decision is RuleList.ASK


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ('"false"', ValueKind.TEXT),
        ("false", ValueKind.LITERAL),
        ("null", ValueKind.LITERAL),
        ("-1.5e3", ValueKind.LITERAL),
        ("0", ValueKind.LITERAL),
        ("acme/*", ValueKind.WORD),
        ("False", ValueKind.WORD),  # not a JSON literal: a word, as it always was
        ("01", ValueKind.WORD),  # not a JSON number
        ("+1", ValueKind.WORD),
        ("NaN", ValueKind.WORD),
        ("7*", ValueKind.WORD),
        ("", ValueKind.WORD),
    ],
)
def test_a_value_is_typed_by_how_it_is_written(value, kind):
    (arg,) = parse_rule(f"{T}(x={value})").args
    assert arg.kind is kind


@pytest.mark.parametrize(
    ("rule_value", "matching", "not_matching"),
    [
        ("false", [False], ["false", "False", 0, None, True, [False]]),
        ("true", [True], ["true", 1, "1", "yes"]),
        ("null", [None], ["null", "", 0, False, "None"]),
        ("7", [7, 7.0], ["7", "7.0", True, 8, [7]]),
        ("0", [0, -0.0, 0.0], ["0", False, None]),
        ("1.5", [1.5], ["1.5", 1]),
        ("1e2", [100, 100.0], ["1e2", "100"]),
        ('"false"', ["false"], [False, "False"]),
        ('"7"', ["7"], [7, 7.0]),
        ('"a*"', ["a", "abc"], ["b"]),
        ("acme/*", ["acme/x"], ["evil/x", 1]),
        ("*", ["", "anything"], [7, False, None, {"a": 1}, ["a"]]),  # a glob is about strings
        ("7*", ["7", "70x"], [7, 70, 7.5]),
        ("False", ["False"], [False]),
    ],
)
def test_an_allow_rule_matches_only_the_type_it_names(rule_value, matching, not_matching):
    rule = f"{T}(x={rule_value}, nothing else)"
    for v in matching:
        assert allows(rule, {"x": v}), (rule, v)
    for v in not_matching:
        assert not allows(rule, {"x": v}), (rule, v)


def test_the_reported_bypass_is_closed():
    rule = "mcp__up__t(id=7, recursive=false, nothing else)"
    assert allows(rule, {"id": 7, "recursive": False})
    assert not allows(rule, {"id": "7", "recursive": "false"})
    assert not allows(rule, {"id": 7, "recursive": "false"})
    assert not allows(rule, {"id": "7", "recursive": False})


@pytest.mark.parametrize(
    ("rule_value", "matching", "not_matching"),
    [
        (
            "true",
            [True, "true", "TRUE", " True ", [True], {"v": "true"}, [[True]]],
            [False, "false", 1, "yes", None, [], {}],
        ),
        ("false", [False, "false", "False", [False]], [True, 0, "", None]),
        ("null", [None, "null", "NULL", [None]], ["", False, 0]),
        (
            "7",
            [7, 7.0, "7", "7.0", " 7", "7e0", "07", "+7", "7.", ["7"], {"a": [7]}, "0x7", "７"],
            [8, "seven", "0x8", True, "1e400"],
        ),
        ("0.5", [0.5, ".5", "5e-1"], ["5", 5]),
        ('"7"', ["7", 7], ["8", 7.0]),  # 7.0 writes as "7.0" in JSON: not the glob "7"
        ('"rm*"', ["rm -rf", ["rm -rf /"], {"c": "rm x"}], ["ls", ["ls"]]),
        ("*", ["x", 7, False, None, ["a"], {"a": 1}, [], {}], []),
        ("7*", ["70", 70, 7.5, [75]], [8, "x7"]),
    ],
)
def test_a_deny_or_ask_rule_matches_every_type_that_could_mean_it(
    rule_value, matching, not_matching
):
    rule = f"{T}(x={rule_value})"
    for v in matching:
        assert denies(rule, {"x": v}), (rule, v)
        assert asks(rule, {"x": v}), (rule, v)
    for v in not_matching:
        assert not denies(rule, {"x": v}), (rule, v)
        assert not asks(rule, {"x": v}), (rule, v)


def test_nothing_else_narrows_allow_rules_only():
    rule = f"{T}(force=true, nothing else)"
    assert allows(rule, {"force": True})
    assert not allows(rule, {"force": True, "extra": 1})
    # A deny rule is not escaped by adding an argument the upstream may ignore.
    assert denies(rule, {"force": True, "extra": 1})
    assert denies(rule, {"force": "true", "extra": 1})


def test_a_deny_rule_still_wins_over_an_allow_rule_for_every_type():
    rules = parse_rules({"deny": [f"{T}(force=true)"], "allow": [f"{T}(force=*)"]})
    for v in (True, "true", "True", [True]):
        assert evaluate(rules, T, {"force": v}, None).decision is RuleList.DENY, v
    assert evaluate(rules, T, {"force": "no"}, None).decision is RuleList.ALLOW
    assert evaluate(rules, T, {"force": False}, None).decision is None  # no rule: the tier


def test_deeply_nested_values_do_not_crash_a_deny_rule():
    deep: object = "rm"
    for _ in range(5000):
        deep = [deep]
    assert denies(f'{T}(c="rm")', {"c": deep})
    assert not allows(f'{T}(c="rm")', {"c": deep})
    deep = {"k": "ls"}
    for _ in range(100_000):
        deep = [deep]
    assert denies(f'{T}(c="rm")', {"c": deep})  # too deep to print as JSON: may be it
    assert not allows(f"{T}(c=*)", {"c": deep})


def test_a_huge_argument_is_not_searched_value_by_value():
    """A deny rule searches at most 10,000 values inside one argument (matching runs on the
    event loop); past that it matches, so padding cannot hide a denied value."""
    padded = [0] * 20_000 + [True]
    assert denies(f"{T}(force=true)", {"force": padded})
    assert not denies(f"{T}(force=true)", {"force": [0] * 9_000})
    assert not allows(f"{T}(force=*)", {"force": padded})


def test_a_number_out_of_range_is_refused():
    with pytest.raises(RuleError, match="out of range"):
        parse_rule(f"{T}(x=1e400)")


@pytest.mark.parametrize(
    ("args", "rule", "sibling"),
    [
        ({"id": 7, "recursive": False}, "id=7, recursive=false", {"id": "7", "recursive": "false"}),
        ({"x": None}, "x=null", {"x": "null"}),
        ({"x": "null"}, 'x="null"', {"x": None}),
        ({"x": "7"}, 'x="7"', {"x": 7}),
        ({"x": 1.5}, "x=1.5", {"x": "1.5"}),
        ({"x": -0.0}, "x=-0.0", {"x": "-0.0"}),
        ({"x": 10**20}, "x=100000000000000000000", {"x": str(10**20)}),
    ],
)
def test_a_proposal_is_typed_like_the_call(args, rule, sibling):
    text = propose(T, args, None, home="/h")
    assert text == f"{T}({rule}, nothing else)"
    assert allows(text, args)
    assert not allows(text, sibling)
