"""What the box costs per bash call, beside a bare ``bash -c true``, and what it saves.

Three medians over ``--runs`` runs: ``bash -c true``; planning the box (looking at the disk
and rendering the bwrap argv: ``server.box.run.prepare``) for a project; and running
``bash -c true`` in that box. Then the prompts the box avoids: the 60-call session of
``bench/session.py`` judged by the one judge under the default config, with bash at its old
default (``prompt``) and at its new one (``box``). ``python -m bench`` prints this section;
``python -m bench.box`` prints it alone. ``docs/design/performance.md`` keeps the table.
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


def cost_rows(project: str, runs: int) -> list[str]:
    """The box's start cost per call, as markdown lines."""
    status = probe.probe()
    if not status.available:
        return [f"No box here: {status.detail}"]
    request = BoxRequest(BoxConfig(), (os.path.expanduser("~"), project), ())
    argv = ["bash", "-c", "true"]
    boxed = list(prepare(request, project, argv).argv)
    bare = _median_ms(lambda: subprocess.run(argv, check=True), runs)
    plan = _median_ms(lambda: prepare(request, project, argv), runs)
    run = _median_ms(lambda: subprocess.run(boxed, check=True), runs)
    return [
        f"| what ({status.detail}; median of {runs}) | ms | vs `bash -c true` |",
        "|---|---|---|",
        f"| `bash -c true` | {bare:.1f} | 1.0x |",
        f"| plan the box (disk look + argv, in a worker) | {plan:.1f} | |",
        f"| bwrap + `bash -c true` | {run:.1f} | {run / bare:.1f}x |",
        f"| a boxed call's added start cost (plan + bwrap) | {plan + run - bare:.1f} | |",
    ]


def prompts_rows(project: str) -> list[str]:
    """How many calls of the replayed session ask a human, before the box and with it."""
    import tempfile

    from omp_a2a_bridge.server.core.bridge import offline_explain
    from omp_a2a_bridge.server.infra.config import parse_config
    from omp_a2a_bridge.server.vocab import Ruling

    from .session import session

    calls = session(project)
    home = os.path.expanduser("~")
    audit = os.path.join(tempfile.mkdtemp(prefix="bench-box-"), "audit.jsonl")
    out = ["| bash tier | calls | ask a human | bash calls that ask |", "|---|---|---|---|"]
    for tier in ("prompt", "box"):
        cfg = parse_config("bench.json", {"roots": [home], "approval": {"tiers": {"bash": tier}}})
        asked = [n for n, a in calls if offline_explain(cfg, audit, n, a).ruling is Ruling.ASK]
        bash = sum(1 for n in asked if n == "bash")
        label = "prompt (before the box)" if tier == "prompt" else "box (the default now)"
        out.append(f"| {label} | {len(calls)} | {len(asked)} | {bash} |")
    return out


def section(runs: int = 30) -> list[str]:
    """The box's rows for ``python -m bench``, in a throwaway project under the home."""
    import shutil
    import tempfile

    project = tempfile.mkdtemp(prefix="bench-box-", dir=os.path.expanduser("~"))
    try:
        subprocess.run(["git", "init", "-q", project], check=True)
        return [
            "## The box (bash in bubblewrap)",
            "",
            *cost_rows(project, runs),
            "",
            "Prompts on the replayed 60-call session (`bench/session.py`, default config, judged",
            "by the one judge):",
            "",
            *prompts_rows(project),
        ]
    finally:
        shutil.rmtree(project, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.box")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    print("\n".join(section(args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
