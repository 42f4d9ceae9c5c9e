"""The walking tools beside the tools a user would pick instead: ``python -m bench --only peers``.

Rows: ``ls`` of a 1,000-entry folder at concurrency 1 and 8 against
``@modelcontextprotocol/server-filesystem`` and Desktop Commander (both from npm, started
offline over stdio), and ``find *.py`` of a 10,000-file tree against ``fd``. All three servers
are driven by the same official MCP SDK client (``mcp.Client``, the 2025-11-25 handshake); the
server's CPU per call is read from ``/proc/<pid>/stat`` (user + system, its reaped children
included: the bridge's ``rg``) beside the wall time. Rounds are interleaved so that the load of
the shared machine hits every contender alike; the medians are reported.

The peers are installed once into ``A2A_BENCH_PEERS`` (default ``~/.cache/a2a-bench-peers``)
with ``npm install --ignore-scripts`` (Desktop Commander's install script would download a
browser); a peer that is missing (no npm, no registry) is left out, and the table says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .tools import FILES, _table, children_cpu_s, make_tree, process_cpu_s

PEERS_DIR = os.environ.get("A2A_BENCH_PEERS") or os.path.expanduser("~/.cache/a2a-bench-peers")
PACKAGES = {
    "server-filesystem": (
        "@modelcontextprotocol/server-filesystem@2026.8.31",
        "@modelcontextprotocol/server-filesystem/dist/index.js",
    ),
    "desktop-commander": (
        "@wonderwhy-er/desktop-commander@0.2.52",
        "@wonderwhy-er/desktop-commander/dist/index.js",
    ),
}
NPM_INSTALL = ("npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", ".")
LS_ENTRIES = 1000
LS_CALLS = 60  # per round, c=1
CONC = 8
CONC_CALLS = 10  # per worker per round, c=8
FIND_CALLS = 10  # per round


def ensure_peers() -> dict[str, str]:
    """Entry scripts of the installed peers (installing them once when npm is there)."""
    found = {k: os.path.join(PEERS_DIR, "node_modules", js) for k, (_, js) in PACKAGES.items()}
    missing = [k for k, p in found.items() if not os.path.exists(p)]
    if missing and shutil.which("npm") and shutil.which("node"):
        os.makedirs(PEERS_DIR, exist_ok=True)
        specs = [PACKAGES[k][0] for k in missing]
        env = dict(os.environ, PUPPETEER_SKIP_DOWNLOAD="1")
        subprocess.run(
            [*NPM_INSTALL, *specs],
            cwd=PEERS_DIR,
            env=env,
            capture_output=True,
            timeout=600,
            check=False,
        )
    return {k: p for k, p in found.items() if os.path.exists(p)}


def make_folder(root: str, entries: int = LS_ENTRIES) -> str:
    """A folder of ``entries`` entries: nine files of varied sizes to one sub-folder."""
    d = os.path.join(root, "wide")
    os.makedirs(d)
    for i in range(entries):
        if i % 10 == 0:
            os.mkdir(os.path.join(d, f"dir_{i:04d}"))
        else:
            with open(os.path.join(d, f"file_{i:04d}.txt"), "w") as f:
                f.write("x" * (i * 7 % 5000))
    return d


def child_pid(needle: str) -> int | None:
    """The pid of our child process whose command line holds ``needle`` (a stdio server)."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == me and needle.encode() in cmd:
            return int(pid)
    return None


@dataclass
class Contender:
    """One server behind an SDK client: how to call its ``ls`` and where its CPU shows."""

    name: str
    client: Any
    pid: int
    ls: tuple[str, dict[str, Any]]

    async def call(self, tool: str, args: dict[str, Any]) -> str:
        res = await self.client.call_tool(tool, args)
        text = "".join(getattr(c, "text", "") for c in res.content)
        if res.is_error:
            raise RuntimeError(f"{self.name} {tool}: {text[:200]}")
        return text

    def cpu(self) -> float:
        return process_cpu_s(self.pid)


async def _timed(c: Contender, calls: int, conc: int) -> tuple[float, float, list[float]]:
    """(calls/s, CPU ms per call, per-call wall ms) of ``calls`` ls calls by ``conc`` workers."""
    tool, args = c.ls
    walls: list[float] = []

    async def worker(n: int) -> None:
        for _ in range(n):
            t0 = time.perf_counter()
            await c.call(tool, args)
            walls.append((time.perf_counter() - t0) * 1000)

    cpu0, t0 = c.cpu(), time.perf_counter()
    await asyncio.gather(*(worker(calls // conc) for _ in range(conc)))
    elapsed = time.perf_counter() - t0
    done = calls // conc * conc
    return done / elapsed, (c.cpu() - cpu0) * 1000 / done, walls


async def _ls_rows(contenders: list[Contender], rounds: int) -> list[list[str]]:
    per: dict[tuple[str, int], list[tuple[float, float, list[float]]]] = {}
    for c in contenders:  # warm up (and check every server lists the folder)
        out = await c.call(*c.ls)
        assert out.count("\n") >= LS_ENTRIES // 2, (c.name, out[:200])
    for _ in range(rounds):
        for conc, calls in ((1, LS_CALLS), (CONC, CONC * CONC_CALLS)):
            for c in contenders:
                per.setdefault((c.name, conc), []).append(await _timed(c, calls, conc))
    rows = []
    base = {conc: statistics.median(r[1] for r in per[("bridge", conc)]) for conc in (1, CONC)}
    for c in contenders:
        for conc in (1, CONC):
            rs = per[(c.name, conc)]
            cps = statistics.median(r[0] for r in rs)
            cpu = statistics.median(r[1] for r in rs)
            p50 = statistics.median(statistics.median(r[2]) for r in rs)
            rows.append(
                [
                    f"ls {LS_ENTRIES} entries",
                    c.name,
                    str(conc),
                    f"{p50:.2f}",
                    f"{cps:.0f}",
                    f"{cpu:.2f}",
                    f"{base[conc] / cpu:.2f}x" if c.name != "bridge" else "1.00x",
                ]
            )
    return rows


async def _small_rows(contenders: list[Contender], small: str, rounds: int) -> list[list[str]]:
    """``ls`` of a 3-entry folder at c=1: each server's fixed cost per call (protocol,
    dispatch, audit), which the 1,000-entry rows include."""
    per: dict[str, list[tuple[float, float, list[float]]]] = {}
    smalls = [
        Contender(c.name, c.client, c.pid, (c.ls[0], {**c.ls[1], "path": small}))
        for c in contenders
    ]
    for _ in range(rounds):
        for c in smalls:
            per.setdefault(c.name, []).append(await _timed(c, LS_CALLS, 1))
    base = statistics.median(r[1] for r in per["bridge"])
    rows = []
    for c in smalls:
        rs = per[c.name]
        cpu = statistics.median(r[1] for r in rs)
        p50 = statistics.median(statistics.median(r[2]) for r in rs)
        ratio = f"{base / cpu:.2f}x" if c.name != "bridge" else "1.00x"
        cps = statistics.median(r[0] for r in rs)
        rows.append(["ls 3 entries", c.name, "1", f"{p50:.2f}", f"{cps:.0f}", f"{cpu:.2f}", ratio])
    return rows


def _fd_run(fd: str, tree: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run([fd, "-g", "*.py", "."], cwd=tree, stdout=subprocess.PIPE, check=False)

    return run


async def _find_rows(bridge: Contender, tree: str, rounds: int) -> list[list[str]]:
    fd = shutil.which("fdfind") or shutil.which("fd")
    args = {"pattern": "*.py", "path": tree}
    ours = await bridge.call("find", args)
    assert ours.startswith("pkg00/"), ours[:200]
    wall: dict[str, list[float]] = {"bridge": [], "fd": []}
    cpu: dict[str, list[float]] = {"bridge": [], "fd": []}
    fd_run = _fd_run(fd, tree) if fd else None
    for _ in range(rounds):
        for _ in range(FIND_CALLS):
            c0, t0 = bridge.cpu(), time.perf_counter()
            await bridge.call("find", args)
            wall["bridge"].append((time.perf_counter() - t0) * 1000)
            cpu["bridge"].append((bridge.cpu() - c0) * 1000)
            if fd_run is not None:
                c0, t0 = children_cpu_s(), time.perf_counter()
                fd_run()
                wall["fd"].append((time.perf_counter() - t0) * 1000)
                cpu["fd"].append((children_cpu_s() - c0) * 1000)
    rows = []
    ours_cpu = statistics.fmean(cpu["bridge"])
    for name in ("bridge", "fd"):
        if not wall[name]:
            rows.append([f"find *.py, {FILES} files", name, "1", "-", "-", "-", "not installed"])
            continue
        mean_cpu = statistics.fmean(cpu[name])
        rows.append(
            [
                f"find *.py, {FILES} files",
                name,
                "1",
                f"{statistics.median(wall[name]):.2f}",
                f"{1000 / statistics.median(wall[name]):.0f}",
                f"{mean_cpu:.2f}",
                f"{ours_cpu / mean_cpu:.2f}x" if name != "bridge" else "1.00x",
            ]
        )
    return rows


async def _with_clients(
    bridge_url: str, bridge_pid: int, token: str, folder: str, peers: dict[str, str], body: Any
) -> Any:
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    home = tempfile.mkdtemp(prefix="a2a-bench-peer-home-")  # Desktop Commander's config
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0)
    )
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(http)
            b = await stack.enter_async_context(
                Client(streamable_http_client(bridge_url, http_client=http))
            )
            contenders = [Contender("bridge", b, bridge_pid, ("ls", {"path": folder}))]
            for name, script in peers.items():
                fs = name == "server-filesystem"
                args = [script, os.path.dirname(folder)] if fs else [script]
                params = StdioServerParameters(
                    command=shutil.which("node") or "node",
                    args=args,
                    env={"HOME": home, "PATH": os.environ.get("PATH", "")},
                    cwd=home,
                )
                client = await stack.enter_async_context(Client(params))
                pid = child_pid(script)
                if pid is None:
                    continue
                ls_args: dict[str, Any] = {"path": folder}
                if name == "desktop-commander":
                    ls_args["depth"] = 1  # its default lists two levels
                contenders.append(Contender(name, client, pid, ("list_directory", ls_args)))
                if fs:  # its listing with sizes stats every entry, as the bridge's ls does
                    sized = ("list_directory_with_sizes", ls_args)
                    contenders.append(Contender(f"{name} (sizes)", client, pid, sized))
            return await body(contenders)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_peer_rows(
    port: int, server_pid: int, token: str, root: str, rounds: int, peers: dict[str, str]
) -> list[str]:
    folder = make_folder(root)
    small = os.path.join(folder, "dir_0000")
    for name in ("a.txt", "b.txt", "c"):
        with open(os.path.join(small, name), "w") as f:
            f.write(name)
    tree = make_tree(root)
    load0 = os.getloadavg()

    async def body(contenders: list[Contender]) -> list[list[str]]:
        rows = await _ls_rows(contenders, rounds)
        rows += await _small_rows(contenders, small, rounds)
        return rows + await _find_rows(contenders[0], tree, rounds)

    rows = asyncio.run(
        _with_clients(f"http://127.0.0.1:{port}/", server_pid, token, folder, peers, body)
    )
    load1 = os.getloadavg()
    absent = [k for k in PACKAGES if k not in peers]
    left_out = f" Not installed, left out: {', '.join(absent)}." if absent else ""
    return [
        f"## Walkers beside the peers (SDK client for all; median of {rounds} interleaved rounds)",
        "",
        f"Load average (1 min) {load0[0]:.1f} at the start, {load1[0]:.1f} at the end, on "
        f"{os.cpu_count()} cores.{left_out}",
        "",
        _table(
            ["work", "server", "conc", "p50 ms", "calls/s", "CPU ms/call", "bridge CPU / it"],
            rows,
        ),
        "",
        "CPU: user+sys of the server process from /proc (its reaped children included: the "
        "bridge's rg); fd's from the rusage of the reaped fd. The peers list names only "
        "(server-filesystem's `list_directory`, Desktop Commander's `list_directory` at depth "
        "1); server-filesystem's `list_directory_with_sizes` and the bridge's `ls` also stat "
        "each entry (the bridge: each file, for its size and its link count).",
    ]


def peers_section(base_env: dict[str, str], token: str, start: Any, rounds: int) -> list[str]:
    """Start a bridge with the walking tools at allow tier and run the peer rows."""
    from bench.__main__ import bench_env

    peers = ensure_peers()
    work = tempfile.mkdtemp(prefix="a2a-bench-peers-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    config = {"roots": [root], "approval": {"tiers": {"ls": "allow", "find": "allow"}}}
    server = start(bench_env(work, config, token, base_env))
    try:
        return run_peer_rows(server.port, server.proc.pid, token, root, rounds, peers)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
