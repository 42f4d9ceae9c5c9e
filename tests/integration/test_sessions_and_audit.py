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

from ..support.helpers import TOKEN, Clock, Mcp, wait_for


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
        assert log.flush(60), "the audit writer fell behind"  # one batch per record: 101 fails
    assert log.failures == 101
    warnings = [m for m in log_records.messages if "audit record not written" in m]
    assert len(warnings) == 2  # the first and the 100th
    log.close(60)


def _ids(path: str) -> list[str]:
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        return [json.loads(line)["id"] for line in f]
    return []


def test_audit_writer_is_woken_when_idle_finds_records_when_awake_and_loses_none_at_close(
    tmp_path,
):
    """The writer is woken by a record only while it sleeps idle; between batches of steady
    traffic it looks again by itself. Either way every record lands, in order, with no flush;
    and a close right after a burst writes all of it."""
    path = str(tmp_path / "a.jsonl")
    log = AuditLog(path, linger_s=0.005)
    log.record({"id": "0", "phase": "start"})  # an idle writer: this record must wake it
    wait_for(lambda: _ids(path) == ["0"], timeout=60)
    for i in range(1, 300):
        log.record({"id": str(i), "phase": "start"})
        if i % 3 == 0:
            time.sleep(0.002)  # paced like sequential calls: the writer stays awake
        if i % 100 == 0:
            time.sleep(0.1)  # a pause: the writer goes idle, the next record wakes it
    wait_for(lambda: len(_ids(path)) >= 300, timeout=60)
    assert _ids(path) == [str(i) for i in range(300)]
    for i in range(300, 600):
        log.record({"id": str(i), "phase": "start"})
    log.close(60)
    assert _ids(path) == [str(i) for i in range(600)]


def test_audit_rotation_keeps_n_generations(tmp_path):
    path = str(tmp_path / "a.jsonl")
    log = AuditLog(path, max_bytes=4096, keep=3)
    for i in range(400):
        log.record({"id": str(i), "phase": "start", "pad": "p" * 50})
    assert log.flush(60), "the audit writer fell behind"
    log.close(60)
    names = sorted(os.listdir(tmp_path))
    assert names == ["a.jsonl", "a.jsonl.1", "a.jsonl.2", "a.jsonl.3"]
    recs = read_records(path, keep=3)
    ids = [int(r["id"]) for r in recs]
    assert ids == sorted(ids) and ids[-1] == 399  # oldest generation first, nothing reordered
    assert all(os.path.getsize(tmp_path / n) <= 4096 for n in names)


def test_recent_calls_reads_only_the_tail_across_generations(tmp_path):
    from omp_a2a_bridge.server.infra.audit import recent_calls

    path = str(tmp_path / "a.jsonl")
    log = AuditLog(path, max_bytes=4096, keep=5)
    for i in range(300):
        log.record({"id": str(i), "phase": "start", "pad": "p" * 40})
    assert log.flush(60), "the audit writer fell behind"
    log.close(60)
    assert [c["id"] for c in recent_calls(path, 5, 10)] == [str(i) for i in range(290, 300)]
    many = recent_calls(path, 5, 120)  # crosses into older generations
    assert [c["id"] for c in many] == [str(i) for i in range(180, 300)]


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
        assert running.runner.bridge.audit.flush(60), "the audit writer fell behind"
        assert os.path.exists(env["audit"] + ".3")  # it really rotated, more than once
        with contextlib.suppress(AssertionError):
            wait_for(lambda: len(lines) >= 2 * calls, timeout=60)
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
            wait_for(lambda: any("first_tool" in x for x in lines), timeout=60)
            time.sleep(0.6)  # a poll sees the half line
            f.write(second[40:])
            wait_for(lambda: any("second_tool" in x for x in lines), timeout=60)
    finally:
        proc.kill()
        proc.wait(5)
    assert len(lines) == 2, lines


def _long_call_log(path: str, calls: int = 60) -> None:
    """A call that starts, ``calls`` quick calls, its done, then one that hangs: rotated at
    4 KiB, so the long call's start sits generations before its done."""
    log = AuditLog(path, max_bytes=4096, keep=50)

    def rec(cid: str, phase: str, tool: str = "ls", **kw: object) -> dict:
        return {"ts": f"2026-01-01T00:00:{len(cid):02d}Z", "id": cid, "sid": "s", "client": "t",
                "tool": tool, "phase": phase, "args": {"path": "p" * 20}, **kw}  # fmt: skip

    ok = {"outcome": "ok", "decided_by": "tier", "duration_ms": 1}
    log.record(rec("long", "start", "long_tool"))
    for i in range(calls):
        log.record(rec(str(i), "start"))
        log.record(rec(str(i), "done", **ok))
    log.record(rec("long", "done", "long_tool", outcome="ok", decided_by="user", duration_ms=9))
    log.record(rec("hung", "start", "hung_tool"))
    assert log.flush(60), "the audit writer fell behind"
    log.close(60)


def test_recent_calls_reads_back_to_each_start_even_in_an_older_file(tmp_path):
    """The last N calls from the end of the log are exactly what pairing the whole log gives,
    for every N: a done whose start is in an older rotated file is joined to it."""
    from omp_a2a_bridge.server.infra.audit import recent_calls

    path = str(tmp_path / "a.jsonl")
    _long_call_log(path)
    assert os.path.exists(path + ".3")  # rotated several times
    whole = pair_calls(read_records(path, 50))
    assert [whole[0]["id"], whole[-1]["id"]] == ["long", "hung"]
    for n in (1, 2, 5, 61, 62, 63, 500):
        assert recent_calls(path, 50, n) == whole[-n:], n
    assert recent_calls(path, 50, 0) == []
    assert recent_calls(str(tmp_path / "none.jsonl"), 5, 10) == []


def _audit_cli(*args: str) -> subprocess.CompletedProcess:
    """``a2a-bridge audit`` as the installed script runs it (the tray package's entry)."""
    return subprocess.run(
        [sys.executable, "-m", "omp_a2a_bridge.tray", "audit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


def test_audit_command_reads_the_last_calls_from_the_end(env):
    _long_call_log(env["audit"])
    r = _audit_cli("-n", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and " 59 " not in lines[0]
    assert "ls" in lines[0] and " ok " in lines[0]
    assert "PENDING" in lines[1] and "hung_tool" in lines[1]
    lines = _audit_cli("-n", "62").stdout.splitlines()
    # the long call: its start's time, paired with its done from generations later
    assert "long_tool" in lines[0] and "approved by the user" in lines[0]
    assert lines[0].startswith("2026-01-01T00:00:04Z  ok")
    assert len(lines) == 62
    assert _audit_cli("-n", "0").stdout.splitlines() == _audit_cli("-n", "500").stdout.splitlines()


def test_audit_command_needs_only_the_audit_part_of_the_config(env):
    """A broken rule elsewhere in the config does not hide the log; a broken ``audit`` object
    or a file that is not JSON is still named."""
    from ..conftest import write_config

    _long_call_log(env["audit"])
    write_config(env["config"], {"rules": "not rules", "audit": {"keep": 50}})
    assert len(_audit_cli("-n", "3").stdout.splitlines()) == 3
    write_config(env["config"], {"audit": {"keep": 0}})
    r = _audit_cli()
    assert r.returncode == 1
    assert "field 'audit.keep' must be an integer in [1, 100]" in r.stderr
    write_config(env["config"], {"audit": {"keep": 1}})  # only the newest generation is read
    assert len(_audit_cli("-n", "0").stdout.splitlines()) < 62
    with open(env["config"], "w") as f:
        f.write("{nope")
    r = _audit_cli()
    assert r.returncode == 1 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr


def test_audit_follow_pairs_the_done_of_a_call_printed_as_pending(env):
    """``--follow -n N``: a call shown PENDING in the tail is printed with its start's time
    when its done arrives."""
    _long_call_log(env["audit"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "omp_a2a_bridge.server", "audit", "--follow", "-n", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    lines: list[str] = []
    try:
        assert proc.stderr.readline().startswith("following ")

        def read() -> None:
            for line in proc.stdout:
                lines.append(line)

        threading.Thread(target=read, daemon=True).start()
        wait_for(lambda: len(lines) >= 1, timeout=60)
        done = {"ts": "2026-01-01T09:09:09Z", "id": "hung", "sid": "s", "client": "t",
                "tool": "hung_tool", "phase": "done", "outcome": "denied",
                "decided_by": "user", "duration_ms": 5}  # fmt: skip
        with open(env["audit"], "a") as f:
            f.write(json.dumps(done) + "\n")
        wait_for(lambda: len(lines) >= 2, timeout=60)
    finally:
        proc.kill()
        proc.wait(5)
    assert "PENDING" in lines[0] and "hung_tool" in lines[0]
    assert lines[1].startswith("2026-01-01T00:00:04Z  denied") and "denied by the user" in lines[1]
