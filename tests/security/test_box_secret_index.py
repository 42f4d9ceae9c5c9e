"""Secret-looking files outside the call's project stay private in the box as the disk changes.

A real bridge process in the box world (``tests/support/boxworld.py``, roots = the home): the
human makes, renames and moves secret-looking files elsewhere in the home while the bridge runs
and after its first boxed call (which builds the roots' index); every boxed call after that,
run unasked, reads none of them, whatever the spelling.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.box import secrets

from ..support.boxworld import World, top_level_folder, world_fixture
from ..support.boxworld import put as _put


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    yield from world_fixture(False)


def _reads(world: World, *paths: str) -> str:
    words = " ".join(f"'{p}'" for p in paths)
    _, text = world.bash(f"cat {words} 2>&1; grep -rh FAKESECRET ~ 2>/dev/null | head -20")
    return text


def test_a_secret_made_after_the_first_call_is_private(world: World) -> None:
    world.bash("true")  # the index exists from here on
    path = os.path.join(world.home, "late", "api", ".env.local")
    _put(path, "TOKEN=FAKESECRET-late-1f2e")
    assert world.leaks(_reads(world, path)) == []


def test_a_file_renamed_to_a_secret_name_is_private(world: World) -> None:
    plain = os.path.join(world.home, "drafts", "notes.txt")
    _put(plain, "FAKESECRET-renamed-9c0d")
    world.bash("true")
    secret = os.path.join(world.home, "drafts", "prod.pem")
    os.rename(plain, secret)
    assert world.leaks(_reads(world, secret)) == []


def test_a_moved_or_replaced_folder_keeps_its_secrets_private(world: World) -> None:
    _put(os.path.join(world.home, "moving", "cfg", ".pgpass"), "*:*:*:u:FAKESECRET-pg-77ab")
    world.bash("true")
    os.rename(os.path.join(world.home, "moving"), os.path.join(world.home, "moved"))
    shutil.rmtree(os.path.join(world.home, "moved", "cfg"))
    _put(os.path.join(world.home, "moved", "cfg", "credentials"), "FAKESECRET-cred-5e5e")
    _put(os.path.join(world.home, "moved", "cfg", "deeper", "id_rsa"), "FAKESECRET-key-0b0b")
    text = _reads(
        world,
        os.path.join(world.home, "moved", "cfg", "credentials"),
        os.path.join(world.home, "moved", "cfg", "deeper", "id_rsa"),
    )
    assert world.leaks(text) == []


def test_hundreds_of_other_projects_with_secrets_hide_all_and_the_project_still_works(
    world: World,
) -> None:
    for i in range(300):
        _put(os.path.join(world.home, "src", f"p{i:03}", ".env"), f"K=FAKESECRET-many-{i}")
    _, text = world.bash(
        "cat ~/src/p000/.env ~/src/p299/.env 2>&1; grep -rh FAKESECRET ~/src | head; "
        "git status --short; echo done-$((6*7))"
    )
    assert world.leaks(text) == [], text
    assert "done-42" in text and "fatal" not in text, text


def test_an_agent_that_fills_the_index_budget_reads_nothing_more(world: World) -> None:
    """The agent may make folders in any folder it runs in (each is a project); past the
    index's budget a folder the index did not look into is looked into by the call itself
    (the newest few, small ones) or hidden whole, so filling the budget leaks nothing."""
    world.bash("true")
    half = secrets.MAX_DIRS // 2 + 10
    fills = [os.path.join(world.home, f"fill{i}") for i in (1, 2)]
    for fill in fills:
        os.makedirs(fill)
        is_error, text = world.bash(f"seq 1 {half} | xargs mkdir && echo ok", cwd=fill)
        assert not is_error and "ok" in text, text
    try:
        world.bash("true")  # the index has walked the fill: its budget is full from here on
        path = os.path.join(world.home, "after-fill", "svc", ".env")
        _put(path, "KEY=FAKESECRET-after-fill-3c3c")
        plain = _put(os.path.join(os.path.dirname(path), "notes.txt"), "PUBLIC-6a6a")
        is_error, text = world.bash(f"cat '{path}' '{plain}' 2>&1; echo still-works")
        assert world.leaks(text) == [] and "still-works" in text, text
        # made while the budget is full: the call's own plan looked into it (it was hidden
        # whole, and a file written there a moment ago could not be found)
        assert "PUBLIC-6a6a" in text, text
    finally:
        for fill in fills:
            shutil.rmtree(fill)
    text = _reads(world, path)  # room again: the folder is looked into, its .env masked
    assert world.leaks(text) == [], text


@pytest.fixture
def data_disk() -> Iterator[str]:
    with top_level_folder("a2a-data-") as top:
        yield top


def test_a_data_folder_outside_the_roots_is_private(world: World, data_disk: str) -> None:
    """Outside the roots the box shows the system (programs, libraries, config), not the
    user's data: a top-level folder no OS makes is hidden whole, any file name."""
    _put(os.path.join(data_disk, "backup", "home", "notes.txt"), "FAKESECRET-disk-4d4d")
    _put(os.path.join(data_disk, "backup", "home", ".ssh", "id_rsa"), "FAKESECRET-disk-key")
    _, text = world.bash(
        f"cat {data_disk}/backup/home/notes.txt 2>&1; grep -r FAKESECRET {data_disk} 2>&1; "
        "ls / >/dev/null && git --version && echo still-works"
    )
    assert world.leaks(text) == [] and "still-works" in text, text
