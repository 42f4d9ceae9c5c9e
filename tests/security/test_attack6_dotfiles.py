"""Outside review (attack6): the home's dot-files kept in a repository and linked into place
(GNU Stow, ``ln -s ~/dotfiles/bashrc ~/.bashrc``: how many developers keep them).

The box keeps the home's hidden tree private and its persistence (``~/.bashrc``,
``~/.config/autostart``) out of reach. But the files live in ``~/dotfiles``, a repository: a
boxed call with ``cwd`` there has it as its writable project, and what it writes is what the
human's next shell (or next login) runs, outside any box, where it can read the control secret
and approve.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, put, require_bwrap, serve, stop
from ..support.helpers import read_text

# Held: a linked ~/.bashrc or ~/.profile is read-only at its target.
HELD = {".bashrc": "bashrc", ".profile": "profile"}
LINKED = {
    ".config/autostart/sync.desktop": "autostart/sync.desktop",
    ".config/systemd/user/sync.service": "systemd/sync.service",
}
# Whole folders linked into place (``stow`` links a folder when it can): a new file in one.
FOLDERS = {".config/fish": "fish", ".config/autostart-scripts": "autostart-scripts"}


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_bwrap()
    world = make_world()
    dots = os.path.join(world.home, "dotfiles")
    env = {**os.environ, "HOME": world.home}
    try:
        for home_name, repo_name in {**HELD, **LINKED}.items():
            put(os.path.join(dots, repo_name), f"# the human's {repo_name}")
            target = os.path.join(world.home, home_name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.lexists(target):
                os.unlink(target)
            os.symlink(os.path.join(dots, repo_name), target)
        for home_name, repo_name in FOLDERS.items():
            put(os.path.join(dots, repo_name, "config.fish"), "# the human's shell setup")
            os.symlink(os.path.join(dots, repo_name), os.path.join(world.home, home_name))
        subprocess.run(["git", "init", "-q", dots], env=env, check=True)
        serve(world, False)
        yield world
    finally:
        stop(world)


@pytest.mark.parametrize("home_name", sorted(LINKED))
def test_a_linked_dot_file_is_read_only_in_its_repository(world: World, home_name: str) -> None:
    dots = os.path.join(world.home, "dotfiles")
    real = os.path.join(dots, LINKED[home_name])
    before = read_text(real)
    try:
        world.bash(f"echo 'echo planted > ~/pwned' >> {LINKED[home_name]}; true", cwd=dots)
        assert read_text(os.path.join(world.home, home_name)) == before
    finally:
        put(real, before.rstrip("\n"))


@pytest.mark.parametrize("home_name", sorted(FOLDERS))
def test_a_linked_persistence_folder_takes_no_new_file(world: World, home_name: str) -> None:
    dots = os.path.join(world.home, "dotfiles")
    made = os.path.join(dots, FOLDERS[home_name], "conf.d", "evil.fish")
    try:
        world.bash(
            f"mkdir -p {FOLDERS[home_name]}/conf.d && echo 'echo planted > ~/pwned' > "
            f"{FOLDERS[home_name]}/conf.d/evil.fish; true",
            cwd=dots,
        )
        assert not os.path.exists(os.path.join(world.home, home_name, "conf.d", "evil.fish"))
    finally:
        shutil.rmtree(os.path.dirname(made), ignore_errors=True)


@pytest.mark.parametrize("home_name", sorted(HELD))
def test_guard_a_linked_shell_startup_file_is_read_only(world: World, home_name: str) -> None:
    """Guard (holds): ``~/.bashrc -> ~/dotfiles/bashrc`` is read-only in the repository."""
    dots = os.path.join(world.home, "dotfiles")
    real = os.path.join(dots, HELD[home_name])
    before = read_text(real)
    try:
        world.bash(f"echo 'echo planted > ~/pwned' >> {HELD[home_name]}; true", cwd=dots)
        assert read_text(os.path.join(world.home, home_name)) == before
    finally:
        put(real, before.rstrip("\n"))


def test_guard_the_link_itself_is_not_writable(world: World) -> None:
    """Guard: through the link in the home (``cwd`` the home: no project) nothing is written."""
    path = os.path.join(world.home, ".bashrc")
    before = read_text(path)
    world.bash("echo 'echo planted' >> ~/.bashrc; true", cwd=world.home)
    assert read_text(path) == before
