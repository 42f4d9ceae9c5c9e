"""Replay an ordinary 60-call coding session with the default config, in a project in the home.

What the issue measured on main: the human answered 42 of 61 calls. With the box, no bash call
asks (writes and edits still do: a human approves those here), the work really happens (tests
pass, commits exist), and ``rm -rf ~/Documents`` from the session removes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from ..boxworld import make_world, require_bwrap, stop
from ..helpers import ok

APP = "def add(a, b):\n    return a + b\n"
TEST = "from app import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def _session(project: str) -> list[tuple[str, dict[str, Any]]]:
    """60 calls, the shape of a real session: look around, change, test, commit, repeat."""
    py = sys.executable
    calls: list[tuple[str, dict[str, Any]]] = [
        ("bash", {"command": "git status --short && git log --oneline | head -3"}),
        ("write", {"path": f"{project}/app.py", "content": APP}),
        ("write", {"path": f"{project}/test_app.py", "content": TEST}),
        ("bash", {"command": f"{py} -m pytest -q -p no:cacheprovider"}),
        ("bash", {"command": "git add -A && git commit -qm 'app: add' && git log --oneline -1"}),
    ]
    check = f"{py} -c 'import app; print(app.add(1, 2))'"
    for i in range(9):  # 9 rounds of 6 calls
        name = f"f{i}"
        calls += [
            ("grep", {"pattern": "def ", "path": project}),
            ("read", {"path": f"{project}/app.py"}),
            (
                "edit",
                {
                    "path": f"{project}/app.py",
                    "old_string": "def add(a, b):",
                    "new_string": f"def {name}():\n    return {i}\n\n\ndef add(a, b):",
                },
            ),
            ("bash", {"command": check if i % 3 else f"{py} -m pytest -q -p no:cacheprovider"}),
            ("bash", {"command": "git diff --stat | tail -1; ls -la | wc -l; mktemp"}),
            ("bash", {"command": f"git commit -qam 'app: {name}' && git log --oneline | wc -l"}),
        ]
    calls.append(("bash", {"command": "rm -rf ~/Documents; ls ~"}))
    return calls


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
            human.join(5)
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
