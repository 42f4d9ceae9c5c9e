"""``python -m bench --only machines``: what one identity per machine costs per request.

The token check of every MCP request: one SHA-256 of the presented token, one dict lookup, one
constant-time compare (``server/machines/identity.py``). Measured two ways, with 1 and with 100
machines: the check alone (ns per call; the default token, the last machine added, a wrong
token), and ``ping`` over HTTP against a ``serve`` process (wrk, concurrency 8), authenticated
with the last machine's token. The cost must not grow with the number of machines.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import timeit
from collections.abc import Callable
from functools import partial
from typing import Any

from omp_a2a_bridge.server.infra.tokens import generate_token
from omp_a2a_bridge.server.machines.identity import MachineIndex, MachineRecord, digest

SIZES = (1, 100)


def _records(n: int) -> tuple[list[MachineRecord], list[str]]:
    tokens = [generate_token() for _ in range(n)]
    return [MachineRecord(f"m{i}", 0.0, digest(t).hex()) for i, t in enumerate(tokens)], tokens


def _ns(fn: Callable[[], object], number: int = 100_000, repeat: int = 5) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def check_rows() -> list[list[str]]:
    main = generate_token()
    rows = []
    for n in SIZES:
        records, tokens = _records(n)
        index = MachineIndex(records)
        last, wrong = tokens[-1], generate_token()
        assert index.identify(last, main) == f"m{n - 1}"
        rows.append(
            [
                f"token check, {n} machine(s)",
                f"{_ns(partial(index.identify, main, main)):.0f}",
                f"{_ns(partial(index.identify, last, main)):.0f}",
                f"{_ns(partial(index.identify, wrong, main)):.0f}",
            ]
        )
    return rows


def http_rows(h: Any, duration: float, rounds: int) -> list[list[str]]:
    """``ping`` req/s and p50 against a bridge with 1, then 100 machines (interleaved);
    ``h``: the bench's own module (``Server``, ``free_port``, ``open_session``, ``wrk``)."""
    py = sys.executable
    main_token = "bench-token-" + "x" * 40
    results: dict[int, list[dict]] = {n: [] for n in SIZES}
    servers: dict[int, tuple[Any, dict[str, str]]] = {}
    try:
        for n in SIZES:
            work = tempfile.mkdtemp(prefix=f"a2a-bench-machines-{n}-")
            records, tokens = _records(n)
            config = {"machines": {r.name: r.to_json() for r in records}}
            env = h.bench_env(work, config, main_token)
            port = h.free_port()
            argv = [py, "-m", "omp_a2a_bridge.server", "serve", "--port", str(port)]
            server = h.Server.start(f"bridge-{n}", argv, env, port)
            servers[n] = (server, h.open_session(port, {"Authorization": f"Bearer {tokens[-1]}"}))
        # Both bridges run side by side and the rounds interleave, so machine noise (a shared
        # 2-core box) hits both alike.
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        for _ in range(rounds):
            for n in SIZES:
                server, headers = servers[n]
                results[n].append(h.wrk(server.port, ping, headers, 8, duration))
    finally:
        for server, _ in servers.values():
            server.stop()
    rows = []
    for n in SIZES:
        rps = statistics.median(r["rps"] for r in results[n])
        p50 = statistics.median(r["p50"] for r in results[n])
        rows.append([f"ping over HTTP, {n} machine(s), c=8", f"{rps:,.0f}", f"{p50:.2f}"])
    return rows


def section(h: Any, duration: float = 3.0, rounds: int = 3) -> list[str]:
    """The two tables; ``h``: the bench's own module (its helpers and ``table``)."""
    table = h.table
    out = ["## Machines: the per-request token check", ""]
    out.append(
        table(
            ["check (ns per request, best of 5)", "default token", "last machine", "wrong token"],
            check_rows(),
        )
    )
    out += ["", table(["request", "req/s (median)", "p50 ms"], http_rows(h, duration, rounds))]
    return out
