"""Rows of ``python -m bench`` for issue 26's fast paths: a tail read, ``audit -n 20`` on a full
log, and a call forwarded to an upstream server beside the same call made directly.

Each measure runs interleaved rounds against the contenders and reports medians (the machine
is shared: its load moves wall times, a per-round ratio cancels most of the drift).
``python -m bench --only fastpaths`` runs just these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Optional: the Python of another install of the bridge (e.g. main's venv) measured beside
# this one in the same run, as "before".
BEFORE_PY = os.environ.get("A2A_BENCH_BEFORE_PY")
TAIL_FILE_BYTES = 10 * 1024 * 1024
AUDIT_CALLS = 200_000


def own_cpu_s(pid: int) -> float:
    """CPU seconds of one process alone (utime + stime from /proc, clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def echo_child(parent: int) -> int:
    """The pid of ``parent``'s child running ``bench.echo_server`` (over stdio)."""
    for tid in os.listdir(f"/proc/{parent}/task"):
        with open(f"/proc/{parent}/task/{tid}/children") as f:
            kids = f.read().split()
        for kid in kids:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                if f.read().endswith(b"bench.echo_server\0"):  # not the one with a port
                    return int(kid)
    raise LookupError(f"no echo server under {parent}")


def _table(header: list[str], rows: list[list[str]]) -> str:
    from bench.tools import _table as table

    return table(header, rows)


# -- read from the end ------------------------------------------------------------------------


def tail_rows(cl: Any, root: str, server_pid: int, repeat: int = 30) -> list[list[str]]:
    """The last 10 lines of a 10 MB log: ``read`` with ``offset=-10`` (and, as before, with the
    offset of its 10th line from the end: a scan from the start) beside ``tail -n 10``."""
    from bench.tools import compare, native, process_cpu_s

    path = os.path.join(root, "tail10mb.log")
    line = "2026-12-04T20:00:00.000Z INFO request served in 1.23 ms path=/api/items/{:08d}\n"
    with open(path, "w") as f:
        n = 0
        while f.tell() < TAIL_FILE_BYTES:
            f.write("".join(line.format(n + i) for i in range(1000)))
            n += 1000
    want = [line.format(i).rstrip("\n") for i in range(n - 10, n)]
    text = cl.call("read", {"path": path, "offset": -10})
    assert [x.split("\t", 1)[1] for x in text.splitlines()] == want, text[:300]
    counter = lambda: process_cpu_s(server_pid)  # noqa: E731
    cpu = {"ours": counter, "from start": counter}
    m = compare(
        {
            "ours": lambda: cl.call("read", {"path": path, "offset": -10}),
            "from start": lambda: cl.call("read", {"path": path, "offset": n - 9}),
            "tail": native(["tail", "-n", "10", path], root),
        },
        repeat,
        cpu,
    )
    os.unlink(path)
    return [
        [
            "read offset=-10 (last 10 lines of 10 MB)",
            f"{m['ours']:.2f}",
            f"{m['from start']:.2f}",
            f"{m['tail']:.2f}",
            f"{1 / m['ratios']['tail']:.2f}x",
            f"{m['cpu_ms']['ours']:.2f}",
        ]
    ]


# -- audit -n 20 -------------------------------------------------------------------------------


def write_audit_log(path: str, calls: int, max_bytes: int, keep: int) -> None:
    """``calls`` calls (start + done) through the bridge's own writer, rotated as configured."""
    from omp_a2a_bridge.server.infra.audit import AuditLog

    log = AuditLog(path, max_bytes=max_bytes, keep=keep, linger_s=0)
    for i in range(calls):
        cid = f"{i:08d}-0000-4000-8000-000000000000"
        base = {
            "ts": "2026-12-04T20:00:00.000Z",
            "id": cid,
            "sid": "0123456789ab",
            "client": "claude-code",
            "tool": "read",
            "args": {"path": f"src/m{i % 97}.py"},
        }
        log.record({**base, "phase": "start"})
        log.record(
            {
                **base,
                "phase": "done",
                "isError": False,
                "outcome": "ok",
                "decided_by": "tier",
                "wait_ms": 0,
                "queue_ms": 0,
                "duration_ms": 1,
            }
        )
        if i % 5000 == 4999:
            log.flush(60)
    log.flush(60)
    log.close()


def audit_rows(rounds: int = 15) -> tuple[list[list[str]], str]:
    """``a2a-bridge audit -n 20`` (the installed script, a process per run) on an empty log
    and on a full one of 200k calls in rotated files, beside ``python -c pass`` (the floor: an
    interpreter start) and ``tail -n 40`` of the live file."""
    work = tempfile.mkdtemp(prefix="a2a-bench-audit-")
    try:
        log = os.path.join(work, "full", "audit.jsonl")
        os.makedirs(os.path.dirname(log))
        t0 = time.perf_counter()
        keep, max_bytes = 11, 10 * 1024 * 1024  # 200k calls need ~110 MB: 11 generations
        write_audit_log(log, AUDIT_CALLS, max_bytes, keep)
        made = time.perf_counter() - t0
        sizes = sum(
            os.path.getsize(os.path.join(os.path.dirname(log), f))
            for f in os.listdir(os.path.dirname(log))
        )
        cfg = os.path.join(work, "config.json")
        with open(cfg, "w") as f:
            json.dump({"audit": {"keep": keep, "max_bytes": max_bytes}}, f)
        script = shutil.which("a2a-bridge", path=os.path.dirname(sys.executable)) or "a2a-bridge"

        def env(audit: str) -> dict[str, str]:
            return dict(os.environ, A2A_BRIDGE_CONFIG=cfg, A2A_BRIDGE_AUDIT=audit)

        def run(argv: list[str], e: dict[str, str] | None = None) -> Callable[[], None]:
            def go() -> None:
                r = subprocess.run(argv, env=e, capture_output=True)
                assert r.returncode == 0, r.stderr[-300:]

            return go

        full = run([script, "audit", "-n", "20"], env(log))
        shown = subprocess.run(
            [script, "audit", "-n", "20"], env=env(log), capture_output=True, text=True
        ).stdout.splitlines()
        assert len(shown) == 20 and " ok " in shown[-1], shown[-3:]
        contenders = {
            "audit -n 20, full log": full,
            **_before_audit(run, env, log, work),
            "audit -n 20, empty log": run(
                [script, "audit", "-n", "20"], env(os.path.join(work, "none.jsonl"))
            ),
            "python -c pass": run([sys.executable, "-c", "pass"]),
            "tail -n 40 of the live file": run(["tail", "-n", "40", log]),
        }
        rows = _timed_processes(contenders, rounds)
        note = (
            f"Log: {AUDIT_CALLS:,} calls ({2 * AUDIT_CALLS:,} records, {sizes / 1e6:.0f} MB in "
            f"{keep + 1} files of 10 MB; written by the bridge's AuditLog in {made:.0f} s)."
        )
        return rows, note
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _before_audit(run: Any, env: Any, log: str, work: str) -> dict[str, Callable[[], None]]:
    if not BEFORE_PY:
        return {}
    script = os.path.join(os.path.dirname(BEFORE_PY), "a2a-bridge")
    return {
        "before: audit -n 20, full log": run([script, "audit", "-n", "20"], env(log)),
        "before: audit -n 20, empty log": run(
            [script, "audit", "-n", "20"], env(os.path.join(work, "none.jsonl"))
        ),
    }


def _timed_processes(fns: dict[str, Callable[[], None]], rounds: int) -> list[list[str]]:
    """Median wall ms and mean CPU ms (the child's, from rusage) per contender, interleaved."""
    from bench.tools import children_cpu_s

    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, float] = dict.fromkeys(fns, 0.0)
    for i in range(rounds + 1):
        for k, f in fns.items():
            c0 = children_cpu_s()
            t0 = time.perf_counter()
            f()
            if i:  # the first round warms the page cache
                wall[k].append((time.perf_counter() - t0) * 1000)
                cpu[k] += children_cpu_s() - c0
    return [
        [
            k,
            f"{statistics.median(wall[k]):.0f}",
            f"{min(wall[k]):.0f}",
            f"{cpu[k] * 1000 / rounds:.0f}",
        ]
        for k in fns
    ]


# -- upstream forwarding -----------------------------------------------------------------------


async def _upstream_measure(
    bridges: dict[str, tuple[str, int]],
    web: str,
    floor: str,
    token: str,
    calls: int,
    rounds: int,
    pids: dict[str, int],
) -> dict[str, Any]:
    """The contenders, interleaved per round, all through the same SDK client: the same echo
    server program called directly over HTTP and over stdio, the forwarding floor
    (``bench/forward_floor.py``: a bare Tornado handler in front of it over stdio) and each
    bridge in ``bridges`` (label prefix -> URL, pid) forwarding to it over stdio and over HTTP.
    ``pids``: ``web`` (the echo server over HTTP) and ``floor``."""
    import httpx2
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    auth = {"Authorization": f"Bearer {token}"}
    https = [httpx2.AsyncClient(timeout=30), httpx2.AsyncClient(timeout=30)]
    to_web = Client(streamable_http_client(web, http_client=https[0]), mode="legacy")
    to_floor = Client(streamable_http_client(floor, http_client=https[1]), mode="legacy")
    to_stdio = Client(
        StdioServerParameters(command=sys.executable, args=["-m", "bench.echo_server"], cwd=ROOT)
    )
    contenders: dict[str, tuple[Any, str]] = {
        "direct http": (to_web, "echo"),
        "direct stdio": (to_stdio, "echo"),
        "floor": (to_floor, "echo"),
    }
    front = {"floor": pids["floor"]}  # the forwarder's own process
    clients = [to_web, to_floor, to_stdio]
    for who, (url, pid) in bridges.items():
        https.append(httpx2.AsyncClient(headers=auth, timeout=30))
        bridge = Client(streamable_http_client(url, http_client=https[-1]), mode="legacy")
        clients.append(bridge)
        contenders[f"{who}bridge -> stdio"] = (bridge, "mcp__srv__echo")
        contenders[f"{who}bridge -> http"] = (bridge, "mcp__web__echo")
        front[f"{who}bridge -> stdio"] = front[f"{who}bridge -> http"] = pid
    per: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, float] = dict.fromkeys(contenders, 0.0)
    server_cpu: dict[str, float] = dict.fromkeys(contenders, 0.0)
    async with contextlib.AsyncExitStack() as stack:
        for c in clients:
            await stack.enter_async_context(c)
        # The echo server behind each contender (its CPU per call: the same program's work).
        servers = {
            "direct http": pids["web"],
            "direct stdio": echo_child(os.getpid()),
            "floor": echo_child(pids["floor"]),
        }
        for who, (_, pid) in bridges.items():
            servers[f"{who}bridge -> stdio"] = echo_child(pid)
            servers[f"{who}bridge -> http"] = pids["web"]

        async def run(c: Any, name: str) -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                r = await c.call_tool(name, {"text": "hi"})
                assert not r.is_error and r.content[0].text == "hi", r
            return (time.perf_counter() - t0) * 1000 / calls

        for i in range(rounds + 1):
            for k, (c, name) in contenders.items():
                pid = front.get(k)
                c0 = own_cpu_s(pid) if pid else 0.0
                s0 = own_cpu_s(servers[k])
                ms = await run(c, name)
                if i:  # the first round warms every path
                    per[k].append(ms)
                    cpu[k] += (own_cpu_s(pid) - c0) if pid else 0.0
                    server_cpu[k] += own_cpu_s(servers[k]) - s0
    for h in https:
        await h.aclose()
    out: dict[str, Any] = {k: statistics.median(v) for k, v in per.items()}
    out["cpu_ms"] = {k: v * 1000 / (rounds * calls) for k, v in cpu.items() if k in front}
    out["server_cpu_ms"] = {k: v * 1000 / (rounds * calls) for k, v in server_cpu.items()}
    out["ratio"] = {
        (a, b): statistics.median(x / y for x, y in zip(per[a], per[b], strict=True))
        for a in contenders
        for b in ("direct http", "direct stdio", "floor")
    }
    return out


def upstream_rows(
    start: Callable[..., Any], token: str, rounds: int = 5, calls: int = 200
) -> list[list[str]]:
    """``echo`` forwarded by the bridge beside the same call made directly by the same SDK
    client and through the forwarding floor; per install (this one, and the
    ``A2A_BENCH_BEFORE_PY`` one)."""
    web_port, floor_port = _free_port(), _free_port()
    quiet = {"cwd": ROOT, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    web = subprocess.Popen([sys.executable, "-m", "bench.echo_server", str(web_port)], **quiet)
    floor = subprocess.Popen(
        [sys.executable, "-m", "bench.forward_floor", str(floor_port)], **quiet
    )
    try:
        _wait_port(web_port)
        _wait_port(floor_port)
        urls = {
            "web": f"http://127.0.0.1:{web_port}/mcp",
            "floor": f"http://127.0.0.1:{floor_port}/mcp",
        }
        pids = {"web": web.pid, "floor": floor.pid}
        rows = _upstream_rows(start, token, rounds, calls, urls, pids)
    finally:
        for p in (web, floor):
            p.terminate()
            p.wait(10)
    return rows


def _free_port() -> int:
    from bench.__main__ import free_port

    return free_port()


def _wait_port(port: int, timeout: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


UPSTREAM_HEADER = [
    "echo via",
    "ms/call",
    "÷ direct HTTP",
    "÷ direct stdio",
    "÷ floor forwarder",
    "forwarder CPU ms/call",
    "echo server CPU ms/call",
]
_LABELS = {
    "direct http": "direct HTTP (SDK server)",
    "direct stdio": "direct stdio (SDK server)",
    "floor": "floor forwarder (Tornado → stdio)",
    "bridge -> stdio": "bridge → stdio server",
    "bridge -> http": "bridge → HTTP server",
}


def _upstream_rows(
    start: Callable[..., Any],
    token: str,
    rounds: int,
    calls: int,
    urls: dict[str, str],
    pids: dict[str, int],
) -> list[list[str]]:
    """A bridge (this install's, and the ``A2A_BENCH_BEFORE_PY`` one's, interleaved in the same
    rounds) with the echo server over stdio (``srv``) and over HTTP (``web``), both at allow
    tier. Bridge CPU: the bridge process alone."""
    from bench.__main__ import bench_env, open_session
    from bench.tools import Client

    # The root in the home, as a user's project would be: an HTTP server's relative names are
    # judged from the root's ancestors too, and /tmp on a shared machine changes all the time
    # (its listing cannot be kept; 3,000 entries folded per call).
    work = tempfile.mkdtemp(prefix=".a2a-bench-up-", dir=os.path.expanduser("~"))
    stdio = {"command": sys.executable, "args": ["-m", "bench.echo_server"], "cwd": ROOT}
    servers = {"srv": {**stdio, "box": False}, "web": {"url": urls["web"]}}
    tiers = {"mcp__srv__echo": "allow", "mcp__web__echo": "allow"}
    config = {"roots": [work], "mcp_servers": servers, "approval": {"tiers": tiers}}
    running: dict[str, Any] = {}
    try:
        for who, py in (("", None), ("before: ", BEFORE_PY)):
            if who and not py:
                continue
            env = bench_env(os.path.join(work, f"run{len(running)}"), config, token)
            running[who] = start(env, py) if py else start(env)
        for server in running.values():
            auth = {"Authorization": f"Bearer {token}"}
            cl = Client(server.port, open_session(server.port, auth))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                listed = cl.rpc("tools/list").get("result", {}).get("tools", [])
                if {"mcp__srv__echo", "mcp__web__echo"} <= {t["name"] for t in listed}:
                    break
                time.sleep(0.2)
        bridges = {
            who: (f"http://127.0.0.1:{server.port}/", server.proc.pid)
            for who, server in running.items()
        }
        m = asyncio.run(
            _upstream_measure(bridges, urls["web"], urls["floor"], token, calls, rounds, pids)
        )
    finally:
        for server in running.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    labels = dict(list(_LABELS.items())[:3])
    for who in running:
        labels.update({f"{who}{k}": f"{who}{v}" for k, v in list(_LABELS.items())[3:]})
    for k, label in labels.items():
        r = m["ratio"]
        rows.append(
            [
                label,
                f"{m[k]:.2f}",
                f"{r[(k, 'direct http')]:.2f}x",
                f"{r[(k, 'direct stdio')]:.2f}x",
                f"{r[(k, 'floor')]:.2f}x",
                f"{m['cpu_ms'][k]:.2f}" if k in m["cpu_ms"] else "",
                f"{m['server_cpu_ms'][k]:.2f}",
            ]
        )
    return rows


def upstream_section(start: Any, token: str, rounds: int = 5, calls: int = 200) -> list[str]:
    """``python -m bench --only upstream``: the upstream rows alone, with the load."""
    load0 = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    rows = upstream_rows(start, token, rounds, calls)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return [
        f"### Upstream forwarding (the SDK client, {calls} sequential calls per round; median of "
        f"{rounds} interleaved rounds; ratios: median of per-round ratios)",
        "",
        f"Load average (1/5/15 min) at the start: {load0}; at the end: {load}; "
        f"{os.cpu_count()} cores.",
        "",
        _table(UPSTREAM_HEADER, rows),
    ]


# -- the section ---------------------------------------------------------------------------------


def fastpaths_section(py: str, base_env: dict[str, str], token: str, start: Any) -> list[str]:
    """Every fast-path row in one run: markdown lines."""
    from bench.__main__ import bench_env, open_session
    from bench.tools import Client

    work = tempfile.mkdtemp(prefix="a2a-bench-fast-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    config = {"roots": [root], "approval": {"tiers": {"read": "allow"}}}
    server = start(bench_env(work, config, token, base_env))
    try:
        cl = Client(server.port, open_session(server.port, {"Authorization": f"Bearer {token}"}))
        tail = tail_rows(cl, root, server.proc.pid)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    audit, audit_note = audit_rows()
    upstream = upstream_rows(start, token)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return [
        "## Fast paths (issue 26)",
        "",
        f"Load average at the end: {load} (1/5/15 min) on {os.cpu_count()} cores.",
        "",
        "### read from the end (median ms of 30 interleaved runs; bridge over HTTP, `tail` "
        "incl. process start)",
        "",
        _table(
            [
                "what",
                "offset=-10 ms",
                "offset=N-9 ms (scan)",
                "tail -n 10 ms",
                "bridge / tail",
                "bridge CPU ms/call",
            ],
            tail,
        ),
        "",
        "### a2a-bridge audit -n 20 (a process per run; median and best of 15 interleaved runs)",
        "",
        audit_note,
        "",
        _table(["what", "median ms", "best ms", "CPU ms (user+sys)"], audit),
        "",
        "### Upstream forwarding (the SDK client, 200 sequential calls per round; median of 5 "
        "interleaved rounds; ratios: median of per-round ratios)",
        "",
        _table(UPSTREAM_HEADER, upstream),
    ]
