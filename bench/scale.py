"""Scale rows for ``python -m bench`` (issue 26): the bridge at 64 sessions, with 32 calls
waiting and an approver attached, and idle.

- c=64 spread over 64 sessions, against the bare Tornado floor at c=64;
- plain ``tools/call read`` throughput (c=8) with 64 sessions + 32 waiting calls + an
  attached approver (the diff form of the events socket, applied as the page does) against
  the same traffic with none of them, and what the approver received meanwhile;
- "approver notified" with 31 calls already waiting (diff form, then the full form);
- idle wake-ups per second (voluntary context switches of every thread) and idle RSS.

Every throughput figure is the median of interleaved rounds (the machine is shared).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

from omp_a2a_bridge.server.present.delta import apply_event

from .__main__ import TOKEN, Server, bench_env, free_port, open_session, table

ROTATING_LUA = """
wrk.method = "POST"
wrk.body = [[%(body)s]]
%(headers)s
local sids = { %(sids)s }
local n = 0
request = function()
  n = n + 1
  wrk.headers["mcp-session-id"] = sids[(n %% #sids) + 1]
  return wrk.format()
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %%d %%f %%f %%f %%d\\n", summary.requests,
    summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system, every thread), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk_rotating(
    port: int,
    body: dict,
    headers: dict[str, str],
    sids: list[str],
    conc: int,
    seconds: int,
    pid: int | None = None,
) -> dict[str, float]:
    """wrk with each request on the next session of ``sids`` (one session: plain traffic).
    With ``pid``, also the server's CPU per request (``cpu_us``): unlike req/s, it hardly
    moves when other work shares the machine."""
    h = dict(headers, **{"Content-Type": "application/json"})
    h["Accept"] = "application/json, text/event-stream"
    lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in h.items())
    script = ROTATING_LUA % {
        "body": json.dumps(body),
        "headers": lines,
        "sids": ", ".join(f'"{s}"' for s in sids) or '""',
    }
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    cpu0 = cpu_s(pid) if pid is not None else 0.0
    try:
        proc = subprocess.run(
            ["wrk", "-t1", f"-c{conc}", f"-d{seconds}s", "-s", f.name, f"http://127.0.0.1:{port}/"],
            capture_output=True,
            text=True,
            timeout=seconds + 30,
        )
    finally:
        os.unlink(f.name)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"wrk failed: {proc.stdout}{proc.stderr}")
    _, n, secs, p50, p99, errors = line.split()
    cpu = (cpu_s(pid) - cpu0) / max(int(n), 1) * 1e6 if pid is not None else float("nan")
    return {
        "rps": int(n) / float(secs),
        "p50": float(p50),
        "p99": float(p99),
        "errors": int(errors),
        "cpu_us": cpu,
    }


class Approver:
    """An events socket on its own thread, like the page: diffs applied as they come."""

    def __init__(self, control: dict[str, str], diffs: bool = True) -> None:
        self.control = control
        self.diffs = diffs
        self.state: dict[str, Any] | None = None
        self.messages = 0
        self.bytes = 0
        self.loop = asyncio.new_event_loop()
        self.changed = asyncio.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        if not self.ready.wait(15):
            raise RuntimeError("the events socket did not open")

    async def _run(self) -> None:
        url = (
            "ws"
            + self.control["url"][4:]
            + "api/events?as=bench"
            + ("&diff=1" if self.diffs else "")
        )
        headers = {"Authorization": f"Bearer {self.control['secret']}"}
        self.ws = await websocket_connect(HTTPRequest(url, headers=headers))
        while True:
            msg = await self.ws.read_message()
            if msg is None:
                return
            self.messages += 1
            self.bytes += len(msg)
            message = json.loads(msg)
            state = apply_event(self.state, message) if self.diffs else message
            if state is None:
                raise RuntimeError("a diff that does not follow")
            self.state = state
            self.ready.set()
            self.changed.set()

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.ws.close)
        time.sleep(0.2)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def hold(port: int, headers: dict[str, str], req_id: int) -> threading.Thread:
    """A prompt-tier call that waits for a human (answered when the bridge stops)."""
    body = {
        "jsonrpc": "2.0",
        "id": req_id,
        "method": "tools/call",
        "params": {"name": "ls", "arguments": {}},
    }

    def run() -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=None)  # waits until the end
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        try:
            c.request("POST", "/", json.dumps(body), {**h, **headers})
            c.getresponse().read()
        except Exception:  # noqa: S110 - the bridge went away at the end: nothing to report
            pass
        finally:
            c.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


async def notify_times(approver: Approver, control: dict, port: int, headers: dict, n: int) -> list:
    """Time from a prompt-tier call leaving to the approver holding it, ``n`` times; each is
    approved and its end seen before the next."""
    client = AsyncHTTPClient(max_clients=4)
    auth = {"Authorization": f"Bearer {control['secret']}"}
    times = []
    for i in range(n):
        assert approver.state is not None
        before = {p["id"] for p in approver.state["pending"]}
        body = {
            "jsonrpc": "2.0",
            "id": 10_000 + i,
            "method": "tools/call",
            "params": {"name": "ls", "arguments": {}},
        }
        h = dict(headers, **{"Content-Type": "application/json"})
        approver.changed.clear()
        t0 = time.perf_counter()
        held = client.fetch(HTTPRequest(f"http://127.0.0.1:{port}/", "POST", h, json.dumps(body)))
        while True:
            await asyncio.wait_for(approver.changed.wait(), 10)
            approver.changed.clear()
            new = [p["id"] for p in approver.state["pending"] if p["id"] not in before]
            if new:
                break
        times.append(time.perf_counter() - t0)
        await client.fetch(
            HTTPRequest(
                f"{control['url']}api/pending/{new[0]}",
                "POST",
                auth,
                json.dumps({"decision": "approve"}),
            )
        )
        await asyncio.wait_for(held, 10)
        while any(p["id"] == new[0] for p in approver.state["pending"]):
            await asyncio.wait_for(approver.changed.wait(), 10)
            approver.changed.clear()
    return times


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] * 1000


def wakeups(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def start_bridge(work: str, name: str, config: dict) -> tuple[Server, dict[str, str]]:
    base = os.path.join(work, name)
    env = bench_env(base, config)
    port = free_port()
    argv = [sys.executable, "-m", "omp_a2a_bridge.server", "serve", "--port", str(port)]
    server = Server.start(name, argv, env, port)
    with open(os.path.join(base, "run", "control.json")) as f:
        control = json.load(f)
    return server, control


def scale_section(rounds: int = 3, duration: float = 5.0, calls: int = 200) -> list[str]:
    if shutil.which("wrk") is None:
        return ["(scale rows need wrk: sudo apt-get install wrk)"]
    seconds = max(1, round(duration))
    work = tempfile.mkdtemp(prefix="a2a-bench-scale-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    small = os.path.join(root, "small.txt")
    with open(small, "w") as f:
        f.write(
            "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(20))
        )
    config = {
        "roots": [root],
        "approval": {"timeout_s": 0, "tiers": {"read": "allow", "ls": "prompt"}},
    }
    auth = {"Authorization": f"Bearer {TOKEN}"}
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "read", "arguments": {"path": small}},
    }
    servers: list[Server] = []
    approvers: list[Approver] = []
    try:
        # Idle first, on a bridge that has just started and settled.
        plain, _ = start_bridge(work, "plain", config)
        servers.append(plain)
        time.sleep(3.0)
        w0, t0 = wakeups(plain.proc.pid), time.monotonic()
        time.sleep(10.0)
        idle_wakeups = (wakeups(plain.proc.pid) - w0) / (time.monotonic() - t0)
        idle_rss = plain.rss_mb()

        loaded, control = start_bridge(work, "loaded", config)
        servers.append(loaded)
        floor_port = free_port()
        floor = Server.start(
            "floor",
            [sys.executable, "-m", "bench.floor_server", str(floor_port)],
            {**os.environ},
            floor_port,
        )
        servers.append(floor)
        plain_sids = [open_session(plain.port, auth)["mcp-session-id"] for _ in range(64)]
        loaded_h = [open_session(loaded.port, auth) for _ in range(64)]
        loaded_sids = [h["mcp-session-id"] for h in loaded_h]
        approver = Approver(control)
        approvers.append(approver)
        holders = [hold(loaded.port, loaded_h[i], 100 + i) for i in range(32)]
        approver.run(_until(approver, lambda s: len(s["pending"]) == 32))

        runs: dict[str, list[dict[str, float]]] = {}
        traffic: list[tuple[int, int, float]] = []
        for _ in range(rounds):  # interleaved: drift hits every row alike
            runs.setdefault("none", []).append(
                wrk_rotating(plain.port, call, auth, plain_sids[:1], 8, seconds, plain.proc.pid)
            )
            runs.setdefault("64", []).append(
                wrk_rotating(plain.port, call, auth, plain_sids, 8, seconds, plain.proc.pid)
            )
            m0, b0, s0 = approver.messages, approver.bytes, time.monotonic()
            runs.setdefault("loaded", []).append(
                wrk_rotating(loaded.port, call, auth, loaded_sids, 8, seconds, loaded.proc.pid)
            )
            traffic.append((approver.messages - m0, approver.bytes - b0, time.monotonic() - s0))
            runs.setdefault("c64", []).append(
                wrk_rotating(plain.port, call, auth, plain_sids, 64, seconds, plain.proc.pid)
            )
            runs.setdefault("floor64", []).append(
                wrk_rotating(floor.port, call, {}, plain_sids, 64, seconds, floor.proc.pid)
            )
        med = {k: sorted(v, key=lambda r: r["rps"])[len(v) // 2] for k, v in runs.items()}
        messages = statistics.median(m / s for m, _, s in traffic)
        kbytes = statistics.median(b / s / 1024 for _, b, s in traffic)
        state = approver.state or {}
        snapshot_kb = len(json.dumps(state)) / 1024

        # "approver notified" with 31 waiting: release one of the 32 first.
        first = state["pending"][0]["id"]
        auth_c = {"Authorization": f"Bearer {control['secret']}"}
        approver.run(_decide(control, first, auth_c))
        approver.run(_until(approver, lambda s: len(s["pending"]) == 31))
        diff_times = approver.run(
            notify_times(approver, control, loaded.port, loaded_h[40], calls), timeout=600
        )
        full = Approver(control, diffs=False)
        approvers.append(full)
        full_times = full.run(
            notify_times(full, control, loaded.port, loaded_h[41], max(20, calls // 4)), timeout=600
        )
        held_left = sum(t.is_alive() for t in holders)
    finally:
        for a in approvers:
            a.close()
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)

    cpu = {k: statistics.median(r["cpu_us"] for r in v) for k, v in runs.items()}

    def row(label: str, key: str, target: str = "") -> list[str]:
        r = med[key]
        return [
            label,
            f"{r['rps']:.0f}",
            f"{r['rps'] / med['none']['rps']:.2f}x",
            f"{r['p99']:.2f}",
            f"{cpu[key]:.0f}",
            f"{cpu['none'] / cpu[key]:.2f}x",
            target,
        ]

    rows = [
        row("plain: 1 session, nothing waiting, no approver", "none"),
        row("64 sessions (calls spread over all), no approver", "64"),
        row("64 sessions + 32 waiting + an approver (diff form)", "loaded", ">= 0.9x"),
    ]
    c64, f64 = med["c64"], med["floor64"]
    return [
        f"## Scale (issue 26; wrk, 1 thread; median of {rounds} interleaved rounds of {seconds} s)",
        "",
        table(
            [
                "tools/call read, c=8",
                "req/s",
                "vs plain",
                "p99 ms",
                "server CPU µs/call",
                "plain CPU / this",
                "target",
            ],
            rows,
        ),
        "",
        f"The approver meanwhile: {messages:.1f} messages/s, {kbytes:.1f} KB/s "
        f"(its whole state: {snapshot_kb:.1f} KB); {held_left} of the 32 held calls still held.",
        "",
        table(
            ["c=64 over 64 sessions", "req/s", "p50 ms", "p99 ms", "CPU µs/call", "errors"],
            [
                [
                    "bridge",
                    f"{c64['rps']:.0f}",
                    f"{c64['p50']:.2f}",
                    f"{c64['p99']:.2f}",
                    f"{cpu['c64']:.0f}",
                    str(c64["errors"]),
                ],
                [
                    "floor",
                    f"{f64['rps']:.0f}",
                    f"{f64['p50']:.2f}",
                    f"{f64['p99']:.2f}",
                    f"{cpu['floor64']:.0f}",
                    str(f64["errors"]),
                ],
                ["bridge / floor", f"{c64['rps'] / f64['rps']:.2f}x", "", "", "", ""],
            ],
        ),
        "",
        table(
            ["measure", "value", "target"],
            [
                [
                    f"approver notified, 31 waiting, diff form, p50 / p99 ({len(diff_times)})",
                    f"{pct(diff_times, 50):.2f} / {pct(diff_times, 99):.2f} ms",
                    "p99 <= 5 ms",
                ],
                [
                    f"the same, full form, p50 / p99 ({len(full_times)})",
                    f"{pct(full_times, 50):.2f} / {pct(full_times, 99):.2f} ms",
                    "",
                ],
                ["idle wake-ups (all threads, 10 s)", f"{idle_wakeups:.1f} /s", "<= 1 /s"],
                ["idle RSS", f"{idle_rss:.1f} MB", "< 60 MB"],
            ],
        ),
        "",
        *publication_cost(),
    ]


async def _until(approver: Approver, predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while approver.state is None or not predicate(approver.state):
        approver.changed.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError("the approver did not see the expected state")
        await asyncio.wait_for(approver.changed.wait(), left)


async def _decide(control: dict, call_id: str, auth: dict[str, str]) -> None:
    await AsyncHTTPClient().fetch(
        HTTPRequest(
            f"{control['url']}api/pending/{call_id}",
            "POST",
            auth,
            json.dumps({"decision": "approve"}),
        )
    )


if __name__ == "__main__":
    print("\n".join(scale_section()))


def publication_cost(repeat: int = 300) -> list[str]:
    """CPU per publication with 64 sessions and 32 waiting calls, one session changed each
    time: the old way (every socket renders and serialises the whole snapshot) against the
    feed (one state from the memo, one diff, one text for every diff socket)."""
    from dataclasses import replace

    from omp_a2a_bridge.server.control.feed import EventFeed
    from omp_a2a_bridge.server.present.views import snapshot_json
    from omp_a2a_bridge.server.types import PendingCall, SessionView, Snapshot

    # The broker keeps each waiting call's record: the same objects in every snapshot.
    pending = tuple(
        PendingCall(
            f"call-{i}",
            f"{i:032x}",
            f"client-{i}",
            "write",
            {"path": f"/home/u/p/f{i}.txt", "content": "x" * 2000},
            f"write: /home/u/p/f{i}.txt",
            1e9 + i,
            deadline=1e9 + 55 + i,
        )
        for i in range(32)
    )

    def snap(calls: list[int]) -> Snapshot:
        sessions = tuple(
            SessionView(f"{i:032x}", f"client-{i}", "1.0", 1e9 + i, 1e9 + n, n, 0)
            for i, n in enumerate(calls)
        )
        return Snapshot(
            0,
            "http://127.0.0.1:1/",
            "",
            "127.0.0.1",
            1,
            False,
            True,
            sessions,
            pending,
            ("page",),
            "keyring",
            (),
            sum(calls),
        )

    calls = [0] * 64
    snaps = []
    for k in range(repeat):
        calls[k % 64] += 1
        snaps.append(snap(list(calls)))

    class Api:
        def subscribe(self, cb: Any) -> Any:
            self.cb = cb
            return lambda: None

    api = Api()
    feed = EventFeed(api)  # type: ignore[arg-type]
    sent: list[int] = []
    feed.add(lambda text: sent.append(len(text)), True)
    api.cb(snaps[0])
    t0 = time.process_time()
    for s in snaps:
        api.cb(s)
    feed_us = (time.process_time() - t0) / repeat * 1e6
    t0 = time.process_time()
    for s in snaps[:100]:
        old_len = len(json.dumps(snapshot_json(s)))
    old_us = (time.process_time() - t0) / 100 * 1e6
    # A call arrives with 31 waiting (and leaves again), the rest unchanged.
    base = snaps[-1]
    arriving = PendingCall(
        "call-new", f"{5:032x}", "client-5", "bash", {"command": "make test"}, "bash: make", 2e9
    )
    fewer = replace(base, pending=base.pending[:31])
    more = replace(base, pending=(*base.pending[:31], arriving))
    t0 = time.process_time()
    for _ in range(200):
        api.cb(more)
        api.cb(fewer)
    arrive_us = (time.process_time() - t0) / 400 * 1e6
    return [
        "Per publication, 64 sessions + 32 waiting, one session changed (CPU, in process): "
        f"whole snapshot rendered and serialised {old_us:.0f} µs ({old_len / 1024:.1f} KB) per "
        f"socket; the feed {feed_us:.0f} µs for all diff sockets together "
        f"({statistics.median(sent[1:]) / 1024:.2f} KB). A call arriving or leaving with 31 "
        f"waiting: {arrive_us:.0f} µs in the feed."
    ]
