"""Outside review (attack5): a hooks path the global git config sets through an included file.

The box keeps read-only what the repository's and the global git config name in the work
tree (``core.hooksPath``, included files, scripts): it reads ``~/.gitconfig`` and
``~/.config/git/config`` themselves, not the files they include. Dotfile setups split the
global config into included files (``[include] path = ~/.config/git/work.inc``, or an
``includeIf "gitdir:~/work/"``); one that sets ``core.hooksPath = .hooks`` makes every
repository's ``.hooks`` its hooks folder. A boxed call (no human asked) wrote
``.hooks/pre-commit``; the human's next ``git commit`` ran it, outside any box. Real bridge
process, default config, the human's real ``git commit`` afterwards.
"""

from __future__ import annotations

import os
import subprocess
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
    world = make_world()
    try:
        put(os.path.join(world.home, ".gitconfig"), GLOBAL)
        put(os.path.join(world.home, ".config", "git", "work.inc"), "[core]\n\thooksPath = .hooks")
        serve(world, False)
        yield world
    finally:
        stop(world)


@pytest.mark.xfail(
    strict=True,
    reason="attack5: a hooks path set in a file the global git config includes is writable",
)
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
