"""The box keeps each project folder's part of its scan while the folder is unchanged
(server/box/host.py ``_look_at``). These tests let the kept looks take effect (a folder's last
change must be older than the 2 s the kept looks ignore), then change the project the ways a
name can come to point at a secret, and check the very next boxed call already masks it.

A real bridge and real bubblewrap, over HTTP. The hard-link tests fail when the kept look is
used without checking the folder's key (checked by hand when this was written); a secret-named
file is also caught by the roots' secret index, a second way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from ..support.boxworld import MARKER, World, put, world_fixture
from ..support.helpers import wait_for

RACY_S = 2.0  # server.box.secrets.RACY_NS: looks at folders changed this recently are not kept


@pytest.fixture
def world() -> Iterator[World]:
    yield from world_fixture(as_user=False, config={"approval": {"tiers": {"bash": "box"}}})


def _settled(world: World, folders: list[str]) -> None:
    """Until every folder's last change is old enough for its look to be kept, then one call
    that makes the looks."""

    def old_enough() -> bool:
        return all(time.time() - os.stat(f).st_ctime > RACY_S + 0.2 for f in folders)

    wait_for(old_enough, 30)
    error, text = world.bash("cat src/notes.txt lib/readme.txt")
    assert not error and "notes" in text and "readme" in text, text


def _project(world: World) -> list[str]:
    put(os.path.join(world.project, "src", "notes.txt"), "notes")
    put(os.path.join(world.project, "lib", "readme.txt"), "readme")
    secret = put(os.path.join(world.base, "outside", "id_rsa"), MARKER + "-hardlinked")
    return [
        world.project,
        os.path.join(world.project, "src"),
        os.path.join(world.project, "lib"),
        secret,
    ]


def test_a_hard_link_to_a_secret_added_to_a_kept_folder_is_masked_at_once(world: World) -> None:
    *folders, secret = _project(world)
    _settled(world, folders)
    os.link(secret, os.path.join(world.project, "src", "copy.txt"))  # an innocent name
    _, text = world.bash("cat src/copy.txt; echo done")
    assert "done" in text, text
    assert MARKER not in text, text


def test_a_secret_named_file_added_to_a_kept_folder_is_masked_at_once(world: World) -> None:
    *folders, _ = _project(world)
    _settled(world, folders)
    put(os.path.join(world.project, "lib", ".env"), f"API_KEY={MARKER}")
    _, text = world.bash("cat lib/.env; echo done")
    assert "done" in text, text
    assert MARKER not in text, text


def test_a_kept_folder_renamed_and_refilled_is_looked_at_again(world: World) -> None:
    *folders, secret = _project(world)
    _settled(world, folders)
    # the kept look of ``lib`` must not answer for a different folder now named ``lib``
    src, lib = (os.path.join(world.project, n) for n in ("src", "lib"))
    os.rename(lib, lib + ".old")
    os.rename(src, lib)
    os.link(secret, os.path.join(lib, "readme.txt.bak"))
    _, text = world.bash("cat lib/*; echo done")
    assert "done" in text and "notes" in text, text
    assert MARKER not in text, text
