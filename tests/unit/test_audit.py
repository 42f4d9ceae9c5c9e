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


# -- counting cheap refusals (audit.RefusalCounter, on the writer thread) --------------------


def _call(i, outcome="no_approver", decided_by="policy", machine="m", tool="read", is_error=True):
    start = {"ts": f"t{i}", "id": f"c{i}", "sid": f"s{i % 3}", "machine": machine, "tool": tool}
    start["phase"] = "start"
    done = dict(start, phase="done", outcome=outcome, decided_by=decided_by, isError=is_error)
    return [start, done]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_refusals_past_the_window_budget_are_counted_into_one_record():
    clock = Clock()
    folder = audit.RefusalCounter(clock)
    batch = [r for i in range(audit.FULL_PER_WINDOW + 10) for r in _call(i)]
    kept = folder.fold(batch)
    assert len(kept) == 2 * audit.FULL_PER_WINDOW  # every start with its done, in full
    assert folder.next_due() == audit.WINDOW_S
    assert folder.fold([]) == []  # the window is still open
    clock.now += audit.WINDOW_S
    assert folder.next_due() == 0
    [rep] = folder.fold([])
    assert rep["phase"] == "repeated" and rep["count"] == 10 and rep["sessions"] == 3
    assert (rep["first"], rep["last"]) == (f"t{audit.FULL_PER_WINDOW}", f"t{len(batch) // 2 - 1}")
    assert rep["tools"] == "read 10" and rep["outcome"] == "no_approver" and "id" not in rep
    assert folder.next_due() is None
    assert len(folder.fold(_call(99))) == 2  # a new window: in full again


@pytest.mark.parametrize(
    "call",
    [
        _call(0, outcome="ok", decided_by="policy", is_error=False),  # it ran
        _call(0, outcome="error", decided_by="rule"),  # it ran (or bad input: kept all the same)
        _call(0, outcome="denied", decided_by="user"),  # a human decided
        _call(0, outcome="timeout"),  # a human was asked
        _call(0, outcome="cancelled"),
    ],
)
def test_calls_that_ran_or_reached_a_human_are_never_folded(call):
    folder = audit.RefusalCounter(Clock())
    noise = [r for i in range(1, audit.FULL_PER_WINDOW + 1) for r in _call(i)]
    assert len(folder.fold(noise)) == len(noise)
    assert folder.fold(call) == call
    assert folder.fold(_call(77)) == []  # a cheap refusal past the budget: counted
    assert folder.due(everything=True)[0]["count"] == 1


def test_a_done_whose_start_was_written_earlier_is_never_folded():
    folder = audit.RefusalCounter(Clock())
    folder.fold([r for i in range(audit.FULL_PER_WINDOW) for r in _call(i)])
    start, done = _call(50)
    assert folder.fold([start]) == []  # held back one batch: its done may be next
    assert folder.next_due() == 0
    assert folder.fold([]) == [start]  # held once only
    assert folder.fold([done]) == [done]  # folding it would leave a start with no end


def test_a_start_held_back_is_counted_with_its_done_from_the_next_batch():
    folder = audit.RefusalCounter(Clock())
    folder.fold([r for i in range(audit.FULL_PER_WINDOW) for r in _call(i)])
    start, done = _call(50)
    other = _call(51, outcome="ok", is_error=False)[0]  # a call that runs on meanwhile
    assert folder.fold([start, other]) == []
    assert folder.fold([done]) == [other]
    assert folder.fold([], final=True)[0]["count"] == 1
    assert folder.fold([start], final=True) == [start]  # a flush writes what it has


def test_each_machine_has_its_own_budget_and_many_tools_are_counted_as_other():
    folder = audit.RefusalCounter(Clock())
    folder.fold([r for i in range(audit.FULL_PER_WINDOW) for r in _call(i, machine="a")])
    assert len(folder.fold(_call(1, machine="b"))) == 2
    flood = [r for i in range(40) for r in _call(i, machine="a", tool=f"t{i:02d}")]
    assert folder.fold(flood) == []
    [rep] = folder.due(everything=True)
    assert rep["count"] == 40 and rep["machine"] == "a"
    assert rep["tools"].startswith("other 24, t00 1") and rep["tools"].count(",") == 16


def test_the_writer_writes_the_count_at_a_flush(tmp_path):
    log = audit.AuditLog(str(tmp_path / "a.jsonl"))
    try:
        for i in range(audit.FULL_PER_WINDOW + 5):
            for r in _call(i):
                log.record(r)
        assert log.flush(30)
        lines = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
        assert len(lines) == 2 * audit.FULL_PER_WINDOW + 1
        assert lines[-1]["phase"] == "repeated" and lines[-1]["count"] == 5
    finally:
        log.close()
