"""Faults and abuse (issue 10): every case over real sockets and real processes.

Each test drives one way an agent, a local user or the OS can push the bridge, and asserts the
property that must hold: it stops when asked, memory and records stay bounded, no 500, one
``done`` per call, the audit history survives, no process outlives its call, clear one-line
failures with the right exit code. Time bounds are generous (the machine is shared).
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

import pytest

from omp_a2a_bridge.server.control.controlfile import read_control
from omp_a2a_bridge.server.core.approvals import Ending
from omp_a2a_bridge.server.infra.audit import RECORD_CAP, cap_record, pair_calls, read_records
from omp_a2a_bridge.server.tools.shell import check_timeout

from ..conftest import write_config
from ..support.control_client import Api, WsApprover
from ..support.helpers import (
    SERVER,
    STOP_LIMIT_S,
    TOKEN,
    Mcp,
    in_thread,
    serve_fails,
    serve_process,
    sleep_n,
    sleeping_pids,
    wait_for,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- helpers -------------------------------------------------------------------------------------


class Serve:
    """``a2a-bridge serve`` as a real subprocess, stderr kept in a file."""

    def __init__(
        self,
        env: dict[str, str],
        config: dict[str, Any] | None = None,
        *,
        extra_env: dict[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
        wait_listening: bool = True,
    ) -> None:
        cfg = {"roots": [env["root"]]}
        cfg.update(config or {})
        write_config(env["config"], cfg)
        e = dict(os.environ)
        e.update(extra_env or {})
        e = {k: v for k, v in e.items() if v is not None}
        self.err_path = os.path.join(os.path.dirname(env["audit"]), "serve.err")
        os.makedirs(os.path.dirname(self.err_path), exist_ok=True)
        self.err = open(self.err_path, "wb")  # noqa: SIM115 - closed in stop()

        def limits() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

        preexec = limits if nofile else None
        if wait_listening:  # the one serve helper: it waits for the listening line
            self.proc, self.port = serve_process(e, self.err, cwd=REPO, preexec_fn=preexec)
            return
        self.proc = subprocess.Popen(
            [*SERVER, "serve", "--port", "0"],
            cwd=REPO,
            env=e,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            preexec_fn=preexec,
        )
        self.port = 0

    def stderr(self) -> str:
        self.err.flush()
        with open(self.err_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def signal_and_wait(self, sig: int = signal.SIGTERM, timeout: float = 10) -> float:
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(timeout)
        took = time.monotonic() - t0
        print(f"stopped by {signal.Signals(sig).name} in {took:.2f} s")
        return took

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.err.close()


def run_serve(env: dict[str, str], extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """A serve that is expected to fail at start: (exit code, stderr)."""
    e = dict(os.environ)
    e.update(extra_env or {})
    r = serve_fails({k: v for k, v in e.items() if v is not None}, cwd=REPO)
    return r.returncode, r.stderr


def one_clear_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


def read_pids(path: str) -> list[int]:
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def assert_pairing(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Exactly one start and one done per call id."""
    seen: dict[str, list[str]] = {}
    for r in records:
        seen.setdefault(r["id"], []).append(r["phase"])
    bad = {k: v for k, v in seen.items() if sorted(v) != ["done", "start"]}
    assert bad == {}, bad
    return pair_calls(records)


def raw_post(port: int, body: bytes, sid: str | None) -> tuple[int, bytes]:
    c = Mcp(port)
    headers = {"mcp-session-id": sid} if sid else {}
    r = c.request(body=body, headers=headers)
    c.close()
    return r.status, r.raw


# -- 1. serve stops when asked -------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_while_the_keyring_hangs(env, tmp_path, sig):
    """Bridge starting, stuck in a keyring call that never returns: a signal ends it at once."""
    mark = str(tmp_path / "keyring-called")
    s = Serve(
        env,
        extra_env={
            "A2A_BRIDGE_TOKEN": None,
            "PYTHON_KEYRING_BACKEND": "tests.support.keyrings.HangingKeyring",
            "A2A_TEST_KEYRING_MARK": mark,
        },
        wait_listening=False,
    )
    try:
        wait_for(lambda: os.path.exists(mark), timeout=60)
        took = s.signal_and_wait(sig)
        assert s.proc.returncode == 0, s.stderr()
        assert took < STOP_LIMIT_S
        assert "Traceback" not in s.stderr()
        assert not os.path.exists(os.path.join(env["runtime"], "control.json"))
    finally:
        s.stop()


def test_serve_stops_with_bash_and_approval_in_flight(env, tmp_path):
    """A running bash (with a setsid grandchild) and a waiting approval: exit 0 in < 2 s,
    every process of the call gone, one done record per call."""
    pids = os.path.join(env["root"], "pids")
    s = Serve(env, {"approval": {"tiers": {"bash": "allow"}, "timeout_s": 60}})
    try:
        info = wait_for(read_control)
        ws = WsApprover(info)
        runner, waiter = Mcp(s.port), Mcp(s.port)
        runner.initialize()
        waiter.initialize()
        cmd = (
            f"setsid sleep {sleep_n('300.72')} & echo $! > {pids}; "
            f"sleep {sleep_n('300.73')} & echo $! >> {pids}; wait"
        )
        t1, out1 = in_thread(runner.call, "bash", {"command": cmd})
        t2, out2 = in_thread(waiter.call, "write", {"path": "x.txt", "content": "x"})
        wait_for(lambda: ws.snapshots and ws.snapshots[-1]["pending"])
        wait_for(lambda: os.path.exists(pids) and len(read_pids(pids)) == 2)
        took = s.signal_and_wait(signal.SIGTERM)
        t1.join(60)
        t2.join(60)
        assert s.proc.returncode == 0 and took < STOP_LIMIT_S, s.stderr()
        assert out2[0].text == "bridge shutting down"
        assert out1[0].status == 200  # answered (cancelled by the shutdown), not dropped
        wait_for(lambda: not sleeping_pids("300.72", "300.73"), timeout=30)
        assert "Traceback" not in s.stderr()
        ws.close()
    finally:
        s.stop()
    calls = assert_pairing(read_records(env["audit"]))
    assert len(calls) == 2


def test_locked_keyring_starts_with_one_warning(env):
    s = Serve(
        env,
        extra_env={
            "A2A_BRIDGE_TOKEN": None,
            "PYTHON_KEYRING_BACKEND": "tests.support.keyrings.LockedKeyring",
        },
    )
    try:
        took = s.signal_and_wait(signal.SIGTERM)
        assert s.proc.returncode == 0 and took < STOP_LIMIT_S
        # Besides the start text (indented: exposed, approve, log), one warning.
        said = "\n".join(x for x in s.stderr().splitlines() if not x.startswith("  "))
        line = one_clear_line(said)
        assert "keyring unavailable" in line and "locked" in line
    finally:
        s.stop()


# -- 5. startup: one clear line, the right exit code ---------------------------------------------


def test_runtime_dir_open_to_others_is_refused(env):
    os.makedirs(env["runtime"])
    os.chmod(env["runtime"], 0o777)  # noqa: S103 - the misconfiguration under test
    write_config(env["config"], {"roots": [env["root"]]})
    code, err = run_serve(env)
    assert code == 1
    line = one_clear_line(err)
    assert "writable by other users" in line and env["runtime"] in line
    assert os.listdir(env["runtime"]) == []  # no secret was put there


def test_runtime_dir_owned_by_someone_else_is_refused(env, tmp_path):
    write_config(env["config"], {"roots": [env["root"]]})
    if os.geteuid() == 0:
        other = str(tmp_path / "theirs")
        os.makedirs(other, mode=0o700)
        os.chown(other, 65534, 65534)
    else:
        other = "/tmp"  # root's (and world-writable)
    code, err = run_serve(env, {"A2A_BRIDGE_RUNTIME_DIR": other})
    assert code == 1
    line = one_clear_line(err)
    assert other in line and ("belongs to uid" in line or "writable by other users" in line)
    assert not os.path.exists(os.path.join(other, "control.json"))


def test_stale_control_file_with_a_reused_pid(env):
    """The pid in control.json now belongs to an unrelated process: serve starts, and status
    agrees that the bridge runs (it used to say "already running" and exit 0)."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.makedirs(env["runtime"], mode=0o700)
    with open(os.path.join(env["runtime"], "control.json"), "w") as f:
        stale = {"pid": sleeper.pid, "url": "http://127.0.0.1:9/", "secret": "x", "mcp_url": "y"}
        json.dump(stale, f)
    s = Serve(env)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "omp_a2a_bridge.server", "status"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert r.returncode == 0 and f":{s.port}/" in r.stdout, r.stderr
        assert read_control().pid == s.proc.pid
    finally:
        s.stop()
        sleeper.kill()
        sleeper.wait()


def test_read_only_config_dir(env, tmp_path):
    """The token must go to the config file (no keyring) and its folder is read-only."""
    if os.geteuid() == 0:
        config = "/sys/omp-a2a-bridge-test/config.json"  # root can write anywhere but here
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        config = str(ro / "config.json")
    code, err = run_serve(
        env,
        {
            "A2A_BRIDGE_CONFIG": config,
            "A2A_BRIDGE_TOKEN": None,
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
        },
    )
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err
    assert lines[-1].startswith("a2a-bridge: failed to start: cannot store the token in")
    assert len(lines) <= 3, err  # the keyring warning, the port warning, the failure


# -- 2. bounded: approvals, audit, connections -----------------------------------------------------


def test_pending_approvals_are_capped(start_bridge):
    running = start_bridge(
        {"approval": {"max_pending_per_session": 2, "max_pending": 3, "timeout_s": 30}}
    )
    runner = running.runner
    handle = runner.attach_approver("pytest")
    a, b = running.client("a"), running.client("b")
    extra_a = Mcp(running.port)  # a second connection in session a
    extra_a.sid = a.sid
    threads = [
        in_thread(c.call, "write", {"path": f"{i}.txt", "content": "x"})
        for i, c in enumerate((a, extra_a))
    ]
    running.pending(2)
    r = Mcp(running.port)
    r.sid = a.sid
    refused = r.call("write", {"path": "3.txt", "content": "x"})
    assert refused.result["isError"] and refused.text == "too many calls waiting for approval"
    threads.append(in_thread(b.call, "write", {"path": "4.txt", "content": "x"}))
    running.pending(3)
    r.sid = b.sid
    refused = r.call("write", {"path": "5.txt", "content": "x"})  # overall cap
    assert refused.text == "too many calls waiting for approval"
    assert len(runner.snapshot().pending) == 3
    runner.call(lambda: runner.bridge.broker.end_where(Ending.SHUTDOWN))
    for t, _ in threads:
        t.join(60)
    runner.detach_approver(handle)
    calls = assert_pairing(running.audit())
    limited = [c for c in calls if c["done"]["outcome"] == "limit"]
    assert len(limited) == 2


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return int(next(ln for ln in f if ln.startswith("VmRSS")).split()[1]) / 1024


def test_memory_stays_bounded_under_many_huge_pending_writes(start_bridge):
    """40 pending writes of 900 KB used to take the bridge to 1.7 GB: at most 32 wait (8 per
    session), the rest are refused at once, and memory grows by far less than that."""
    running = start_bridge({"approval": {"timeout_s": 60}})
    runner = running.runner
    handle = runner.attach_approver("pytest")
    before = _rss_mb()
    sessions = [running.client(f"s{i}") for i in range(5)]
    # A waiting call answers only when it ends: the client must outwait the whole test on a
    # loaded machine (the default 15 s socket timeout does not), not stand in for a refusal.
    clients = [Mcp(running.port, timeout=180) for _ in range(40)]
    for i, c in enumerate(clients):
        c.sid = sessions[i % 5].sid
    content = "x" * 900_000
    outs = [
        in_thread(c.call, "write", {"path": f"{i}.txt", "content": content})
        for i, c in enumerate(clients)
    ]
    wait_for(lambda: sum(1 for _, o in outs if o) >= 8, timeout=60)
    running.pending(32, timeout=60)
    grew = _rss_mb() - before
    assert len(runner.snapshot().pending) == 32
    per_session = [p.sid for p in runner.snapshot().pending]
    assert max(per_session.count(s.sid) for s in sessions) <= 8
    refused = [o[0] for _, o in outs if o]
    assert not [r for r in refused if isinstance(r, BaseException)], refused
    assert [r.text for r in refused] == ["too many calls waiting for approval"] * 8
    assert grew < 600, f"RSS grew by {grew:.0f} MB"
    runner.call(lambda: runner.bridge.broker.end_where(Ending.SHUTDOWN))
    for t, _ in outs:
        t.join(60)
    runner.detach_approver(handle)
    assert_pairing(running.audit())


def test_huge_fields_cannot_flush_the_audit_history(start_bridge, env):
    running = start_bridge(
        {"audit": {"max_bytes": 256 * 1024, "keep": 1}, "approval": {"tiers": {"ls": "allow"}}}
    )
    c = running.client("x" * 10_000)
    canary = c.call("ls", {})
    assert canary.status == 200
    canary_id = running.audit()[0]["id"]
    huge = "t" * 1_000_000  # just under the 1 MiB body limit
    for i in range(32):
        # odd: a 1 MB tool name; even: a 450 KB argument key and value
        args = {} if i % 2 else {huge[:450_000]: huge[:450_000]}
        r = c.call(huge if i % 2 else "ls", args)
        assert r.status == 200
    records = running.audit()
    assert canary_id in {r["id"] for r in records}  # the history before the flood survives
    assert len(records) == 66
    for name in os.listdir(os.path.dirname(env["audit"])):
        if name.startswith("audit.jsonl"):
            with open(os.path.join(os.path.dirname(env["audit"]), name), "rb") as f:
                for line in f:
                    assert len(line) <= RECORD_CAP
    assert_pairing(records)


def test_bash_command_is_audited_in_full_content_stays_hashed(bridge):
    c = bridge.client()
    command = "echo " + " ".join(f"word{i}" for i in range(400))  # ~3 KB
    assert c.call("bash", {"command": command}).status == 200
    content = "secret-ish file content " * 20
    assert c.call("write", {"path": "w.txt", "content": content}).status == 200
    giant = "echo start; " + "true; " * 150_000
    assert c.call("bash", {"command": giant}).status == 200
    recs = [r for r in bridge.audit() if r["phase"] == "start"]
    by_tool = {r["tool"]: r for r in recs[:2]}
    assert json.loads(by_tool["bash"]["args"])["command"] == command
    assert content not in by_tool["write"]["args"] and "sha256:" in by_tool["write"]["args"]
    cut = json.loads(recs[2]["args"])["command"]
    assert cut.startswith("echo start; true;") and f"<len:{len(giant)},sha256:" in cut
    assert len(cap_record(recs[2]).encode()) < RECORD_CAP


def test_soft_descriptor_limit_is_raised_to_the_hard_limit(env):
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 8192)
    s = Serve(env, nofile=(256, hard))
    try:
        with open(f"/proc/{s.proc.pid}/limits") as f:
            line = next(ln for ln in f if ln.startswith("Max open files"))
        assert line.split()[3] == str(hard)
    finally:
        s.signal_and_wait()
        s.stop()


def _idle_connections(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        out.append(socket.create_connection(("127.0.0.1", port)))
    return out


@pytest.mark.parametrize(
    ("nofile", "config"),
    [((1024, 1024), {}), ((256, 256), {"limits": {"max_connections": 5000}})],
    ids=["auto-cap", "cap-above-descriptors"],
)
def test_idle_connections_do_not_take_down_either_listener(env, nofile, config):
    """~1020 idle unauthenticated connections under a 1024 descriptor limit (and, with the cap
    set too high on purpose, under 256: lowered to what the limit allows, with one line):
    real clients and the control API still get through, and the log stays a few lines (it was
    201 MB of tracebacks). The control API's peer lookup needs descriptors of its own: with the
    process out of them it cannot tell who asks and refuses (1 CI run in 4 before the cap was
    kept below the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 4096):  # this test process holds the client ends
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    nofile = (min(nofile[0], hard), min(nofile[1], hard))
    s = Serve(env, config, nofile=nofile)
    socks: list[socket.socket] = []
    try:
        info = wait_for(read_control)
        n = nofile[0] - 4 if nofile[0] >= 1024 else nofile[0] + 44
        socks = _idle_connections(s.port, min(n, max(min(hard, 4096) - 200, 16)))
        socks += _idle_connections(int(info.url.rsplit(":", 1)[1].strip("/")), 80)
        c = Mcp(s.port)
        c.initialize()
        assert c.call("ls", {}).status == 200
        assert Api(info).call("GET", "/api/status").status == 200
        assert s.proc.poll() is None
        err = s.stderr()
        said = [x for x in err.splitlines() if not x.startswith("  ")]  # not the start text
        assert "Traceback" not in err and len(said) <= 6, err[:2000]
        assert "out of file descriptors" not in err, err[:2000]
        lowered = "limits.max_connections 5000 is more than 256 file descriptors allow; using 176"
        assert (lowered in err) == bool(config), err[:2000]
    finally:
        for sock in socks:
            sock.close()
        s.signal_and_wait()
        s.stop()
    assert s.proc.returncode == 0


def test_out_of_descriptors_with_nothing_idle_backs_off_with_one_line(env):
    """Every descriptor held by connections mid-request (nothing to evict): the accept loop
    pauses with one log line instead of a traceback per wake-up, and recovers. The connection
    cap keeps a reserve below the descriptor limit, so only a limit below the bridge's own
    needs (~11 descriptors idle, plus the smallest cap of 16) gets the listener here."""
    s = Serve(env, nofile=(20, 20))
    socks: list[socket.socket] = []
    try:
        head = (
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{"
        )
        for _ in range(40):  # more than the process has descriptors
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.sendall(head)  # a request in progress: its body never completes
            socks.append(sock)
        wait_for(lambda: "out of file descriptors" in s.stderr(), timeout=60)
        time.sleep(1.5)  # several back-off rounds while still exhausted
        for sock in socks:
            sock.close()
        socks = []
        c = Mcp(s.port)
        try:
            c.initialize()  # accepted again once descriptors are free
        except OSError:
            raise AssertionError(f"exit {s.proc.poll()}: {s.stderr()[-3000:]}") from None
        assert c.call("ls", {}).status == 200
        err = s.stderr()
        assert "Traceback" not in err
        assert err.count("out of file descriptors") == 1, err[:2000]
        said = [x for x in err.splitlines() if not x.startswith("  ")]  # not the start text
        assert len(said) <= 4, err[:2000]
    finally:
        for sock in socks:
            sock.close()
        s.signal_and_wait()
        s.stop()
    assert s.proc.returncode == 0


def test_busy_connections_past_the_cap_get_a_clear_503(start_bridge):
    running = start_bridge({"limits": {"max_connections": 2}, "approval": {"timeout_s": 30}})
    handle = running.runner.attach_approver("pytest")
    busy = [running.client(), running.client()]
    threads = [in_thread(c.call, "write", {"path": "b.txt", "content": "x"}) for c in busy]
    running.pending(2)
    sock = socket.create_connection(("127.0.0.1", running.port), timeout=10)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 503")
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]["message"] == "too many connections"
    running.runner.detach_approver(handle)
    running.runner.call(running.runner.bridge.begin_shutdown)
    for t, _ in threads:
        t.join(60)


# -- 3. no 500, one done per call ----------------------------------------------------------------


def test_lone_surrogates_and_nul_never_500_and_pair_one_to_one(bridge, log_records):
    c = bridge.client()
    bodies = [
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call",'
        b'"params":{"name":"read","arguments":{"path":"a"}}}',
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call",'
        b'"params":{"name":"read","arguments":{"path":"\\udfff.txt"}}}',
        b'{"jsonrpc":"2.0","id":8,"method":"tools/call",'
        b'"params":{"name":"ls","arguments":{"path":"a\\u0000b"}}}',
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call",'
        b'"params":{"name":"\\ud83d","arguments":{}}}',
        b'{"jsonrpc":"2.0","id":"\\udc80","method":"tools/call",'
        b'"params":{"name":"bash","arguments":{"command":"echo \\ud800"}}}',
    ]
    for body in bodies:
        status, raw = raw_post(bridge.port, body, c.sid)
        assert status in (200, 400), raw  # never 500 (400: a stricter parser refused it)
        json.loads(raw)
    assert_pairing(bridge.audit())
    assert not [r for r in log_records.records if r.exc_info], "a traceback was logged"


def test_approver_hanging_up_mid_push_leaves_no_unretrieved_task(start_bridge, caplog):
    import gc
    import logging

    caplog.set_level(logging.ERROR, logger="asyncio")
    running = start_bridge({"approval": {"timeout_s": 30}}, control=True)
    info = running.runner.control
    clients = [running.client() for _ in range(4)]
    for _ in range(3):
        ws = WsApprover(info)
        threads = [
            in_thread(c.call, "write", {"path": f"{i}.txt", "content": "y" * 200_000})
            for i, c in enumerate(clients)
        ]
        running.pending(4)

        def abort(ws: WsApprover = ws) -> None:
            sock = ws.ws.protocol.stream.socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            ws.ws.protocol.stream.close()

        ws.loop.call_soon_threadsafe(abort)  # a reset while snapshots are being pushed
        running.runner.pause(True)  # more pushes into the dead socket
        running.runner.pause(False)
        for t, _ in threads:
            t.join(60)
        ws.loop.call_soon_threadsafe(ws.loop.stop)
    wait_for(lambda: running.runner.snapshot().approvers == ())
    running.runner.call(gc.collect)
    gc.collect()
    never = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert never == []


# -- 4. bash ------------------------------------------------------------------------------------


def test_bash_returns_when_the_shell_exits(bridge, root):
    c = bridge.client()
    pids = os.path.join(root, "bg")
    t0 = time.monotonic()
    r = c.call("bash", {"command": f"sleep {sleep_n('300.71')} & echo $! > {pids}; echo started"})
    # Not the 300 s of the sleep that holds the output open. (Was 5 s: the box's start alone
    # can take seconds under CI load.)
    assert time.monotonic() - t0 < 60
    assert r.text == "started" and not r.result["isError"]
    assert len(read_pids(pids)) == 1
    wait_for(lambda: not sleeping_pids("300.71"), timeout=30)  # and took its children along


@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_bash_setsid_and_double_forked_children_are_gone(bridge, root, how):
    pids = os.path.join(root, "pids")
    cmd = (
        f"setsid sleep {sleep_n('301.71')} & echo $! > {pids}; "
        f"(setsid sh -c 'sleep {sleep_n('302.71')} & echo $! >> {pids}' &); "
        f"nohup sleep {sleep_n('303.71')} > /dev/null 2>&1 & echo $! >> {pids}; sleep 300"
    )
    c = bridge.client()
    if how == "timeout":
        r = c.call("bash", {"command": cmd, "timeout_s": 2})
        assert "timed out after 2 s" in r.text
    else:
        t, out = in_thread(c.call, "bash", {"command": cmd}, 99)
        wait_for(lambda: os.path.exists(pids) and len(read_pids(pids)) == 3)
        other = bridge.client()
        other.sid = c.sid
        params = {"requestId": 99, "reason": "test"}
        other.rpc("notifications/cancelled", params, req_id=None)
        t.join(60)
        assert out[0].status == 202 and out[0].raw == b""  # cancelled: no JSON-RPC response
    assert len(read_pids(pids)) == 3
    wait_for(lambda: not sleeping_pids("301.71", "302.71", "303.71"), timeout=30)


def test_bash_environment_has_no_bridge_variables(bridge):
    c = bridge.client()
    r = c.call("bash", {"command": "env"})
    assert "A2A_BRIDGE_" not in r.text and TOKEN not in r.text
    assert "PATH=" in r.text


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e999", "7200"])
def test_bash_timeout_must_be_finite_and_within_the_maximum(bridge, raw):
    c = bridge.client()
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash",'
        f'"arguments":{{"command":"echo ran","timeout_s":{raw}}}}}}}'
    ).encode()
    status, data = raw_post(bridge.port, body, c.sid)
    assert status in (200, 400), data  # 400: the protocol layer refuses NaN/Infinity itself
    reply = json.loads(data)
    if status == 200:
        result = reply["result"]
        text = result["content"][0]["text"]
        assert result["isError"] and "timeout_s" in text and "ran" not in text, text
    else:
        assert reply["error"]["code"] == -32700


def test_check_timeout_refuses_non_finite_values():
    from omp_a2a_bridge.server.infra.config import Limits

    limits = Limits()
    for bad in (math.nan, math.inf, -math.inf, 0, -1, True, "5", 10_000):
        with pytest.raises(Exception, match="finite number"):
            check_timeout(bad, limits)
    assert check_timeout(5, limits) == 5.0


def test_bash_output_past_the_kill_limit_stops_the_command(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"bash": "allow"}}, "limits": {"output_kill_bytes": 2_000_000}}
    )
    c = running.client()
    t0 = time.monotonic()
    r = c.call("bash", {"command": "yes 0123456789abcdef"})
    assert time.monotonic() - t0 < 20
    assert r.result["isError"]
    assert r.text.endswith("[output passed 2000000 bytes; the process group was killed]")
    assert r.text.startswith("0123456789abcdef\n") and "bytes of output elided" in r.text
    assert len(r.text) < 70_000  # head and tail kept as always


# -- 6. login link -------------------------------------------------------------------------------


def test_login_code_works_once_and_expires(start_bridge, monkeypatch):
    import omp_a2a_bridge.server.control.auth as control_auth

    running = start_bridge(control=True)
    info = running.runner.control
    api, page = Api(info), Api(info, secret=None)
    code = api.call("POST", "/api/login-code").json["code"]
    assert info.secret not in code
    assert page.call("GET", f"/login?code={code}").status == 303
    assert page.call("GET", f"/login?code={code}").status == 401  # used
    assert page.call("GET", f"/login?k={info.secret}").status == 401  # the secret is no key
    monkeypatch.setattr(control_auth, "LOGIN_CODE_TTL_S", 0.2)
    late = api.call("POST", "/api/login-code").json["code"]
    time.sleep(0.3)  # the code's own 60 s clock, shortened
    r = page.call("GET", f"/login?code={late}")
    assert r.status == 401 and "expired" in r.raw.decode()
    # a page session (cookie) cannot mint codes for itself
    code = api.call("POST", "/api/login-code").json["code"]
    cookie = page.call("GET", f"/login?code={code}").headers["Set-Cookie"].split(";", 1)[0]
    r = page.call("POST", "/api/login-code", headers={"Cookie": cookie})
    assert r.status == 403
