"""Benchmark the bridge against the official MCP SDK server and a bare Tornado handler.

    .venv/bin/pip install -e '.[bench]'  &&  sudo apt-get install wrk
    .venv/bin/python -m bench [--duration 5] [--calls 200] [--markdown out.md]

One run starts the three servers on loopback, drives each with wrk (a Lua script carrying the
session header) at concurrency 1 and 8 doing ``tools/call read`` of a small file, plus ``ping``
and ``tools/list`` on the bridge, and prints req/s, p50, p99 and the ratios. It also measures
start-up time, idle RSS, RSS with 64 sessions, how fast an approver hears of a prompt-tier call
and how fast an approval releases the held response. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TOKEN = "bench-token-" + "x" * 40
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LUA = """
wrk.method = "POST"
wrk.body = [[%(body)s]]
%(headers)s
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %%d %%f %%f %%f %%d\\n", summary.requests,
    summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


MODERN_ROW = "tools/call read (2026-07-28)"


def bench_env(
    work: str,
    config: dict[str, Any],
    token: str = TOKEN,
    base: Mapping[str, str] | None = None,
    *,
    log: bool = False,
) -> dict[str, str]:
    """The environment of a bridge that keeps every file of its own in ``work``: ``config``
    written to ``work/config.json`` (0600), the audit and the runtime folder beside it (with
    ``log``, its log too), ``token`` as its token; the rest from ``base`` (default: this
    process's environment).

    Why one helper: every section starts bridges of its own, and each must read none of the
    user's config, keyring, audit or control file; written once, no section can forget one.
    """
    os.makedirs(work, exist_ok=True)
    cfg = os.path.join(work, "config.json")
    with open(cfg, "w") as f:
        json.dump(config, f)
    os.chmod(cfg, 0o600)  # a machines table holds token hashes: the bridge wants it private
    env = dict(
        os.environ if base is None else base,
        A2A_BRIDGE_CONFIG=cfg,
        A2A_BRIDGE_AUDIT=os.path.join(work, "audit.jsonl"),
        A2A_BRIDGE_RUNTIME_DIR=os.path.join(work, "run"),
        A2A_BRIDGE_TOKEN=token,
    )
    if log:
        env["A2A_BRIDGE_LOG"] = os.path.join(work, "bridge.log")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    port: int
    startup_s: float

    @classmethod
    def start(cls, name: str, argv: list[str], env: dict[str, str], port: int) -> Server:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        line = proc.stdout.readline() if proc.stdout else ""
        startup = time.perf_counter() - t0
        if "listening on" not in line:
            proc.kill()
            raise RuntimeError(f"{name} did not start: {line!r}")
        return cls(name, proc, port, startup)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def post(port: int, body: dict, headers: dict[str, str]) -> tuple[int, dict, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers)
    c.request("POST", "/", json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), json.loads(data) if data else {}


def open_session(port: int, auth: dict[str, str]) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    status, headers, _ = post(port, init, auth)
    assert status == 200, status
    sid = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    h = dict(auth, **{"mcp-session-id": sid, "MCP-Protocol-Version": "2025-11-25"})
    post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, h)
    return h


def wrk(port: int, body: dict, headers: dict[str, str], conc: int, duration: float) -> dict:
    h = dict(headers)
    h["Content-Type"] = "application/json"
    h["Accept"] = "application/json, text/event-stream"
    lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in h.items())
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA % {"body": json.dumps(body), "headers": lines})
        script = f.name
    try:
        seconds = max(1, round(duration))
        url = f"http://127.0.0.1:{port}/"
        proc = subprocess.run(
            ["wrk", "-t1", f"-c{conc}", f"-d{seconds}s", "-s", script, url],
            capture_output=True,
            text=True,
            timeout=seconds + 30,
        )
    finally:
        os.unlink(script)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"wrk failed: {proc.stdout}{proc.stderr}")
    _, n, secs, p50, p99, errors = line.split()
    return {
        "rps": int(n) / float(secs),
        "p50": float(p50),
        "p99": float(p99),
        "errors": int(errors),
    }


async def approval_latency(control: dict, mcp_port: int, auth: dict[str, str], calls: int) -> dict:
    """Time from a prompt-tier call leaving the client to an approver (the events socket) hearing
    of it, and from an approval to the held HTTP response arriving."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    from tornado.websocket import websocket_connect

    ws_url = "ws" + control["url"][4:] + "api/events?as=bench"
    ws = await websocket_connect(
        HTTPRequest(ws_url, headers={"Authorization": f"Bearer {control['secret']}"})
    )

    async def next_snapshot() -> dict:
        msg = await asyncio.wait_for(ws.read_message(), 10)
        if msg is None:
            raise RuntimeError("the events socket closed")
        return json.loads(msg)

    await next_snapshot()  # the snapshot on connect
    client = AsyncHTTPClient(max_clients=4)
    headers = dict(auth, **{"Content-Type": "application/json"})
    notify: list[float] = []
    release: list[float] = []
    for i in range(calls):
        body = {
            "jsonrpc": "2.0",
            "id": i + 1,
            "method": "tools/call",
            "params": {"name": "ls", "arguments": {}},
        }
        t0 = time.perf_counter()
        held = client.fetch(
            HTTPRequest(f"http://127.0.0.1:{mcp_port}/", "POST", headers, json.dumps(body))
        )
        while True:
            snap = await next_snapshot()
            if snap["pending"]:
                break
        notify.append(time.perf_counter() - t0)
        call_id = snap["pending"][0]["id"]
        t2 = time.perf_counter()
        await client.fetch(
            HTTPRequest(
                f"{control['url']}api/pending/{call_id}",
                "POST",
                {"Authorization": f"Bearer {control['secret']}"},
                json.dumps({"decision": "approve"}),
            )
        )
        response = await asyncio.wait_for(held, 10)
        release.append(time.perf_counter() - t2)
        assert json.loads(response.body)["result"]["isError"] is False
        while True:  # drain to the snapshot where nothing is pending
            snap = await next_snapshot()
            if not snap["pending"]:
                break
    ws.close()

    def pct(xs: list[float], q: float) -> float:
        return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] * 1000

    return {
        "notify_p50": pct(notify, 50),
        "notify_p99": pct(notify, 99),
        "release_p50": pct(release, 50),
        "release_p99": pct(release, 99),
    }


def fmt_row(cells: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([fmt_row(header, widths), sep, *(fmt_row(r, widths) for r in rows)])


def bash_section() -> list[str]:
    """``bash echo hi``: the bridge boxed and unboxed beside Desktop Commander (bench/bash.py)."""
    from .bash import section

    return section()


def box_section() -> list[str]:
    from .box import section

    return section()


def scale_section(args: argparse.Namespace) -> list[str]:
    """The scale rows (bench/scale.py): 64 sessions, 32 waiting calls, an approver; idle."""
    from .scale import scale_section as section

    return section(args.rounds, args.duration, args.calls)


def bench_tools() -> list[str]:
    """The tool rows (bench/tools.py) against their own bridge with every tool at allow tier."""
    from bench.tools import tools_section

    py = sys.executable

    def start(env: dict[str, str]) -> Server:
        port = free_port()
        return Server.start(
            "bridge", [py, "-m", "omp_a2a_bridge.server", "serve", "--port", str(port)], env, port
        )

    return tools_section(py, dict(os.environ), TOKEN, start)


def _bridge_starter(env: dict[str, str], py: str = sys.executable) -> Server:
    """A ``serve`` bridge on a free port (the fastpaths and peers sections start their own)."""
    port = free_port()
    return Server.start(
        "bridge", [py, "-m", "omp_a2a_bridge.server", "serve", "--port", str(port)], env, port
    )


def bench_fastpaths() -> list[str]:
    """Issue 26's fast paths (bench/fastpaths.py): tail read, audit -n 20, upstream echo."""
    from bench.fastpaths import fastpaths_section

    return fastpaths_section(sys.executable, dict(os.environ), TOKEN, _bridge_starter)


def bench_upstream(rounds: int) -> list[str]:
    """Upstream echo: direct, through the forwarding floor, through the bridge (issue 26)."""
    from bench.fastpaths import upstream_section

    return upstream_section(_bridge_starter, TOKEN, rounds=max(rounds, 5))


def bench_peers(rounds: int) -> list[str]:
    """The walking tools beside server-filesystem, Desktop Commander and fd (bench/peers.py)."""
    from bench.peers import peers_section

    return peers_section(dict(os.environ), TOKEN, _bridge_starter, rounds)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    ap.add_argument("--calls", type=int, default=200, help="prompt-tier calls to time")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds per measurement; the median is reported (machine noise)",
    )
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument(
        "--only",
        choices=(
            "all",
            "servers",
            "tools",
            "box",
            "bash",
            "machines",
            "scale",
            "fastpaths",
            "upstream",
            "peers",
        ),
        default="all",
        help="servers: the MCP throughput tables; tools: grep/find/read/ls vs native programs; "
        "box: the box's cost per bash call and the prompts it avoids; bash: `bash echo hi` "
        "boxed and unboxed beside Desktop Commander (server CPU per call); machines: the token "
        "check with 1 and 100 machines; scale: 64 sessions, 32 waiting calls and an approver, "
        "idle wake-ups; fastpaths: tail read, audit -n 20 on a 200k-call log, upstream echo "
        "vs direct; upstream: the upstream echo rows alone (direct, the forwarding floor, the "
        "bridge); peers: ls and find beside server-filesystem, Desktop Commander and fd",
    )
    args = ap.parse_args()
    # `timeout` or Ctrl-C: still stop the three servers (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    if args.only in ("machines", "scale", "tools", "box", "bash", "fastpaths", "peers", "upstream"):
        if args.only == "peers":
            text = "\n".join(bench_peers(args.rounds))
        elif args.only == "upstream":
            text = "\n".join(bench_upstream(args.rounds))
        elif args.only == "fastpaths":
            text = "\n".join(bench_fastpaths())
        elif args.only == "machines":
            from .machines import section as machines_section

            here = sys.modules[__name__]
            text = "\n".join(machines_section(here, min(args.duration, 3.0), args.rounds))
        elif args.only == "scale":  # issue 26: 64 sessions, 32 waiting, an approver; idle
            text = "\n".join(scale_section(args))
        else:
            only = {"tools": bench_tools, "box": box_section, "bash": bash_section}[args.only]
            text = "\n".join(only())
        print(text)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(text + "\n")
        return 0

    if shutil.which("wrk") is None:
        print("bench needs wrk: sudo apt-get install wrk", file=sys.stderr)
        return 2

    work = tempfile.mkdtemp(prefix="a2a-bench-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    small = os.path.join(root, "small.txt")
    with open(small, "w") as f:
        f.write(
            "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(20))
        )
    # read: allow (throughput); ls: prompt, so approvals are timed without a tool's own cost
    # (write would fsync).
    tiers = {"read": "allow", "ls": "prompt"}
    env = bench_env(work, {"roots": [root], "approval": {"tiers": tiers}}, log=True)
    py = sys.executable
    ours_port, sdk_port, floor_port = free_port(), free_port(), free_port()
    ours = Server.start(
        "bridge",
        [py, "-m", "omp_a2a_bridge.server", "serve", "--port", str(ours_port)],
        env,
        ours_port,
    )
    time.sleep(1.0)
    idle_rss = ours.rss_mb()
    sdk = Server.start("sdk", [py, "-m", "bench.sdk_server", str(sdk_port)], env, sdk_port)
    floor = Server.start(
        "floor", [py, "-m", "bench.floor_server", str(floor_port)], env, floor_port
    )
    results: dict[tuple[str, str, int], dict] = {}
    extra: dict[str, float] = {}
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        ours_h = open_session(ours_port, auth)
        sdk_h = open_session(sdk_port, {})
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "read", "arguments": {"path": small}},
        }
        # The same work in the 2026-07-28 era (protocol § 9): no session, the version and the
        # client's identity on every request.
        modern_call = {
            **call,
            "params": {
                **call["params"],
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                },
            },
        }
        modern_h = {
            **auth,
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "read",
        }
        status, _, data = post(ours_port, modern_call, modern_h)
        assert status == 200 and data["result"]["resultType"] == "complete", data
        for port, h in ((ours_port, ours_h), (sdk_port, sdk_h), (floor_port, {})):
            status, _, data = post(port, call, h)
            assert status == 200 and not data["result"].get("isError"), (port, data)
            assert "line 0: the quick brown fox" in data["result"]["content"][0]["text"]
        runs: dict[tuple[str, str, int], list[dict]] = {}
        for _ in range(args.rounds):  # interleaved, so drift hits every server alike
            for conc in (1, 8):
                for name, port, h in (
                    ("bridge", ours_port, ours_h),
                    ("sdk", sdk_port, sdk_h),
                    ("floor", floor_port, {}),
                ):
                    key = (name, "tools/call read", conc)
                    runs.setdefault(key, []).append(wrk(port, call, h, conc, args.duration))
                key = ("bridge", MODERN_ROW, conc)
                runs.setdefault(key, []).append(
                    wrk(ours_port, modern_call, modern_h, conc, args.duration)
                )
                for method in ("ping", "tools/list"):
                    body = {"jsonrpc": "2.0", "id": 1, "method": method}
                    key = ("bridge", method, conc)
                    runs.setdefault(key, []).append(
                        wrk(ours_port, body, ours_h, conc, args.duration)
                    )
        for key, rs in runs.items():
            results[key] = sorted(rs, key=lambda r: r["rps"])[len(rs) // 2]  # the median run

        with open(os.path.join(work, "run", "control.json")) as f:
            control = json.load(f)
        extra.update(asyncio.run(approval_latency(control, ours_port, ours_h, args.calls)))
        for _ in range(64):  # last: the 64th evicts the session used above
            open_session(ours_port, auth)
        time.sleep(0.5)
        extra["rss_64_sessions_mb"] = ours.rss_mb()
    finally:
        for s in (ours, sdk, floor):
            s.stop()
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    for (name, what, conc), r in results.items():
        rows.append(
            [
                name,
                what,
                str(conc),
                f"{r['rps']:.0f}",
                f"{r['p50']:.2f}",
                f"{r['p99']:.2f}",
                str(r["errors"]),
            ]
        )
    out = [
        f"## Throughput (wrk, 1 thread, loopback; median of {args.rounds} interleaved rounds "
        f"of {max(1, round(args.duration))} s)",
        "",
        table(["server", "request", "conc", "req/s", "p50 ms", "p99 ms", "errors"], rows),
        "",
    ]
    ratio_rows = []
    for conc in (1, 8):
        b = results[("bridge", "tools/call read", conc)]["rps"]
        s = results[("sdk", "tools/call read", conc)]["rps"]
        fl = results[("floor", "tools/call read", conc)]["rps"]
        m = results[("bridge", MODERN_ROW, conc)]["rps"]
        ratio_rows.append(
            [str(conc), f"{b / s:.2f}x", f"{b / fl * 100:.0f}%", f"{m / b * 100:.0f}%"]
        )
    out += [
        "## Ratios (tools/call read)",
        "",
        table(
            [
                "conc",
                "bridge / SDK (target >= 3x)",
                "bridge / floor (target >= 75%)",
                "2026-07-28 / 2025 era",
            ],
            ratio_rows,
        ),
        "",
        "## Bridge process",
        "",
        table(
            ["measure", "value", "target"],
            [
                ["start to listening line", f"{ours.startup_s * 1000:.0f} ms", ""],
                ["idle RSS", f"{idle_rss:.1f} MB", "< 60 MB"],
                ["RSS with 64 sessions", f"{extra['rss_64_sessions_mb']:.1f} MB", ""],
                [
                    f"approver notified, p50 ({args.calls} calls)",
                    f"{extra['notify_p50']:.2f} ms",
                    "",
                ],
                ["approver notified, p99", f"{extra['notify_p99']:.2f} ms", "<= 5 ms"],
                ["approve -> HTTP response, p50", f"{extra['release_p50']:.2f} ms", ""],
                ["approve -> HTTP response, p99", f"{extra['release_p99']:.2f} ms", ""],
            ],
        ),
        "",
        f"SDK server start: {sdk.startup_s * 1000:.0f} ms; "
        f"floor start: {floor.startup_s * 1000:.0f} ms.",
    ]
    if args.only == "all":
        from .machines import section as machines_section

        here = sys.modules[__name__]
        out += [
            "",
            *bench_tools(),
            "",
            *bench_peers(args.rounds),
            "",
            *box_section(),
            "",
            *bash_section(),
        ]
        out += ["", *machines_section(here)]
        out += ["", *scale_section(args)]
        out += ["", *bench_fastpaths()]
    text = "\n".join(out)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
