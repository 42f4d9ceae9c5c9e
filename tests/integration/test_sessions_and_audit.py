"""Session table rules and the audit log, through the live server and as pure units."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from omp_a2a_bridge.server.infra.audit import AuditLog, args_text, pair_calls, read_records, redact
from omp_a2a_bridge.server.mcp.sessions import SessionTable
from omp_a2a_bridge.server.present.ids import sid_hash

from ..support.helpers import TOKEN, Mcp, wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_session_cap_evicts_least_recently_seen(start_bridge):
    running = start_bridge()
    clients = []
    for i in range(64):
        clients.append(running.client(f"c{i}"))
    # Touch the first one so the second is now the least recently seen.
    assert clients[0].rpc("ping").status == 200
    newcomers = [running.client(f"n{i}") for i in range(5)]
    assert len(running.runner.snapshot().sessions) == 64
    assert clients[0].rpc("ping").status == 200
    for evicted in clients[1:6]:
        assert evicted.rpc("ping").status == 404
    assert clients[6].rpc("ping").status == 200
    assert all(n.rpc("ping").status == 200 for n in newcomers)


def test_session_ttl_is_idle_time_not_age(start_bridge):
    clock = Clock()
    running = start_bridge(session_table=SessionTable(clock=clock))
    c = running.client()
    day = 24 * 3600
    clock.now += day - 1
    assert c.rpc("ping").status == 200  # refreshes
    clock.now += day - 1
    assert c.rpc("ping").status == 200  # alive at ~2 days of age thanks to the refresh
    clock.now += day + 1
    r = c.rpc("ping")
    assert (r.status, r.error["message"]) == (404, "unknown session")
    assert running.runner.snapshot().sessions == ()  # dropped at that moment


def test_session_table_unit():
    clock = Clock()
    t = SessionTable(max_sessions=2, ttl_s=10, clock=clock)
    a, ev = t.create({"name": "a", "version": "1"})
    assert ev is None and a.client == "a" and a.client_version == "1"
    b, _ = t.create(None)
    assert b.client == "unknown"
    clock.now += 1
    t.touch(a.sid)
    c, ev = t.create({"name": " "})
    assert ev is b and len(t) == 2
    assert t.remove(a.sid) is a and t.remove(a.sid) is None
    clock.now += 11
    assert t.touch(c.sid) is None and len(t) == 0


def test_session_view_counts_calls(start_bridge):
    running = start_bridge({"approval": {"tiers": {"ls": "allow"}}})
    c = running.client("counter")
    for _ in range(3):
        c.call("ls", {})
    [s] = running.runner.snapshot().sessions
    assert (s.client, s.version, s.calls, s.pending) == ("counter", "1.0", 3, 0)


# -- audit -----------------------------------------------------------------------------------


def test_redaction_any_depth_and_caps():
    long = "x" * 5000
    r = redact({"edits": [{"oldText": long, "n": 1}], "short": "ok"})
    assert r["edits"][0]["oldText"].startswith("<len:5000,sha256:")
    assert r["short"] == "ok"
    deep: object = "leaf"
    for _ in range(40):
        deep = [deep]
    assert "<max-depth>" in args_text(deep)
    many = {f"k{i}": "v" * 100 for i in range(50)}
    text = args_text(many)
    assert len(text) == 1025 and text.endswith("…")
    assert "x" * 60 not in args_text({"a": {"b": {"c": long}}})


def test_audit_records_every_call_including_refused(start_bridge):
    running = start_bridge({"approval": {"tiers": {"ls": "allow"}}})
    c = running.client("auditor")
    c.call("ls", {})
    c.call("xd://bash", {})
    c.call("ls", {"bogus": 1})
    c.rpc("tools/call", {})  # no name at all
    recs = running.audit()
    calls = pair_calls(recs)
    assert len(calls) == 4
    assert all(call["start"] and call["done"] for call in calls)
    outcomes = [call["done"]["outcome"] for call in calls]
    assert outcomes == ["ok", "not_exposed", "error", "not_exposed"]
    first = calls[0]
    # Session ids are secrets: the audit log holds a short hash, never the id.
    assert first["start"]["sid"] == sid_hash(c.sid) and first["start"]["client"] == "auditor"
    with open(running.env["audit"]) as f:
        assert c.sid not in f.read()
    assert first["start"]["ts"] <= first["done"]["ts"]
    assert set(first["done"]) >= {
        "ts", "id", "sid", "client", "machine", "tool", "phase", "args", "isError", "outcome",
        "decided_by", "wait_ms", "duration_ms",
    }  # fmt: skip
    assert calls[3]["start"]["tool"] == ""
    mode = stat.S_IMODE(os.stat(running.env["audit"]).st_mode)
    assert mode == 0o600


@pytest.mark.reveals_token  # the client itself sends the token as an argument
def test_audit_never_holds_the_token(start_bridge):
    running = start_bridge({"approval": {"tiers": {"grep": "allow"}}})
    c = running.client()
    c.call("grep", {"pattern": TOKEN})
    running.audit()
    with open(running.env["audit"]) as f:
        text = f.read()
    assert TOKEN not in text and "<token>" in text


def test_not_audited_initialize_ping_list_and_unauthorized(start_bridge):
    running = start_bridge()
    c = running.client()
    c.rpc("ping")
    c.rpc("tools/list")
    Mcp(running.port, token="w" * 40).rpc("tools/call", {"name": "ls"})
    assert running.audit() == []


def test_pairing_under_100_concurrent_calls_across_rotation(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"ls": "allow"}}, "audit": {"max_bytes": 4096, "keep": 100}}
    )
    errors = []

    # 50 sessions (under the cap), two connections each: 100 calls in flight at once.
    clients = [running.client(f"w{n}") for n in range(50)]
    for n in range(50):
        twin = running.client(init=False)
        twin.sid = clients[n].sid
        clients.append(twin)
    go = threading.Barrier(100)

    def worker(n: int) -> None:
        c = clients[n]
        go.wait()
        r = c.call("ls", {"path": "."})
        if r.status != 200 or r.result["isError"]:
            errors.append(r)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    recs = running.audit()
    rotated = [f for f in os.listdir(os.path.dirname(running.env["audit"])) if ".jsonl." in f]
    assert len(rotated) >= 2, "the test must cross at least two rotations"
    assert len(recs) == 200
    calls = pair_calls(recs)
    assert len(calls) == 100 and all(c["start"] and c["done"] for c in calls)
    logdir = os.path.dirname(running.env["audit"])
    for f in [running.env["audit"], *(os.path.join(logdir, r) for r in rotated)]:
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
        with open(f) as fh:
            for line in fh:
                json.loads(line)


def test_audit_write_failure_never_fails_a_call(tmp_path, log_records):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    log = AuditLog(str(blocker / "audit.jsonl"))  # parent is a file: every write fails
    for i in range(101):
        log.record({"id": str(i), "phase": "start"})
        log.flush()  # one batch per record: 101 failed writes
    assert log.failures == 101
    warnings = [m for m in log_records.messages if "audit record not written" in m]
    assert len(warnings) == 2  # the first and the 100th
    log.close()


def test_audit_rotation_keeps_n_generations(tmp_path):
    path = str(tmp_path / "a.jsonl")
    log = AuditLog(path, max_bytes=4096, keep=3)
    for i in range(400):
        log.record({"id": str(i), "phase": "start", "pad": "p" * 50})
    log.flush()
    log.close()
    names = sorted(os.listdir(tmp_path))
    assert names == ["a.jsonl", "a.jsonl.1", "a.jsonl.2", "a.jsonl.3"]
    recs = read_records(path, keep=3)
    ids = [int(r["id"]) for r in recs]
    assert ids == sorted(ids) and ids[-1] == 399  # oldest generation first, nothing reordered
    assert all(os.path.getsize(tmp_path / n) <= 4096 for n in names)


def test_recent_records_reads_only_the_tail_across_generations(tmp_path):
    from omp_a2a_bridge.server.infra.audit import recent_records

    path = str(tmp_path / "a.jsonl")
    log = AuditLog(path, max_bytes=4096, keep=5)
    for i in range(300):
        log.record({"id": str(i), "phase": "start", "pad": "p" * 40})
    log.flush()
    log.close()
    assert [r["id"] for r in recent_records(path, 5, 10)] == [str(i) for i in range(290, 300)]
    many = recent_records(path, 5, 120)  # crosses into older generations
    assert [r["id"] for r in many] == [str(i) for i in range(180, 300)]
    assert recent_records(str(tmp_path / "none.jsonl"), 5, 10) == []


def _follow_process():
    """``a2a-bridge audit --follow -n 0`` as a real process, its stdout lines collected by a
    thread; returns once it says it sits at the end of the log."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "omp_a2a_bridge.server", "audit", "--follow", "-n", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert proc.stderr.readline().startswith("following ")
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def test_audit_follow_keeps_every_record_across_real_rotations(start_bridge, env):
    """A burst of calls rotates the log several times between two polls: the records written
    to the old file since the last poll, and whole generations that rotated past, are printed
    too - each call's start and done exactly once."""
    running = start_bridge(
        {"approval": {"tiers": {"ls": "allow"}}, "audit": {"max_bytes": 4096, "keep": 20}}
    )
    proc, lines = _follow_process()
    try:
        c = running.client("burst")
        calls = 40
        for _ in range(calls):
            c.call("ls", {})
        running.runner.bridge.audit.flush()
        assert os.path.exists(env["audit"] + ".3")  # it really rotated, more than once
        with contextlib.suppress(AssertionError):
            wait_for(lambda: len(lines) >= 2 * calls, timeout=20)
        time.sleep(0.6)  # one more poll: nothing is printed twice
    finally:
        proc.kill()
        err = proc.stderr.read()
        proc.wait(5)
    assert len(lines) == 2 * calls, (
        err + "".join(lines) + repr(sorted(os.listdir(os.path.dirname(env["audit"]))))
    )
    assert sum("PENDING" in x for x in lines) == calls
    assert sum(" ok " in x and "(burst)" in x for x in lines) == calls


def test_audit_follow_waits_for_a_partly_written_line(env):
    """A record whose line is not finished yet is printed once the rest arrives, not
    skipped for good."""
    os.makedirs(os.path.dirname(env["audit"]), exist_ok=True)
    with open(env["audit"], "w") as f:
        f.write("")

    def record(call_id: str, tool: str) -> bytes:
        rec = {
            "ts": "2026-01-01T00:00:00Z",
            "id": call_id,
            "sid": "0123456789ab",
            "client": "halfway",
            "tool": tool,
            "phase": "start",
            "args": "{}",
        }
        return (json.dumps(rec) + "\n").encode()

    proc, lines = _follow_process()
    try:
        second = record("b", "second_tool")
        with open(env["audit"], "ab", buffering=0) as f:
            f.write(record("a", "first_tool") + second[:40])
            wait_for(lambda: any("first_tool" in x for x in lines), timeout=10)
            time.sleep(0.6)  # a poll sees the half line
            f.write(second[40:])
            wait_for(lambda: any("second_tool" in x for x in lines), timeout=10)
    finally:
        proc.kill()
        proc.wait(5)
    assert len(lines) == 2, lines
