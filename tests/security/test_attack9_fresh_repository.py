"""Outside review (attack9) of the fresh-folder look: a repository in a folder the roots' index
left out shows its ``.git/config`` credential in the box.

Every other repository the index found in the roots has its git config bound over by a redacted
copy when it holds a credential (``url = https://me:TOKEN@host/…``: ``_git_redacted`` with
``index.repos``). A folder the index left out (past its depth or its budget) used to be hidden
whole, its repositories with it. Now the call's own plan looks into it (``_look_now``): it masks
secret-looking *names*, but skips ``.git`` (``secrets.skipped``) and records no repository, so
nothing redacts that repository's config: the credential the index would have hidden is read
by any boxed ``cat`` - more than before the change showed.

Fixed: a ``.git`` folder the look meets has its config (and what it includes) masked whole when
it holds a credential (``host._credential_configs``).

A real bridge in the box world (roots = the home), real bubblewrap.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.box import secrets

from ..support.boxworld import MARKER, World, world_fixture
from ..support.boxworld import put as _put


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    yield from world_fixture(False, {"approval": {"timeout_s": 0.5}})


def _repository(folder: str, tag: str) -> str:
    """A clone whose remote URL holds a token (as ``git clone https://me:TOKEN@…`` leaves
    it); the config's path."""
    return _put(
        os.path.join(folder, ".git", "config"),
        '[core]\n\trepositoryformatversion = 0\n[remote "origin"]\n'
        f"\turl = https://me:{MARKER}-{tag}@git.example.com/me/r.git\n",
    )


def test_guard_an_indexed_repository_config_is_redacted(world: World) -> None:
    """Guard (holds): a repository the index looked into shows its config redacted."""
    config = _repository(os.path.join(world.home, "work", "indexed"), "indexed-4d4d")
    _put(os.path.join(world.home, "work", "indexed", "README"), "PUBLIC-indexed")
    world.bash("true")  # the index has seen it
    _, text = world.bash(f"cat '{config}' 2>&1; echo done")
    assert "done" in text and world.leaks(text) == [], text


def test_a_repository_in_a_folder_the_index_left_out_keeps_its_credential_hidden(
    world: World,
) -> None:
    world.bash("true")  # the index exists from here on
    levels = [f"g{i}" for i in range(1, secrets.MAX_DEPTH + 2)]
    clone = os.path.join(world.home, *levels, "clone")
    config = _repository(clone, "fresh-5e5e")
    _put(os.path.join(clone, "README"), "PUBLIC-fresh-clone")
    _, text = world.bash(f"cat '{clone}/README' '{config}' 2>&1; echo done")
    assert "done" in text and "PUBLIC-fresh-clone" in text, text  # the folder is looked into
    assert world.leaks(text) == [], text
