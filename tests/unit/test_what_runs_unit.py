"""Pure logic behind "what the human sees is what runs" for upstream calls and saved rules."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.policy.proposals import propose, savable
from omp_a2a_bridge.server.present.preview import build_preview, call_hidden, summary_of
from omp_a2a_bridge.server.present.textsafe import hidden_in
from omp_a2a_bridge.server.types import PendingCall, UpstreamInfo


def test_hidden_in_looks_everywhere_and_survives_deep_nesting():
    assert not hidden_in({"sql": "SELECT 1\n\tFROM t", "n": [1, 2, {"a": None}]})
    assert hidden_in({"a": [{"b": "x\u202ey"}]})
    assert hidden_in({"a\u200b": 1})
    assert not hidden_in({"a\nb": 1})  # shown as \n, like everywhere (textsafe's rule)
    deep: object = "\u202e"
    for _ in range(5000):
        deep = [deep]
    assert hidden_in(deep)  # no RecursionError


def test_summary_never_drops_an_argument_silently():
    args = {f"k{i}": "v" * 40 for i in range(10)}
    s = summary_of("mcp__x__t", args)
    assert s.text.startswith('mcp__x__t: k0="' + "v" * 40 + '"')
    shown = s.text.count("=")
    assert s.text.endswith(f"… +{10 - shown} more arguments") and s.truncated
    assert summary_of("mcp__x__t", {}).text == "mcp__x__t: (no arguments)"
    long = summary_of("mcp__x__t", {"a": "x" * 500}).text
    assert "(502 chars)" in long
    # The built-in tools keep their summaries.
    assert summary_of("bash", {"command": "ls"}).text == "bash: ls"
    assert "arguments" not in build_preview("write", {"path": "a", "content": "x"})


def _pending(**kw) -> PendingCall:
    base = dict(id="a1", sid="s", client="c", tool="mcp__x__t", arguments={}, summary="", arrived=0)
    return PendingCall(**{**base, **kw})


@pytest.mark.parametrize(
    "kw",
    [
        {"client": "claude\u202e"},
        {"client": "zero\u200bwidth"},
        {"upstream": UpstreamInfo("x", "t", "desc\u200b", {}, False)},
        {"upstream": UpstreamInfo("x", "t", "d", {"title": "a\u202eb"}, False)},
        {"hidden": True},
    ],
)
def test_call_hidden_is_the_one_answer(kw):
    assert call_hidden(_pending()) is False
    assert call_hidden(_pending(**kw)) is True


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"b": True, "f": 1.5, "n": None}, "mcp__x__t(b=true, f=1.5, n=null, nothing else)"),
        ({"q": "a, b"}, 'mcp__x__t(q="a, b", nothing else)'),
        ({"q": "line\nnext"}, 'mcp__x__t(q="line\\nnext", nothing else)'),
        ({"q": "x" * 2000}, None),  # longer than a rule may be
        ({"q": float("inf")}, None),
        ({"q": {"a": 1}}, None),
        ({"q": "caf\u00e9"}, 'mcp__x__t(q="caf\u00e9", nothing else)'),
        ({"q": "a\u202eb"}, None),
        ({"q": "a\x1bb"}, None),  # JSON writes \u001b; the value still holds ESC
    ],
)
def test_upstream_proposals_are_exact_or_absent(args, expected):
    assert propose("mcp__x__t", args, None, home="/h") == expected


def test_savable_is_the_one_check():
    assert savable("bash(git log *)") is None
    assert savable('mcp__x__t(q="a\\u202eb")') is not None  # escaped in the text, real in value
    assert savable("bash(python3 a\u202e.py *)") is not None
    assert savable("bash(a && b)") is not None  # invalid
    assert savable("x(" + "a=1, " * 300 + "b=2)") is not None  # too long
