"""Outside review (attack6) of attack5 #3's fix: a boxed call in the home's data folders
(``~/Documents``...) gets no writable project, *unless the folder is a repository's top*.

"Repository" is decided by ``_git`` in ``server/box/host.py``: the first folder up from the
``cwd`` holding a ``.git`` **file or folder**, whatever it holds. A ``.git`` file whose
``gitdir:`` names nothing (or names any folder), or an empty ``.git`` folder, makes
``~/Documents`` itself a "repository top", and ``project_of`` exempts a repository top from the
data-folder rule: every later boxed call with ``cwd`` ``~/Documents`` may delete the human's
documents again, with nobody asked. One ``.git`` written once (by one approved outside call, a
write the human let through as harmless, a sync client that copied one) widens every later
boxed call for good.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, put, require_bwrap, serve, stop
from ..support.helpers import read_text


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_bwrap()
    world = make_world()
    try:
        serve(world, False)
        yield world
    finally:
        stop(world)


PLANTS = {
    "gitdir-nowhere": ("file", "gitdir: /nonexistent/attack6.git"),
    "gitdir-elsewhere": ("file", "gitdir: {project}/.git"),
    "empty-file": ("file", ""),
    "empty-folder": ("dir", ""),
}


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_a_planted_dot_git_does_not_make_documents_writable(world: World, kind: str) -> None:
    docs = os.path.join(world.home, "Documents")
    keep = os.path.join(docs, "keep.txt")
    dot = os.path.join(docs, ".git")
    what, text = PLANTS[kind]
    before = read_text(keep)
    if what == "dir":
        os.makedirs(dot)
    else:
        put(dot, text.format(project=world.project))
    try:
        world.bash("rm -f keep.txt; echo planted > planted.txt; true", cwd=docs)
        assert os.path.exists(keep), "the human's document was deleted with nobody asked"
        assert not os.path.exists(os.path.join(docs, "planted.txt"))
    finally:
        if os.path.isdir(dot):
            shutil.rmtree(dot)
        else:
            os.unlink(dot)
        put(keep, before.rstrip("\n"))
        subprocess.run(["rm", "-f", os.path.join(docs, "planted.txt")], check=False)


def test_guard_git_init_in_documents_from_a_boxed_call_fails(world: World) -> None:
    """Guard (holds): a boxed call cannot make the repository itself: in ``~/Documents`` (no
    project) and in the home (no project) ``git init`` writes nothing."""
    docs = os.path.join(world.home, "Documents")
    try:
        world.bash("git init -q . ; git init -q sub; true", cwd=docs)
        world.bash(
            "git init -q Documents; mkdir -p Documents/x && git init -q Documents/x; true",
            cwd=world.home,
        )
        assert not os.path.lexists(os.path.join(docs, ".git"))
        assert not os.path.lexists(os.path.join(docs, "sub"))
        assert not os.path.lexists(os.path.join(docs, "x"))
    finally:
        for name in (".git", "sub", "x"):
            shutil.rmtree(os.path.join(docs, name), ignore_errors=True)


def test_guard_a_link_into_documents_is_no_project(world: World) -> None:
    """Guard (holds): ``~/work -> ~/Documents/work``: the cwd is resolved before the rule."""
    docs = os.path.join(world.home, "Documents")
    real = os.path.join(docs, "work")
    link = os.path.join(world.home, "mywork")
    put(os.path.join(real, "notes.txt"), "mine")
    os.symlink(real, link)
    try:
        world.bash("rm -f notes.txt; true", cwd=link)
        assert os.path.exists(os.path.join(real, "notes.txt"))
    finally:
        os.unlink(link)
        shutil.rmtree(real, ignore_errors=True)


# The synced folders the desktop clients make by default, which the list of names misses: a
# deletion there is synced to every device the human owns (and the cloud's copy).
SYNCED = ("Nextcloud", "ownCloud", "Sync", "pCloudDrive", "MEGA")


@pytest.mark.parametrize("name", SYNCED)
def test_a_synced_folder_that_is_no_project_deletes_nothing(world: World, name: str) -> None:
    folder = os.path.join(world.home, name)
    keep = put(os.path.join(folder, "taxes-2025.ods"), "the human's spreadsheet")
    try:
        world.bash("rm -f taxes-2025.ods; true", cwd=folder)
        assert os.path.exists(keep), f"~/{name}: the human's file was deleted with nobody asked"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_guard_a_boxed_call_cannot_rewrite_user_dirs(world: World) -> None:
    """Guard (holds): ``~/.config/user-dirs.dirs`` (which names the renamed data folders, a
    ``~/Dokumente``) is in the hidden tree: a boxed call cannot drop a folder from it."""
    path = put(
        os.path.join(world.home, ".config", "user-dirs.dirs"),
        'XDG_DOCUMENTS_DIR="$HOME/Dokumente"',
    )
    keep = put(os.path.join(world.home, "Dokumente", "brief.txt"), "mine")
    try:
        world.bash(f"printf '' > {path}; true", cwd=world.project)
        assert read_text(path).strip() == 'XDG_DOCUMENTS_DIR="$HOME/Dokumente"'
        world.bash("rm -f brief.txt; true", cwd=os.path.dirname(keep))
        assert os.path.exists(keep)
    finally:
        os.unlink(path)
        shutil.rmtree(os.path.dirname(keep), ignore_errors=True)


def test_a_fake_repository_inside_a_data_folder_is_no_project(world: World) -> None:
    """An empty ``.git`` folder (git never made it) one level down: ``letters`` is not a
    repository, so the data folder's rule holds there too; a real one would be a project."""
    letters = os.path.join(world.home, "Documents", "letters")
    keep = put(os.path.join(letters, "keep.txt"), "the human's letter")
    os.makedirs(os.path.join(letters, ".git"), exist_ok=True)
    try:
        world.bash("rm -f keep.txt; true", cwd=letters)
        assert os.path.exists(keep), "a fake .git made a data folder writable"
    finally:
        subprocess.run(["rm", "-rf", letters], check=False)
