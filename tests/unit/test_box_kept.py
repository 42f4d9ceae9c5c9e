"""server/box/kept.py: folder looks kept while the folder's key is unchanged."""

from __future__ import annotations

import os
import sys

import pytest

from omp_a2a_bridge.server.box import kept
from omp_a2a_bridge.server.box.kept import Kept, Kind, folder_key, forget_if_remounted, listing


def test_kept_listings_see_an_added_and_a_removed_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(
        "omp_a2a_bridge.server.box.secrets.RACY_NS", 0
    )  # keep even what changed a moment ago
    folder = str(tmp_path)
    (tmp_path / "a").write_text("")
    first = listing(folder)
    assert first is not None and [n for n, _ in first] == ["a"]
    assert listing(folder) is first  # kept: the folder did not change
    (tmp_path / "b").mkdir()
    kinds = dict(listing(folder) or ())
    assert kinds == {"a": Kind.FILE, "b": Kind.DIR}
    os.unlink(tmp_path / "a")
    os.rmdir(tmp_path / "b")
    (tmp_path / "b").symlink_to("/")
    assert dict(listing(folder) or ()) == {"b": Kind.LINK}


@pytest.mark.skipif(sys.platform != "linux", reason="the mount table is watched on Linux")
def test_kept_looks_from_before_the_mount_table_was_watched_are_dropped(tmp_path, monkeypatch):
    """A look kept before the bridge watched the mount table may be of a disk since swapped
    for another with the same key (attack8 #2): the first watch drops every kept look, and a
    folder's key holds its device."""
    monkeypatch.setattr("omp_a2a_bridge.server.box.secrets.RACY_NS", 0)
    monkeypatch.setattr("omp_a2a_bridge.server.box.kept._MOUNTS", [])
    folder = str(tmp_path)
    (tmp_path / "a").write_text("")
    assert listing(folder) is listing(folder)  # kept
    key = folder_key(folder)
    assert key is not None and key[3] == os.stat(folder).st_dev
    forget_if_remounted()
    assert folder not in kept._LISTINGS.items()  # noqa: SLF001 - the test looks inside


def test_a_look_begun_before_a_remount_is_not_kept(tmp_path, monkeypatch):
    """A look that spans a drop (a disk swapped under the folder meanwhile, attack8 #2) may
    be of the file system that is gone: it is not kept, even under an unchanged key."""
    monkeypatch.setattr("omp_a2a_bridge.server.box.secrets.RACY_NS", 0)
    box: Kept[str] = Kept(4)
    folder = str(tmp_path)
    key = folder_key(folder)
    assert key is not None
    since = kept.generation()
    monkeypatch.setattr(kept, "_generation", [since + 1])  # a drop happened meanwhile
    box.keep(folder, key, "old disk", since)
    assert box.get(folder, key) is None
    box.keep(folder, key, "new disk", kept.generation())
    assert box.get(folder, key) == "new disk"


def test_kept_looks_are_bounded_and_a_changed_key_misses(tmp_path, monkeypatch):
    monkeypatch.setattr("omp_a2a_bridge.server.box.secrets.RACY_NS", 0)
    box: Kept[int] = Kept(2)
    folders = [tmp_path / n for n in "abc"]
    for i, f in enumerate(folders):
        f.mkdir()
        key = folder_key(str(f))
        assert key is not None
        box.keep(str(f), key, i, kept.generation())
    assert len(box.items()) == 2 and str(folders[0]) not in box.items()  # the oldest went
    (folders[2] / "x").write_text("")
    assert box.get(str(folders[2]), folder_key(str(folders[2])) or (0, 0, 0, 0)) is None
