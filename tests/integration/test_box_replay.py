"""Replay an ordinary 60-call coding session with the default config, in a project in the home.

What the issue measured on main: the human answered 42 of 61 calls. With the box, no bash call
asks (writes and edits still do: a human approves those here), the work really happens (tests
pass, commits exist), and ``rm -rf ~/Documents`` from the session removes nothing.
"""

from __future__ import annotations

import os
import subprocess
import threading

from bench.session import session as _session

from ..support.boxworld import make_world, require_bwrap, stop
from ..support.helpers import ok


def test_replayed_session_asks_no_bash_call(start_bridge, monkeypatch):
    require_bwrap()
    world = make_world()
    try:
        monkeypatch.setenv("HOME", world.home)
        running = start_bridge({"roots": [world.home], "approval": {"timeout_s": 30}})
        handle = running.runner.attach_approver("pytest")
        asked: list[str] = []
        done = threading.Event()

        def approve() -> None:  # the human: approves whatever asks, and we count it
            while not done.is_set():
                for p in running.runner.snapshot().pending:
                    if running.runner.decide(p.id, "approve"):
                        asked.append(p.tool)
                done.wait(0.01)

        human = threading.Thread(target=approve, daemon=True)
        human.start()
        calls = _session(world.project)
        assert len(calls) == 60
        c = running.client()
        try:
            for tool, args in calls:
                if tool == "bash":
                    args = {**args, "cwd": world.project}
                ok(c.call(tool, args))
        finally:
            done.set()
            human.join(60)
            running.runner.detach_approver(handle)

        assert "bash" not in asked, asked
        bash_calls = sum(1 for t, _ in calls if t == "bash")
        assert bash_calls == 31 and len(asked) == 11  # 2 writes + 9 edits: 11 of 60 asked
        log = subprocess.run(
            ["git", "log", "--oneline"], cwd=world.project, capture_output=True, text=True
        )
        assert len(log.stdout.splitlines()) == 11  # init + 1 + 9 commits made in the box
        assert os.path.exists(os.path.join(world.home, "Documents", "keep.txt"))
    finally:
        stop(world)
