"""Tool rows for ``python -m bench``: the bridge's grep/find/read/ls next to the native programs.

Everything runs side by side in one run against one ``a2a-bridge serve``: the same generated
source tree, the same patterns, timed end to end from the client (HTTP included for the
bridge, process start included for the native programs). Each figure is the median of a few
repetitions; the ratios are bridge / native.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

FILES = 10_000
REPEAT = 15


def make_tree(root: str, files: int = FILES) -> str:
    """A ~10k-file Python-like source tree (deterministic), in ``root/src``."""
    rng = random.Random(7)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "theta",
        "lambda",
        "sigma",
        "omega",
    ]
    tree = os.path.join(root, "src")
    per_dir = 50
    for i in range(files):
        d = os.path.join(tree, f"pkg{i // 1000:02d}", f"mod{(i // per_dir) % 20:02d}")
        if i % per_dir == 0:
            os.makedirs(d, exist_ok=True)
        lines = [f'"""Module {i}: {" ".join(rng.choices(words, k=6))}."""', "", "import os", ""]
        for j in range(12):
            name = f"{rng.choice(words)}_{rng.randrange(1000)}"
            lines += [
                f"def {name}(value, count={j}):",
                f"    # {' '.join(rng.choices(words, k=5))}",
                f"    return value * count + {rng.randrange(100)}",
                "",
            ]
        if i % 97 == 0:
            lines.append("# FIXME: quick_brown_fox needs a second look")
        with open(os.path.join(d, f"file_{i}.py"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return tree


class Client:
    """One MCP session; each call on a fresh connection (threads may share it)."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.port = port
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        }
        self._id = 0
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            self._id += 1
            return self._id

    def rpc(self, method: str, params: Any = None, req_id: int | None = None) -> dict:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        if req_id is not None or method != "notifications/cancelled":
            body["id"] = req_id if req_id is not None else self.next_id()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            c.request("POST", "/", json.dumps(body), self.headers)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        return json.loads(data) if data else {}

    def call(self, name: str, args: dict[str, Any], req_id: int | None = None) -> str:
        out = self.rpc("tools/call", {"name": name, "arguments": args}, req_id)
        if "result" not in out:
            return json.dumps(out)
        res = out["result"]
        if res.get("isError"):
            raise RuntimeError(f"{name} {args}: {res['content'][0]['text'][:200]}")
        return res["content"][0]["text"]

    def cancel(self, req_id: int) -> None:
        self.rpc("notifications/cancelled", {"requestId": req_id})


def compare(
    fns: dict[str, Callable[[], Any] | None],
    repeat: int = REPEAT,
    cpu: dict[str, Callable[[], float]] | None = None,
) -> dict[str, Any]:
    """Median wall time in ms of each function, run round-robin so that the load of a shared
    machine hits every contender alike (one warm-up round first). ``ratios`` holds, for each
    contender, the median over rounds of (first contender / it): a per-round ratio cancels
    most of the drift of a busy machine.

    ``cpu`` gives, per contender, a cumulative CPU-seconds counter read around each call;
    ``cpu_ms`` is then the mean CPU per call. CPU time hardly moves with the machine's load
    (what other processes do takes wall time from a call, not CPU), so it says where a gap
    comes from when the wall times are noisy."""
    live = {k: f for k, f in fns.items() if f is not None}
    times: dict[str, list[float]] = {k: [] for k in live}
    cpu_s: dict[str, float] = {k: 0.0 for k in live}
    counters = cpu or {}
    for i in range(repeat + 1):
        for k, f in live.items():
            counter = counters.get(k)
            c0 = counter() if counter else 0.0
            t0 = time.perf_counter()
            f()
            if i:
                times[k].append((time.perf_counter() - t0) * 1000)
                if counter:
                    cpu_s[k] += counter() - c0
    out: dict[str, Any] = {k: (statistics.median(times[k]) if k in times else None) for k in fns}
    first = next(iter(live))
    out["ratios"] = {
        k: statistics.median(a / b for a, b in zip(times[first], times[k], strict=True))
        for k in live
    }
    out["cpu_ms"] = {k: cpu_s[k] * 1000 / repeat for k in live if k in counters}
    return out


def children_cpu_s() -> float:
    """CPU seconds of this process's reaped children (the native programs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def process_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its reaped children (the bridge and its ``rg`` runs), from
    /proc (clock ticks: 10 ms steps, so only sums over many calls are meaningful)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def native(argv: list[str], cwd: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    return run


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def rss_kb(pid: int, field: str = "VmHWM") -> int:
    """Peak (VmHWM, default) or current (VmRSS) resident size of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _rg() -> str:
    from omp_a2a_bridge.server.tools.rg import rg_path

    return rg_path() or "rg"


def run_tool_rows(port: int, headers: dict[str, str], root: str, server_pid: int) -> list[str]:
    """All tool rows; returns markdown lines."""
    cl = Client(port, headers)
    t0 = time.perf_counter()
    tree = make_tree(root)
    made = time.perf_counter() - t0
    rg = _rg()
    rows: list[list[str]] = []

    def row(what: str, m: dict[str, Any], others: list[str]) -> None:
        cells = [what, f"{m['ours']:.1f}"]
        for name in others:
            v = m.get(name)
            r = m["ratios"].get(name)
            cells += ["-" if v is None else f"{v:.1f}", "-" if r is None else f"{r:.2f}x"]
        c = m["cpu_ms"]
        if "ours" in c and others[0] in c:
            ratio = c["ours"] / c[others[0]] if c[others[0]] else float("nan")
            cells.append(f"{c['ours']:.1f} / {c[others[0]]:.1f} ({ratio:.2f}x)")
        else:
            cells.append("-")
        rows.append(cells)

    def cpu(*natives: str) -> dict[str, Callable[[], float]]:
        return {"ours": lambda: process_cpu_s(server_pid), **dict.fromkeys(natives, children_cpu_s)}

    grep_rn = shutil.which("grep")
    for label, pattern, rg_args, grep_args in (
        ("grep literal", "quick_brown_fox", ["-F"], ["-F"]),
        ("grep regex", r"def (alpha|omega)_9\d\d\(", [], ["-E"]),
    ):
        gpat = pattern.replace(r"\d", "[0-9]")
        m = compare(
            {
                "ours": lambda p=pattern: cl.call("grep", {"pattern": p, "path": tree}),
                "rg": native([rg, "-n", *rg_args, pattern, "."], tree),
                "grep": native([grep_rn, "-rn", *grep_args, gpat, "."], tree) if grep_rn else None,
            },
            REPEAT,
            cpu("rg", "grep"),
        )
        row(label, m, ["rg", "grep"])

    fd = shutil.which("fdfind") or shutil.which("fd")
    find = shutil.which("find")
    m = compare(
        {
            "ours": lambda: cl.call("find", {"pattern": "*.py", "path": tree}),
            "fd": native([fd, "-g", "*.py", "."], tree) if fd else None,
            "find": native([find, ".", "-name", "*.py"], tree) if find else None,
        },
        REPEAT,
        cpu("fd", "find"),
    )
    row("find *.py", m, ["fd", "find"])

    # read at a deep offset vs sed
    deep = os.path.join(root, "deep.txt")
    with open(deep, "w") as f:
        for i in range(1_000_000):
            f.write(f"line {i} lorem ipsum dolor sit amet\n")
    # grep on one file: rg reads the descriptor the bridge opened and judged (its stdin)
    single = r"line 99999\d "
    m = compare(
        {
            "ours": lambda: cl.call("grep", {"pattern": single, "path": deep}),
            "rg": native([rg, "-n", single, deep], root),
            "grep": native([grep_rn, "-n", "line 99999[0-9] ", deep], root) if grep_rn else None,
        },
        REPEAT,
        cpu("rg", "grep"),
    )
    row("grep one 1M-line file", m, ["rg", "grep"])

    m = compare(
        {
            "ours": lambda: cl.call("read", {"path": deep, "offset": 900_000, "limit": 10}),
            "sed": native(["sed", "-n", "900000,900009p;900010q", deep], root),
        }
    )
    row("read offset 900k of 1M lines", m, ["sed", "-"])

    # one-line 100 MB file
    one = os.path.join(root, "oneline.txt")
    with open(one, "wb") as f:
        block = b"x" * (1 << 20)
        for _ in range(100):
            f.write(block)
    before = rss_kb(server_pid)
    m = compare(
        {
            "ours": lambda: cl.call("read", {"path": one}),
            "head": native(["head", "-c", "2000", one], root),
        },
        3,
    )
    grown = (rss_kb(server_pid) - before) / 1024
    row("read one-line 100 MB file", m, ["head", "-"])
    os.unlink(one)

    lat = _latency_under_load(cl, tree, root)
    out = [
        f"## Tools (median ms of {REPEAT} interleaved runs, end to end; bridge over HTTP, "
        "native incl. process start; ratio = median of per-run bridge/native)",
        "",
        f"Tree: {FILES} generated Python files ({made:.1f} s to create). Load average at the "
        f"end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1/5/15 min) on "
        f"{os.cpu_count()} cores.",
        "",
        _table(
            [
                "what",
                "bridge ms",
                "native 1 ms",
                "ratio",
                "native 2 ms",
                "ratio",
                "CPU ms/call: bridge+rg / native 1",
            ],
            rows,
        ),
        "",
        "native 1 / 2: rg / grep -rn for grep, fd / find for find, sed or head for read. "
        "CPU: user+sys of the bridge process and its reaped rg runs (/proc, clock ticks) vs "
        "of the native process; it hardly moves with the machine's load.",
        f"Bridge peak RSS growth (VmHWM) over the 100 MB one-line reads: {grown:.1f} MB.",
        "",
        "## Latency under load",
        "",
        _table(
            ["measure", "p50 ms", "p99 ms", "target"],
            [
                [
                    "ping, 4 greps + a pathological regex running",
                    f"{lat['ping_p50']:.2f}",
                    f"{lat['ping_p99']:.2f}",
                    "p99 < 20 ms",
                ],
                [
                    "ls of a 3-entry dir, 8 long greps running",
                    f"{lat['ls_p50']:.2f}",
                    f"{lat['ls_p99']:.2f}",
                    "< 50 ms",
                ],
            ],
        ),
    ]
    return out


def _latency_under_load(cl: Client, tree: str, root: str) -> dict[str, float]:
    """ping while 4 greps loop over the tree and one pathological regex runs; then ls of a
    small dir while 8 greps that never finish (a huge sparse file) hold the search pool."""
    under = os.path.join(root, "underline.md")
    with open(under, "w") as f:
        f.write("Title\n" + "=" * 2_000_000 + "\n")
    stop = threading.Event()

    def loop_grep(pattern: str, path: str) -> None:
        while not stop.is_set():
            cl.call("grep", {"pattern": pattern, "path": path})

    threads = [
        threading.Thread(target=loop_grep, args=(p, tree), daemon=True)
        for p in ("return value", r"def \w+_\d+", "import os", "lambda|sigma")
    ]
    threads.append(threading.Thread(target=loop_grep, args=("(=+)+$x", under), daemon=True))
    for t in threads:
        t.start()
    time.sleep(0.5)
    pings = []
    for _ in range(400):
        t0 = time.perf_counter()
        cl.rpc("ping")
        pings.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.005)
    stop.set()
    for t in threads:
        t.join(60)

    small = os.path.join(root, "small")
    os.makedirs(small, exist_ok=True)
    for n in ("a", "b", "c"):
        open(os.path.join(small, n), "w").close()
    huge = os.path.join(root, "huge.bin")
    with open(huge, "wb") as f:
        f.truncate(1 << 40)
    ids = [cl.next_id() for _ in range(8)]
    holders = [
        threading.Thread(
            target=lambda i=i: cl.rpc(
                "tools/call", {"name": "grep", "arguments": {"pattern": "zz", "path": huge}}, i
            ),
            daemon=True,
        )
        for i in ids
    ]
    for t in holders:
        t.start()
    time.sleep(1.0)
    ls = []
    for _ in range(200):
        t0 = time.perf_counter()
        cl.call("ls", {"path": small})
        ls.append((time.perf_counter() - t0) * 1000)
    for i in ids:
        cl.cancel(i)
    for t in holders:
        t.join(30)
    os.unlink(huge)
    return {
        "ping_p50": pct(pings, 50),
        "ping_p99": pct(pings, 99),
        "ls_p50": pct(ls, 50),
        "ls_p99": pct(ls, 99),
    }


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([fmt(header), sep, *(fmt(r) for r in rows)])


def tools_section(py: str, base_env: dict[str, str], token: str, start: Any) -> list[str]:
    """Start a bridge with every tool at allow tier on a fresh root and run the tool rows."""
    import tempfile

    work = tempfile.mkdtemp(prefix="a2a-bench-tools-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    from bench.__main__ import bench_env

    tiers = {t: "allow" for t in ("read", "ls", "find", "grep")}
    config = {"roots": [root], "approval": {"tiers": tiers}}
    server = start(bench_env(work, config, token, base_env, log=True))
    try:
        from bench.__main__ import open_session

        headers = open_session(server.port, {"Authorization": f"Bearer {token}"})
        return run_tool_rows(server.port, headers, root, server.proc.pid)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
