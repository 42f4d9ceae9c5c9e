"""Ordinary commands work in the box, unasked (a failure here is a bug in the box's policy).

A real bridge process with the default config (bash's tier is ``box``), a project under the home
with a worktree and a submodule, run as root and as an unprivileged desktop user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, world_fixture
from ..support.helpers import read_text


def _host_git(world: World, cwd: str, *args: str) -> None:
    env = {**os.environ, "HOME": world.home, "GIT_ALLOW_PROTOCOL": "file"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _setup(world: World) -> None:
    """A worktree and a submodule, made on the host (making them writes outside the project)."""
    lib = os.path.join(world.home, "lib")
    os.makedirs(lib)
    _host_git(world, lib, "init", "-q", "-b", "main")
    _host_git(world, lib, "commit", "-q", "--allow-empty", "-m", "lib")
    p = world.project
    _host_git(world, p, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "lib")
    _host_git(world, p, "commit", "-q", "-m", "submodule")
    _host_git(world, p, "worktree", "add", "-q", os.path.join(world.home, "wt"), "-b", "feature")
    os.makedirs(os.path.join(p, "sub"))


@pytest.fixture(scope="module", params=["root", "user"])
def world(request) -> Iterator[World]:
    for w in world_fixture(request.param == "user"):
        _setup(w)
        yield w


PY = sys.executable

CORPUS = [
    ("git status --short; git diff; git log --oneline | wc -l", "", "2"),
    ("echo a > a.txt && git add a.txt && git commit -qm a && git log --oneline -1", "", " a"),
    ("echo w > w.txt && git add w.txt && git commit -qm w && git log --oneline -1", "../wt", " w"),
    ("git status --short && git worktree list | wc -l", "../wt", "2"),
    ("echo s > s.txt && git add s.txt && git commit -qm s && git log --oneline -1", "lib", " s"),
    ("git submodule status | cut -c42-", "", "lib"),
    (
        "printf 'def test_one():\\n    assert 1\\n' > test_x.py && "
        f"{PY} -m pytest -q -p no:cacheprovider test_x.py | tail -1",
        "",
        "1 passed",
    ),
    (f"{PY} -m venv --without-pip .venv && .venv/bin/python -c 'print(1)'", "", "1"),
    ("printf 'all:\\n\\t@echo built > out.txt\\n' > Makefile && make && cat out.txt", "", "built"),
    ("ls -la | head -3; cat a.txt", "", "a"),
    ('f=$(mktemp) && echo tmp > $f && cat $f && test "${f#$TMPDIR}" != "$f"', "", "tmp"),
    ("cat <<'EOF' > notes.txt\nline one\nEOF\ncat notes.txt", "", "line one"),
    ("cd sub && touch x && ls", "", "x"),
    ("git -C .. status --short >/dev/null && pwd", "sub", "/proj/sub"),
    ("sort -u a.txt notes.txt | grep -c .", "", "2"),
    ("python3 -c 'import json,sys; print(json.dumps({\"ok\": 1}))'", "", '{"ok": 1}'),
]


@pytest.mark.parametrize(("command", "cwd", "expect"), CORPUS)
def test_ordinary_commands_work_in_the_box(world: World, command: str, cwd: str, expect: str):
    where = os.path.normpath(os.path.join(world.project, cwd))
    failed, text = world.bash(command, cwd=where)
    assert not failed, text
    assert expect in text, text


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm")
def test_npm_test_on_an_offline_project(world: World) -> None:
    pkg = '{"name": "x", "version": "1.0.0", "scripts": {"test": "node t.js"}}'
    command = (
        f"mkdir -p js && cd js && echo '{pkg}' > package.json && "
        "echo 'console.log(\"node ok\")' > t.js && npm test --silent"
    )
    failed, text = world.bash(command)
    assert not failed, text
    assert "node ok" in text


def test_worktree_and_submodule_persistence_stays_read_only(world: World) -> None:
    """A worktree's ``.git`` file (it names the git dir, hooks included) and a submodule's
    hooks in ``.git/modules`` are persistence too; the commits above still worked."""
    wt = os.path.join(world.home, "wt")
    before = read_text(os.path.join(wt, ".git"))
    failed, text = world.bash("echo 'gitdir: /var/tmp/evil' > .git", cwd=wt)
    assert failed and "Read-only" in text, text
    assert read_text(os.path.join(wt, ".git")) == before
    hooks = os.path.join(world.project, ".git", "modules", "lib", "hooks")
    for cwd in (world.project, os.path.join(world.project, "lib")):
        failed, text = world.bash(f"echo evil > {hooks}/pre-commit", cwd=cwd)
        assert failed, text
    main_hooks = os.path.join(world.project, ".git", "hooks")
    failed, _ = world.bash(f"echo evil > {main_hooks}/post-checkout", cwd=wt)
    assert failed
    assert not os.path.exists(os.path.join(hooks, "pre-commit"))
    assert not os.path.exists(os.path.join(main_hooks, "post-checkout"))
