"""server/infra/audit.py: redaction and record capping as pure functions (no log file, no
thread).
"""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.infra import audit
from omp_a2a_bridge.server.infra.audit import (
    ARGS_CAP,
    FIELD_CAP,
    RECORD_CAP,
    REDACT_OVER,
    args_text,
    cap_record,
    fit_text,
    pair_calls,
    plain_line,
    redact,
)
from omp_a2a_bridge.server.present import secrets


def sha8(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:8]


def line_bytes(line: str) -> int:
    return len((line + "\n").encode("utf-8", "replace"))


def test_redact_hashes_long_strings_at_any_depth_and_keeps_short_ones():
    long = "s" * (REDACT_OVER + 1)
    assert redact("s" * REDACT_OVER) == "s" * REDACT_OVER
    assert redact(long) == f"<len:{REDACT_OVER + 1},sha256:{sha8(long)}>"
    assert redact({"a": [1, {"b": long}], long: True}) == {
        "a": [1, {"b": redact(long)}],
        redact(long): True,  # keys too
    }
    assert redact((1, "x")) == [1, "x"] and redact(None) is None and redact(2.5) == 2.5


def test_redact_cuts_deep_nesting():
    deep: object = "leaf"
    for _ in range(audit.MAX_DEPTH + 5):
        deep = [deep]
    assert "<max-depth>" in json.dumps(redact(deep))


def test_fit_text_keeps_what_fits_and_marks_the_cut():
    assert fit_text("short", 10) == "short"
    cut = fit_text("x" * 100, 10)
    assert cut.endswith("…") and len(json.dumps(cut, ensure_ascii=False).encode()) - 2 <= 10
    # Escapes count at their encoded size: a control character is 6 bytes in a JSON line.
    ctrl = fit_text("\x01" * 10, 13)
    assert ctrl == "\x01…"


def test_args_text_redacts_content_but_keeps_bash_commands_verbatim():
    content = "c" * 500
    text = args_text({"path": "a.txt", "content": content}, "write")
    assert json.loads(text) == {"path": "a.txt", "content": redact(content)}
    command = "echo " + "y" * 300
    assert json.loads(args_text({"command": command}, "bash")) == {"command": command}


def test_a_huge_bash_command_keeps_its_head_length_and_hash_within_the_budget():
    command = "rm -rf ~/" + "z" * 50_000
    text = args_text({"command": command, "timeout": 5}, "bash")
    assert len(text.encode()) <= ARGS_CAP + 2  # the budget is JSON-line bytes
    got = json.loads(text)
    assert got["timeout"] == 5
    assert got["command"].startswith("rm -rf ~/zzz")
    assert got["command"].endswith(f"…<len:{len(command)},sha256:{sha8(command)}>")


def test_args_text_of_other_tools_is_capped():
    many = {f"k{i}": i for i in range(1000)}
    text = args_text(many, "read")
    assert len(text) == ARGS_CAP + 1 and text.endswith("…")


def test_cap_record_fast_path_is_plain_json():
    rec = {"phase": "done", "tool": "ls", "id": "c1", "args": {"path": "."}, "ms": 3}
    assert json.loads(cap_record(rec)) == {**rec, "args": '{"path":"."}'}


def test_cap_record_caps_every_client_field_and_the_whole_line():
    rec = {
        "phase": "start",
        "tool": "t" * 10_000,
        "client": "é" * 10_000,  # two bytes each in UTF-8
        "extra": {"nested": ["x" * 5000]},
        "args": {"command": "q" * 100_000},
    }
    line = cap_record(rec | {"tool": "bash"})
    assert line_bytes(line) <= RECORD_CAP
    got = json.loads(line)
    assert len(got["client"]) == FIELD_CAP and got["client"].endswith("…")
    assert len(got["extra"]) <= FIELD_CAP
    assert got["args"].startswith('{"command":"qqq')
    # A long tool name is capped too.
    assert len(json.loads(cap_record(rec))["tool"]) == FIELD_CAP


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["tool", "client", "reason", "args", "path", "n"]),
        st.one_of(
            st.text(max_size=3000),
            st.integers(),
            st.none(),
            st.lists(st.text(max_size=800), max_size=8),
            st.dictionaries(st.text(max_size=50), st.text(max_size=2000), max_size=5),
        ),
    ),
    st.sampled_from(["bash", "write", "read"]),
)
def test_every_record_fits_the_cap_and_stays_valid_json(rec, tool):
    line = cap_record({**rec, "tool": rec.get("tool", tool)})
    assert "\n" not in line
    assert line_bytes(line) <= RECORD_CAP
    json.loads(line)


SECRET = "Zq7-audit-secret-token-4f9a1c2e8b7d6a5f3e2d1c0b9a8f7e6d"
# Strings the records below are made of: pieces of the secret (whole, cut across its blocks),
# characters JSON escapes, non-ASCII, and plain text of every length around the caps.
_PARTS = st.sampled_from(
    [
        *(SECRET, SECRET[3:23], SECRET[:8], SECRET[8:16]),
        *('"', "\\", "\n", "é", "\x01", "a" * 40, "/x"),
        *("b" * (REDACT_OVER - 1), "c" * (FIELD_CAP - 1)),
    ]
)
_TEXT = st.lists(_PARTS, max_size=3).map("".join) | st.text(max_size=40)
_ARGS = st.recursive(
    _TEXT | st.integers() | st.none() | st.booleans(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=8,
)


@pytest.fixture
def a_secret():
    secrets.forget_all()
    secrets.remember(SECRET)
    yield
    secrets.forget_all()


# The fixture's secret stays the same for every example: nothing to reset between them.
@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.dictionaries(st.sampled_from(["client", "reason", "n", "ts"]), _TEXT | st.integers()),
    _ARGS,
    st.sampled_from(["bash", "write", "read", "mcp__srv__echo"]),
)
def test_the_plain_line_is_the_scrubbed_capped_line(a_secret, rec, args, tool):
    """The writer's fast path (docs/design/performance.md): whenever it answers, it is the
    line the whole way (scrub every string, then cap) writes, byte for byte."""
    full = {"id": "c1", "phase": "done", **rec, "tool": tool, "args": args}
    line = plain_line(full)
    expected = cap_record(secrets.scrub_value(full))
    if line is not None and secrets.absent_from_json(line):
        assert line == expected
    if SECRET[:16] in json.dumps(full, ensure_ascii=False):
        assert line is None or not secrets.absent_from_json(line)  # a piece: the whole way


def test_a_plain_record_takes_the_fast_path_and_a_secret_does_not(a_secret):
    rec = {"id": "c1", "phase": "done", "tool": "read", "args": {"path": "/r/a.txt"}, "ms": 3}
    line = plain_line(rec)
    assert line is not None and secrets.absent_from_json(line)
    assert line == cap_record(rec)
    leaky = plain_line(rec | {"args": {"path": f"/r/{SECRET[5:25]}"}})
    assert leaky is not None and not secrets.absent_from_json(leaky)
    for not_plain in (
        {"args": {"path": "x" * (REDACT_OVER + 1)}},  # redacted
        {"args": {"p": ["x" * 100] * 20}},  # cut at ARGS_CAP
        {"tool": "bash", "args": {"command": "ls"}},  # verbatim fields
        {"client": "c" * (FIELD_CAP + 1)},  # a capped field
        {"extra": {"not": "a scalar"}},
    ):
        assert plain_line(rec | not_plain) is None


def test_pair_calls_joins_by_id_in_order_and_keeps_hung_calls():
    records = [
        {"id": "a", "phase": "start"},
        {"id": "b", "phase": "start"},
        {"id": "a", "phase": "done", "outcome": "ok"},
        {"id": 5, "phase": "start"},  # not a call id: skipped
        {"phase": "done"},
    ]
    pairs = pair_calls(records)
    assert [p["id"] for p in pairs] == ["a", "b"]
    assert pairs[0]["done"] == {"id": "a", "phase": "done", "outcome": "ok"}
    assert pairs[1]["done"] is None


@pytest.mark.parametrize("value", [float("nan"), object()])
def test_unserializable_values_do_not_break_a_record(value):
    line = cap_record({"phase": "done", "weird": value})
    assert line_bytes(line) <= RECORD_CAP
