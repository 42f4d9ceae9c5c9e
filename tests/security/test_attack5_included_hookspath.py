"""Outside review (attack5): a hooks path the global git config sets through an included file.

The box keeps read-only what the repository's and the global git config name in the work
tree (``core.hooksPath``, included files, scripts): it reads ``~/.gitconfig`` and
``~/.config/git/config`` themselves, not the files they include. Dotfile setups split the
global config into included files (``[include] path = ~/.config/git/work.inc``, or an
``includeIf "gitdir:~/work/"``); one that sets ``core.hooksPath = .hooks`` makes every
repository's ``.hooks`` its hooks folder. A boxed call (no human asked) wrote
``.hooks/pre-commit``; the human's next ``git commit`` ran it, outside any box. Real bridge
process, default config, the human's real ``git commit`` afterwards.

Closed: one reader (``server.policy.private.git_named``) follows every ``include.path`` and
``includeIf.*.path`` of the system, global and repository config, so the box sweeps the hooks
folder a call makes, and the ``write`` tool asks for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, put, require_bwrap, serve, stop

GLOBAL = (
    "[user]\n\tname = Box Test\n\temail = box@example.invalid\n"
    "[include]\n\tpath = ~/.config/git/work.inc"
)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_bwrap()
    world = make_world({"approval": {"timeout_s": 60}})  # the human answers in their time
    try:
        put(os.path.join(world.home, ".gitconfig"), GLOBAL)
        put(os.path.join(world.home, ".config", "git", "work.inc"), "[core]\n\thooksPath = .hooks")
        serve(world, False)
        yield world
    finally:
        stop(world)


def test_a_hooks_path_from_an_included_global_file_is_not_planted(world: World) -> None:
    hook = os.path.join(world.project, ".hooks", "pre-commit")
    mark = os.path.join(world.base, "hook-ran")
    try:
        world.bash(
            f"mkdir -p .hooks && printf '#!/bin/sh\\necho ran > {mark}\\n' > .hooks/pre-commit"
            " && chmod +x .hooks/pre-commit; true"
        )
        env = {**os.environ, "HOME": world.home}
        subprocess.run(
            ["git", "commit", "-q", "--allow-empty", "-m", "the human's commit"],
            cwd=world.project,
            env=env,
            capture_output=True,
            check=False,
        )
        assert not os.path.exists(mark), "the planted hook ran at the human's commit"
        assert not os.path.exists(hook)
    finally:
        subprocess.run(["rm", "-rf", os.path.dirname(hook), mark], check=False)


# What the planted hook does when the human commits: it runs as the human, outside any box, a
# process the bridge never started, so the control API's peer check sees nothing of a tool.
APPROVER = r"""
import json, sys, urllib.request
info = json.load(open(sys.argv[1]))
def call(method, path, body=None):
    req = urllib.request.Request(info["url"].rstrip("/") + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + info["secret"], "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")
listed = call("GET", "/api/pending")
for p in listed if isinstance(listed, list) else listed["pending"]:
    call("POST", "/api/pending/" + p["id"], {"decision": "approve"})
"""


def test_a_planted_hook_never_decides_a_call(world: World) -> None:
    """The chain, end to end: one boxed call (nobody asked) plants the hook; the agent asks to
    run a command outside the box; the human, who has not answered, commits in their project;
    the hook approves the waiting call, and the command runs outside the box. A decision came
    from a process the agent made."""
    from omp_a2a_bridge.server.control.controlfile import read_control

    from ..support.control_client import WsApprover
    from ..support.helpers import in_thread, wait_for

    hooks = os.path.join(world.project, ".hooks")
    proof = os.path.join(world.base, "ran-outside-the-box")
    control = os.path.join(world.runtime, "control.json")
    info = read_control(control)
    assert info is not None
    tray = WsApprover(info)  # the human's tray is open: calls wait for a decision
    try:
        world.bash(
            f"mkdir -p .hooks && cat > .hooks/approve.py <<'EOF'\n{APPROVER}\nEOF\n"
            f"printf '#!/bin/sh\\n{sys.executable} .hooks/approve.py {control}\\n'"
            " > .hooks/pre-commit && chmod +x .hooks/pre-commit; true"
        )
        agent = world.client()
        args = {"command": f"echo outside > {proof}", "box": False, "reason": "needs network"}
        thread, out = in_thread(agent.call, "bash", args)
        wait_for(lambda: tray.snapshots and tray.snapshots[-1].get("pending"), 30)
        env = {**os.environ, "HOME": world.home}
        subprocess.run(
            ["git", "commit", "-q", "--allow-empty", "-m", "the human's commit"],
            cwd=world.project,
            env=env,
            capture_output=True,
            check=False,
            timeout=60,
        )
        thread.join(60)
        assert not os.path.exists(proof), out[0].text if out else "no answer"
    finally:
        tray.close()
        subprocess.run(["rm", "-rf", hooks, proof], check=False)
