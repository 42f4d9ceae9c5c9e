"""Outside review (attack7) of the kept folder listings: a secret-looking file in a
``box.read_allow`` folder (``~/.config/git/credentials``, git's credential store) must be
masked on the first call after it appears, however it appears, even when the look at that
folder was kept from an earlier call (``_secrets_allowed`` keeps it while every folder it went
through has the same (inode, mtime, ctime)).

Over a real bridge: the folder is made, left until its ctime is older than ``RACY_NS`` (so the
first call's look *is* kept), a first call reads the folder, then the folder changes and the
very next call must not read the secret. These held (guards); each is a way a kept listing
could have been stale: a new file in the same tick, a file in a subfolder, a folder holding
one moved in, the folder's mtime set back (``touch -d``), a subfolder replaced by another
(same name, maybe the same inode number), a link replaced by a file of the same name.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator

import pytest

from omp_a2a_bridge.server.box.secrets import RACY_NS

from ..support.boxworld import World, put, world_fixture
from ..support.helpers import wait_for

SECRET = "FAKESECRET-gitcreds-a7a7"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    yield from world_fixture(False)


def _aged(paths: list[str]) -> bool:
    """Every folder's last change is older than RACY_NS: a look at it now is kept."""
    limit = time.time_ns() - RACY_NS - 100_000_000
    return all(os.stat(p, follow_symlinks=False).st_ctime_ns < limit for p in paths)


def _top_level(git: str, home: str) -> None:
    put(os.path.join(git, "credentials"), f"https://u:{SECRET}@example.invalid")


def _in_subfolder(git: str, home: str) -> None:
    put(os.path.join(git, "sub", "credentials"), f"https://u:{SECRET}@example.invalid")


def _moved_in(git: str, home: str) -> None:
    outside = os.path.join(home, "Documents", "incoming")
    put(os.path.join(outside, "credentials"), f"https://u:{SECRET}@example.invalid")
    os.rename(outside, os.path.join(git, "incoming"))


def _mtime_set_back(git: str, home: str) -> None:
    st = os.stat(git)
    put(os.path.join(git, "credentials"), f"https://u:{SECRET}@example.invalid")
    os.utime(git, ns=(st.st_atime_ns, st.st_mtime_ns))


def _subfolder_replaced(git: str, home: str) -> None:
    sub = os.path.join(git, "sub")
    shutil.rmtree(sub)  # its inode number is free again: the new one may get it
    put(os.path.join(sub, "credentials"), f"https://u:{SECRET}@example.invalid")


def _link_replaced_by_file(git: str, home: str) -> None:
    # (set up as a link to a file that is no secret: the name alone was not masked)
    tmp = os.path.join(git, ".credentials.new")
    put(tmp, f"https://u:{SECRET}@example.invalid")
    os.rename(tmp, os.path.join(git, "credentials"))  # over the link


CHANGES: dict[str, Callable[[str, str], None]] = {
    "new file, same tick": _top_level,
    "new file in a subfolder": _in_subfolder,
    "folder holding one moved in": _moved_in,
    "mtime set back": _mtime_set_back,
    "subfolder replaced": _subfolder_replaced,
    "link replaced by a file": _link_replaced_by_file,
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_secret_new_in_a_kept_read_allow_folder_is_masked_at_once(
    world: World, change: str
) -> None:
    git = os.path.join(world.home, ".config", "git")
    shutil.rmtree(git, ignore_errors=True)
    put(os.path.join(git, "config"), "[user]\n\tname = attack7")
    os.makedirs(os.path.join(git, "sub"))
    put(os.path.join(git, "sub", "notes.txt"), "nothing")
    if change == "link replaced by a file":  # (a write to the name would go through it)
        os.symlink(os.path.join(git, "sub", "notes.txt"), os.path.join(git, "credentials"))
    folders = [git, os.path.join(git, "sub")]
    try:
        wait_for(lambda: _aged(folders), timeout=30)
        _, first = world.bash(f"cat {git}/config; ls -R {git}")
        assert "attack7" in first, first
        CHANGES[change](git, world.home)
        _, text = world.bash(f"cat {git}/credentials {git}/sub/credentials {git}/incoming/*; true")
        assert SECRET not in text, f"{change}: the kept look showed the credential store"
    finally:
        shutil.rmtree(git, ignore_errors=True)
        shutil.rmtree(os.path.join(world.home, "Documents", "incoming"), ignore_errors=True)
