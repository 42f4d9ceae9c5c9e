"""The roots' index of secret-looking files (server/box/secrets.py), on a real folder tree.

Both ways it keeps current are tested: inotify (Linux) and the per-call mtime check used
elsewhere and for folders past the watch limit (forced here by giving the index no watcher).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from omp_a2a_bridge.server.box import secrets
from omp_a2a_bridge.server.box.host import _name_matcher
from omp_a2a_bridge.server.box.secrets import SecretIndex


def _put(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(params=["inotify", "mtime"])
def make(request, monkeypatch) -> Callable[..., SecretIndex]:
    if request.param == "mtime":
        monkeypatch.setattr(secrets, "_watcher", lambda: None)
    made: list[SecretIndex] = []

    def build(*tops: Path, home: Path | None = None, max_dirs: int = 1000) -> SecretIndex:
        index = SecretIndex([str(t) for t in tops], str(home or tops[0]), _name_matcher(), max_dirs)
        made.append(index)
        return index

    yield build
    for index in made:
        index.close()


def _found(index: SecretIndex, top: Path) -> set[str]:
    return {os.path.relpath(p, top) for p in index.view().secrets}


def test_finds_secret_names_not_templates_nor_the_hidden_home(tmp_path, make):
    _put(tmp_path / "a" / ".env")
    _put(tmp_path / "a" / ".env.example")
    _put(tmp_path / "b" / "deep" / "er" / "id_ed25519")
    _put(tmp_path / "b" / "deep" / "er" / "id_ed25519.pub")
    _put(tmp_path / "c" / "prod.tfstate")
    _put(tmp_path / "c" / "README.md")
    _put(tmp_path / ".ssh" / "id_rsa")  # the hidden tree: hidden whole by the box
    _put(tmp_path / "d" / "node_modules" / "x" / ".env")  # a dependency tree: skipped
    (tmp_path / "e").mkdir()
    os.symlink(tmp_path / "a" / ".env", tmp_path / "e" / ".env")  # judged where it points
    (tmp_path / "f").mkdir()
    os.mkfifo(tmp_path / "f" / ".env")  # a password manager's pipe: a secret all the same
    index = make(tmp_path)
    assert _found(index, tmp_path) == {
        "a/.env",
        "b/deep/er/id_ed25519",
        "c/prod.tfstate",
        "f/.env",
    }
    assert index.view().complete
    # a secret-looking link is listed: the box hides what it points to, per call
    assert index.view().links == (str(tmp_path / "e" / ".env"),)


def test_a_secret_made_later_is_found_before_the_next_call(tmp_path, make):
    _put(tmp_path / "proj" / "README.md")
    index = make(tmp_path)
    assert _found(index, tmp_path) == set()
    _put(tmp_path / "proj" / ".env")
    _put(tmp_path / "new" / "sub" / "credentials.json")
    assert _found(index, tmp_path) == {"proj/.env", "new/sub/credentials.json"}


def test_a_rename_into_and_out_of_a_secret_name(tmp_path, make):
    _put(tmp_path / "p" / "notes.txt")
    _put(tmp_path / "q" / ".env")
    index = make(tmp_path)
    assert _found(index, tmp_path) == {"q/.env"}
    os.rename(tmp_path / "p" / "notes.txt", tmp_path / "p" / ".env.production")
    os.rename(tmp_path / "q" / ".env", tmp_path / "q" / "plain.txt")
    assert _found(index, tmp_path) == {"p/.env.production"}


def test_a_moved_and_a_replaced_folder(tmp_path, make):
    _put(tmp_path / "a" / "sub" / ".env")
    _put(tmp_path / "c" / "old.txt")
    index = make(tmp_path)
    assert _found(index, tmp_path) == {"a/sub/.env"}
    os.rename(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "c")
    _put(tmp_path / "c" / "x" / "server.key")
    assert _found(index, tmp_path) == {"b/sub/.env", "c/x/server.key"}
    # the new folders are kept current too (their watches are new ones)
    _put(tmp_path / "b" / "sub" / "more" / ".pgpass")
    _put(tmp_path / "c" / "x" / ".netrc")
    assert _found(index, tmp_path) == {
        "b/sub/.env",
        "b/sub/more/.pgpass",
        "c/x/server.key",
        "c/x/.netrc",
    }
    shutil.rmtree(tmp_path / "b")
    assert _found(index, tmp_path) == {"c/x/server.key", "c/x/.netrc"}


def test_several_roots_and_a_budget_that_says_it_stopped(tmp_path, make):
    one, two = tmp_path / "one", tmp_path / "two"
    _put(one / "x" / ".env")
    _put(two / "y" / "id_rsa")
    both = make(one, two, home=tmp_path / "home")
    assert {os.path.relpath(p, tmp_path) for p in both.view().secrets} == {
        "one/x/.env",
        "two/y/id_rsa",
    }
    for i in range(10):
        (tmp_path / "many" / f"d{i}" / "e").mkdir(parents=True)
    small = make(tmp_path / "many", max_dirs=5)
    view = small.view()
    assert view.folders == 5 and not view.complete
    # what the budget left out is listed (the box hides it whole), never silently dropped
    listed = {os.path.relpath(p, tmp_path / "many") for p in view.unindexed}
    # many + 4 d* looked into: the 6 other d* and the 4 e below those looked into are listed
    assert len(listed) == 10 and listed <= {f"d{i}" for i in range(10)} | {
        f"d{i}/e" for i in range(10)
    }
    _put(tmp_path / "many" / "late" / ".env")  # a new folder while the budget is full
    assert str(tmp_path / "many" / "late") in small.view().unindexed
    for i in range(10):
        shutil.rmtree(tmp_path / "many" / f"d{i}")
    view = small.view()  # room again: the left-out folder is looked into
    assert view.complete and view.secrets == (str(tmp_path / "many" / "late" / ".env"),)


def test_past_the_depth_limit_a_folder_is_listed_not_looked_into(tmp_path, make):
    deep = tmp_path.joinpath(*[f"l{i}" for i in range(secrets.MAX_DEPTH + 2)])
    _put(deep / ".env")
    view = make(tmp_path).view()
    assert view.secrets == ()
    assert view.unindexed == (str(tmp_path.joinpath(*[f"l{i}" for i in range(17)])),)


def test_one_index_per_set_of_roots(tmp_path, monkeypatch):
    monkeypatch.setattr(secrets, "_INDEXES", {})
    a = secrets.index_for((str(tmp_path),), str(tmp_path), _name_matcher())
    assert secrets.index_for((str(tmp_path),), str(tmp_path), _name_matcher()) is a
    other = tmp_path / "o"
    other.mkdir()
    b = secrets.index_for((str(other),), str(tmp_path), _name_matcher())
    assert b is not a
    assert secrets.index_for((str(other),), str(tmp_path), _name_matcher()) is b
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".env").write_text("s")
    assert a.view().secrets == (str(tmp_path / "x" / ".env"),)  # closed: walks again
    b.close()


def test_a_lost_event_queue_walks_again(tmp_path, make):
    """More events than the kernel queues (an overflow): the index walks the roots again."""
    (tmp_path / "big").mkdir()
    index = make(tmp_path)
    assert _found(index, tmp_path) == set()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    for i in range(limit + 10):
        (tmp_path / "big" / f"f{i}").touch()
    _put(tmp_path / "big" / "last" / ".env")
    assert _found(index, tmp_path) == {"big/last/.env"}


def test_two_folders_swapped_by_name_stay_watched(tmp_path, make):
    """``mv a t; mv b a``: the watch of the old ``a`` now belongs to ``t``; looking at the new
    ``a`` again must not take it away (a later secret in ``t`` went unseen)."""
    _put(tmp_path / "a" / "x" / "one.txt")
    _put(tmp_path / "b" / "y" / "two.txt")
    index = make(tmp_path)
    assert _found(index, tmp_path) == set()
    os.rename(tmp_path / "a", tmp_path / "t")
    os.rename(tmp_path / "b", tmp_path / "a")
    assert _found(index, tmp_path) == set()
    _put(tmp_path / "t" / ".env")
    _put(tmp_path / "t" / "x" / "id_rsa")
    _put(tmp_path / "a" / "y" / "server.key")
    assert _found(index, tmp_path) == {"t/.env", "t/x/id_rsa", "a/y/server.key"}


def test_a_folder_made_at_the_depth_limit_later_is_listed(tmp_path, make):
    edge = tmp_path.joinpath(*[f"l{i}" for i in range(secrets.MAX_DEPTH)])  # at the limit
    edge.mkdir(parents=True)
    index = make(tmp_path)
    assert index.view().complete
    _put(edge / "deeper" / ".env")
    assert index.view().unindexed == (str(edge / "deeper"),)


def test_a_folder_moved_to_another_parent_stays_watched(tmp_path, make):
    """An outside review: a folder moved up a level is looked into at its new path with the
    same watch (a watch is its inode's); forgetting the old path removed it, and the moved
    folder went deaf. Both orders: the new parent first (up a level) and last."""
    for src, dst in (("down/app", "app"), ("a/app", "z/app")):
        (tmp_path / src / "cfg").mkdir(parents=True)
        (tmp_path / dst).parent.mkdir(parents=True, exist_ok=True)
    index = make(tmp_path)
    assert _found(index, tmp_path) == set()
    os.rename(tmp_path / "down" / "app", tmp_path / "app")
    os.rename(tmp_path / "a" / "app", tmp_path / "z" / "app")
    assert _found(index, tmp_path) == set()
    _put(tmp_path / "app" / ".env")
    _put(tmp_path / "app" / "cfg" / "id_rsa")
    _put(tmp_path / "z" / "app" / "cfg" / ".pgpass")
    assert _found(index, tmp_path) == {"app/.env", "app/cfg/id_rsa", "z/app/cfg/.pgpass"}


def test_a_folder_made_below_the_last_level_later_is_listed_as_not_looked_into(tmp_path, make):
    last = tmp_path.joinpath(*[f"l{i}" for i in range(secrets.MAX_DEPTH)])
    last.mkdir(parents=True)
    index = make(tmp_path)
    assert index.view().complete
    _put(last / "late" / ".env")
    assert index.view().unindexed == (str(last / "late"),)


def test_a_folder_whose_mtime_is_set_back_is_still_looked_at_again(tmp_path, make, monkeypatch):
    """An outside review: where a folder has no watch, its ``mtime`` said whether it changed,
    and ``tar``, ``rsync -a``, ``cp -a`` and ``touch -d`` set a folder's ``mtime`` back after
    writing into it. Its ``ctime`` cannot be set: both are compared."""
    monkeypatch.setattr(secrets, "RACY_NS", 0)  # no "too recent to trust" re-looks here
    (tmp_path / "d").mkdir()
    old = 1_600_000_000_000_000_000
    os.utime(tmp_path / "d", ns=(old, old))
    index = make(tmp_path)
    assert _found(index, tmp_path) == set()
    _put(tmp_path / "d" / ".env")
    os.utime(tmp_path / "d", ns=(old, old))
    assert _found(index, tmp_path) == {"d/.env"}


def test_a_folder_replaced_under_the_same_name_is_looked_into_anew(tmp_path, make):
    """``mv app app.old && mkdir -p app/cfg``: the new ``app/cfg`` is another folder (the old
    records' watches follow the old inodes to ``app.old``)."""
    (tmp_path / "app" / "cfg" / "sub").mkdir(parents=True)
    index = make(tmp_path)
    assert _found(index, tmp_path) == set()
    os.rename(tmp_path / "app", tmp_path / "app.old")
    (tmp_path / "app" / "cfg" / "sub").mkdir(parents=True)
    assert _found(index, tmp_path) == set()
    _put(tmp_path / "app" / "cfg" / ".env")
    _put(tmp_path / "app" / "cfg" / "sub" / "id_rsa")
    assert _found(index, tmp_path) == {"app/cfg/.env", "app/cfg/sub/id_rsa"}
    _put(tmp_path / "app.old" / "cfg" / ".pgpass")  # the old folders are watched as theirs
    assert _found(index, tmp_path) == {"app/cfg/.env", "app/cfg/sub/id_rsa", "app.old/cfg/.pgpass"}


@pytest.mark.parametrize(
    ("name", "top", "skipped"),
    [
        ("node_modules", False, True),
        (".mypy_cache", False, True),
        (".parcel-cache", False, True),
        ("Caches", False, True),
        ("go", True, True),  # ~/go: GOPATH
        ("go", False, False),  # a project's Go tree
        ("cache-service", False, False),  # a project named like a cache
        ("memcached-ops", True, False),
        ("snap", False, False),
    ],
)
def test_which_folder_names_the_index_skips(name, top, skipped):
    assert secrets.skipped(name, top) is skipped


def test_lists_the_folders_that_hold_a_git_folder(tmp_path, make):
    """Their ``.git/config`` may hold a credential: the box binds a redacted copy over it."""
    (tmp_path / "a" / ".git").mkdir(parents=True)
    (tmp_path / "b" / "c" / ".git").mkdir(parents=True)
    _put(tmp_path / "d" / ".git")  # a ``.git`` file (a worktree): its config lies elsewhere
    index = make(tmp_path)
    assert index.view().repos == (str(tmp_path / "a"), str(tmp_path / "b" / "c"))
