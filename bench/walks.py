"""``python -m bench.walks``: what the box costs per ``grep``/``find`` walk.

Medians over ``--runs`` runs in ``--project``: rg's walk as before the box (``rg --files`` and a
``rg`` search for a word); planning the walk's read-only box (``server.box.edges.walk_plan``:
looking at the disk) without and with its per-base cache; and the same two rg runs in the box
(bwrap start included). ``docs/security/box.md`` quotes these.
"""

from __future__ import annotations

import argparse
import os
import subprocess

from omp_a2a_bridge.server.box import edges, probe
from omp_a2a_bridge.server.box.policy import BoxConfig
from omp_a2a_bridge.server.box.run import BoxRequest
from omp_a2a_bridge.server.tools.rg import BASE_ARGS, require_rg

from .box import _median_ms


def _uncached(request: BoxRequest, project: str) -> None:
    edges.forget_plans()
    edges.walk_plan(request, project)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.walks")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--project", default=os.getcwd(), help="the walk's base (default: here)")
    args = ap.parse_args()
    status = probe.probe()
    if not status.available:
        print(f"no box here: {status.detail}")
        return 1
    project = os.path.realpath(args.project)
    request = BoxRequest(BoxConfig(), (os.path.expanduser("~"), project), ())
    rg = [require_rg(), *BASE_ARGS]
    walks = {"rg --files": [*rg, "--files"], "rg -e needle": [*rg, "-e", "needle", "--", "."]}
    rows = []
    for name, argv in walks.items():

        def bare(argv: list[str] = argv) -> None:
            subprocess.run(argv, cwd=project, capture_output=True, check=False)

        rows.append((name, _median_ms(bare, args.runs)))
    rows.append(("plan (disk look)", _median_ms(lambda: _uncached(request, project), args.runs)))
    rows.append(("plan, cached", _median_ms(lambda: edges.walk_plan(request, project), args.runs)))
    for name, argv in walks.items():
        boxed = edges.walk_argv(request, project, argv) or argv

        def in_box(boxed: list[str] = boxed) -> None:
            subprocess.run(boxed, capture_output=True, check=False)

        rows.append((f"bwrap + {name}", _median_ms(in_box, args.runs)))
    print(f"| {project} ({status.detail}) | median ms |\n|---|---|")
    for name, ms in rows:
        print(f"| {name} | {ms:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
