"""``python -m bench.box``: what the box costs per bash call, beside a bare ``bash -c true``.

Three medians over ``--runs`` runs: ``bash -c true``; planning the box (looking at the disk
and rendering the bwrap argv: ``server.box.run.prepare``) for a project; and running
``bash -c true`` in that box. The README's "The box" section quotes these.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable

from omp_a2a_bridge.server.box import probe
from omp_a2a_bridge.server.box.policy import BoxConfig
from omp_a2a_bridge.server.box.run import BoxRequest, prepare


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.box")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--project", default=os.getcwd(), help="the call's cwd (default: here)")
    args = ap.parse_args()
    status = probe.probe()
    if not status.available:
        print(f"no box here: {status.detail}")
        return 1
    request = BoxRequest(BoxConfig(), (os.path.expanduser("~"), args.project), ())
    argv = ["bash", "-c", "true"]
    boxed = list(prepare(request, args.project, argv).argv)
    rows = [
        ("bash -c true", _median_ms(lambda: subprocess.run(argv, check=True), args.runs)),
        ("plan the box", _median_ms(lambda: prepare(request, args.project, argv), args.runs)),
        ("bwrap + bash -c true", _median_ms(lambda: subprocess.run(boxed, check=True), args.runs)),
    ]
    print(f"| what ({status.detail}) | median ms |\n|---|---|")
    for name, ms in rows:
        print(f"| {name} | {ms:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
