"""A box whose plan lost a race with the disk is planned again; a command never runs twice.

The plan looks at the disk, then bubblewrap mounts what it says: a path the plan masks (a
secret-looking file elsewhere in the roots) that vanishes in between makes bubblewrap's setup
fail (``Can't create file at …``) before the command starts. The race is made deterministic by
wrapping the pure plan step (``build_plan``) in this process's bridge: the wrapped step removes
the masked file right after it planned the mask (or plans a mask over a path that is gone).
Real bridge, real HTTP, real supervisor and bubblewrap.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest

from omp_a2a_bridge.server.box import edges, run
from omp_a2a_bridge.server.box.plan import BoxPlan
from omp_a2a_bridge.server.tools.shell import BOX_SETUP_TRIES

from ..support.boxworld import box_home

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the box is Linux-only")
BWRAP_LIKE = "bwrap: Can't mount tmpfs on /newroot/srv: No such file or directory"


@pytest.fixture
def home(tmp_path, monkeypatch, env):
    files = {"other/.env": "TOKEN=PLANTED-OTHER-ENV\n", "project/notes.txt": "PUBLIC needle\n"}
    return box_home(tmp_path, monkeypatch, files)


@pytest.fixture
def agent(home, start_bridge):
    tiers = {"bash": "allow", "grep": "allow", "find": "allow"}
    return start_bridge({"roots": [str(home)], "approval": {"tiers": tiers}}).client()


def _racing_plans(
    monkeypatch: Any, module: Any, lose: Callable[[int, BoxPlan], BoxPlan]
) -> list[BoxPlan]:
    """Wrap ``module.build_plan``: each plan goes through ``lose(n, plan)`` (n from 1), which
    changes the disk after the plan looked at it; the plans made are returned, in order."""
    real = module.build_plan
    plans: list[BoxPlan] = []

    def planned(*args: Any, **kwargs: Any) -> BoxPlan:
        plan = lose(len(plans) + 1, real(*args, **kwargs))
        plans.append(plan)
        return plan

    monkeypatch.setattr(module, "build_plan", planned)
    return plans


def _remove_first_masked_env(home) -> Callable[[int, BoxPlan], BoxPlan]:
    env = str(home / "other" / ".env")

    def lose(n: int, plan: BoxPlan) -> BoxPlan:
        if n == 1:
            assert env in plan.private_files, plan.private_files  # the plan masks it...
            os.remove(env)  # ...and it is gone before bubblewrap mounts over it
        return plan

    return lose


def _gone_mask(home, always: bool) -> Callable[[int, BoxPlan], BoxPlan]:
    gone = str(home / "gone-folder")

    def lose(n: int, plan: BoxPlan) -> BoxPlan:
        if n == 1 or always:
            return dataclasses.replace(plan, read_private=(*plan.read_private, gone))
        return plan

    return lose


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_box_whose_plan_lost_a_race_is_planned_again(agent, home, monkeypatch, tmp_path):
    """The masked ``.env`` vanished between the plan and the mount: bubblewrap's setup failed
    and the call ended with bubblewrap's error as if it were the command's. Now the call is
    planned again (the disk as it is now) and runs, once."""
    plans = _racing_plans(monkeypatch, run, _remove_first_masked_env(home))
    log = home / "project" / "ran.log"  # the project: the box writes there
    command = f"echo ran >> {log}; echo done-$((6*7))"
    r = agent.call("bash", {"command": command, "cwd": str(home / "project")})
    assert r.result["isError"] is False, r.text
    assert "done-42" in r.text and "bwrap" not in r.text, r.text
    assert _lines(log) == ["ran"]
    assert len(plans) == 2


def test_a_command_that_fails_with_bwraps_words_is_never_run_again(
    agent, home, monkeypatch, tmp_path
):
    """Only bubblewrap's own status says the command never started: a command that fails,
    even with text that looks like bubblewrap's, ran, and is not run again."""
    plans = _racing_plans(monkeypatch, run, _remove_first_masked_env(home))
    log = home / "project" / "ran.log"  # the project: the box writes there
    command = f'echo ran >> {log}; echo "{BWRAP_LIKE}" >&2; exit 1'
    r = agent.call("bash", {"command": command, "cwd": str(home / "project")})
    assert r.result["isError"] is True, r.text
    assert BWRAP_LIKE in r.text and "[exit code 1]" in r.text, r.text
    assert _lines(log) == ["ran"]  # the lost race before it, then exactly one run
    assert len(plans) == 2
    # and with no race at all: one plan, one run
    r = agent.call("bash", {"command": command, "cwd": str(home / "project")})
    assert "[exit code 1]" in r.text, r.text
    assert _lines(log) == ["ran", "ran"]
    assert len(plans) == 3


def test_a_box_that_cannot_be_set_up_says_so_and_runs_nothing(agent, home, monkeypatch, tmp_path):
    """Every plan loses: bounded tries, then an error that names the box's setup (not the
    command, which never ran)."""
    plans = _racing_plans(monkeypatch, run, _gone_mask(home, always=True))
    log = home / "project" / "ran.log"  # the project: the box writes there
    r = agent.call("bash", {"command": f"echo ran >> {log}", "cwd": str(home / "project")})
    assert r.result["isError"] is True, r.text
    assert "the box could not be set up" in r.text and "did not run" in r.text, r.text
    assert "bwrap:" in r.text, r.text  # bubblewrap's own words, for whoever debugs it
    assert not log.exists()
    assert len(plans) == BOX_SETUP_TRIES


@pytest.mark.parametrize("tool", ["grep", "find"])
def test_a_walk_whose_plan_lost_a_race_is_planned_again(agent, home, monkeypatch, tool):
    """The same race for ``grep``/``find``'s box: the walk's plan is cached per base, so the
    lost plan is dropped and made again, and the walk finds what it should."""
    plans = _racing_plans(monkeypatch, edges, _gone_mask(home, always=False))
    args = {"pattern": "needle"} if tool == "grep" else {"pattern": "*.txt"}
    r = agent.call(tool, {**args, "path": str(home / "project")})
    assert r.result["isError"] is False, r.text
    assert "notes.txt" in r.text, r.text
    assert len(plans) == 2


def test_a_walk_whose_box_never_sets_up_says_so(agent, home, monkeypatch):
    """Every walk plan loses: the walk fails with the box's error. It used to answer "no
    matches" (the walk's own cleanup hid bubblewrap's error), as if the folder held none."""
    plans = _racing_plans(monkeypatch, edges, _gone_mask(home, always=True))
    r = agent.call("grep", {"pattern": "needle", "path": str(home / "project")})
    assert r.result["isError"] is True, r.text
    assert "the box could not be set up" in r.text and "ripgrep did not run" in r.text, r.text
    assert "bwrap:" in r.text, r.text
    assert len(plans) == 3
