"""A folder made a moment ago shows in the box at once; its secret-looking files stay masked.

A real bridge process in the box world (``tests/support/boxworld.py``, roots = the home), real
HTTP, real bubblewrap. A folder the roots' index knows but has not looked into (past its
depth here; past its budget in ``test_box_secret_index.py``) was hidden whole from every box:
``write`` made ``notes.txt`` in it, and a boxed ``cat``, ``grep`` or ``ls`` found nothing. The
call's own plan now looks into such a folder (bounded), masking what the index would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.box import secrets

from ..support.boxworld import World, world_fixture
from ..support.boxworld import put as _put
from ..support.helpers import TOKEN


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    yield from world_fixture(False, {"approval": {"timeout_s": 0.5, "tiers": {"write": "allow"}}})


def _deep(world: World, name: str) -> str:
    """A folder below the index's last level (it knows the folder, never looks into it)."""
    levels = [f"{name}{i}" for i in range(1, secrets.MAX_DEPTH + 2)]
    return os.path.join(world.home, *levels)


def _write(world: World, path: str, content: str) -> None:
    c = world.client()
    try:
        r = c.call("write", {"path": path, "content": content})
    finally:
        c.close()
    assert r.status == 200 and not r.result["isError"], r.text


def test_a_file_written_in_a_new_folder_shows_at_once(world: World) -> None:
    world.bash("true")  # the index exists from here on
    folder = os.path.join(_deep(world, "w"), "fresh", "sub")
    notes = os.path.join(folder, "notes.txt")
    _write(world, notes, "PUBLIC-fresh-notes-7c1d\n")
    is_error, text = world.bash(f"cat '{notes}'; ls '{folder}'")
    assert not is_error and "PUBLIC-fresh-notes-7c1d" in text and "notes.txt" in text, text
    c = world.client()
    try:
        args = {"pattern": "PUBLIC-fresh-notes", "path": os.path.join(world.home, "w1")}
        r = c.call("grep", args)
    finally:
        c.close()
    assert not r.result["isError"] and "notes.txt" in r.text, r.text


def test_secret_looking_files_in_a_new_folder_are_masked_at_once(world: World) -> None:
    world.bash("true")
    folder = os.path.join(_deep(world, "s"), "fresh")
    notes = os.path.join(folder, "notes.txt")
    _write(world, notes, "PUBLIC-beside-secrets-2e2e\n")
    made = [
        _put(os.path.join(folder, ".env"), "DB_PASSWORD=FAKESECRET-fresh-env-9a9a"),
        _put(os.path.join(folder, "keys", "id_rsa"), "FAKESECRET-fresh-key-8b8b"),
    ]
    words = " ".join(f"'{p}'" for p in made)
    _, text = world.bash(
        f"cat '{notes}' {words} 2>&1; grep -rh FAKESECRET ~/s1 2>/dev/null | head; echo done"
    )
    assert world.leaks(text) == [], text
    assert "PUBLIC-beside-secrets-2e2e" in text and "done" in text, text
    c = world.client()
    try:
        r = c.call("grep", {"pattern": "FAKESECRET", "path": os.path.join(world.home, "s1")})
    finally:
        c.close()
    assert "FAKESECRET-" not in r.text and TOKEN not in r.text, r.text


def test_a_new_folder_past_the_per_call_bound_stays_hidden_whole(world: World) -> None:
    """Bounded: a folder the index left out with more entries than a call looks through is
    hidden whole, as before (nothing in it shows, its secrets least of all)."""
    from omp_a2a_bridge.server.box import host

    folder = os.path.join(_deep(world, "b"), "big")
    os.makedirs(folder)
    for i in range(host.FRESH_MAX_ENTRIES + 5):
        with open(os.path.join(folder, f"f{i:04}.txt"), "w") as f:
            f.write("PUBLIC-big\n")
    _put(os.path.join(folder, ".env"), "K=FAKESECRET-big-env-1f1f")
    _, text = world.bash(f"ls '{folder}' 2>&1; cat '{folder}/.env' 2>&1; echo done")
    assert world.leaks(text) == [] and "done" in text, text
    assert "f0000.txt" not in text, text  # hidden whole (the folder the index left out)
