"""Looks at folders kept while the folder is unchanged: the box's planning asks the same folders
every call (the project, ``/``, ``/var``, the ``box.read_allow`` folders), and a ``scandir``
with a ``stat`` per entry cost more than the rest of the plan.

A folder's :data:`Key` is its inode, ``mtime``, ``ctime`` and device. Adding, removing or
renaming a name in a folder changes its times, and ``st_ctime`` cannot be set back by a process
(``touch -d`` sets ``mtime`` only). A look taken within :data:`~server.box.secrets.RACY_NS` of
the folder's last change is not kept (a second change in the same clock tick would leave the
key as it was), nor one whose folder changed while it was looked at. An inode number and times
are only unique within one file system, and a mount point shows another file system under the
same path (every ext4 root is inode 2; a reproducible image's times are all one instant), so
every kept look is dropped when the mount table changes (:func:`forget_if_remounted`).

What can change without the folder changing is never kept here: a file's mode or link count,
a file's content. Blocking (``stat``, ``scandir``): call from a worker thread.
"""

from __future__ import annotations

import enum
import os
import select
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from . import secrets

Key = tuple[int, int, int, int]  # (inode, mtime_ns, ctime_ns, device)
V = TypeVar("V")

_lock = threading.Lock()  # planning runs in several worker threads
_all: list[Kept[object]] = []
_generation = [0]  # counts the drops (a remount): a look begun before one is not kept


def generation() -> int:
    """Take it before looking at a folder; hand it to :meth:`Kept.keep`."""
    return _generation[0]


def folder_key(folder: str) -> Key | None:
    """``folder``'s key; None when it is not a folder (gone, a symlink, a file) or cannot be
    looked at."""
    try:
        st = os.stat(folder, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_dev)


def settled(key: Key) -> bool:
    """Whether a look taken under ``key`` may be kept: the folder's last change is older than
    the racy window."""
    return key[2] < time.time_ns() - secrets.RACY_NS


class Kept(Generic[V]):
    """One kind of look, per folder path, at most ``limit`` (the oldest goes first)."""

    def __init__(self, limit: int) -> None:
        self._items: dict[str, tuple[Key, V]] = {}
        self._limit = limit
        _all.append(self)  # type: ignore[arg-type]  # dropped together on a remount

    def get(self, folder: str, key: Key) -> V | None:
        """The look kept for ``folder`` under ``key``, or None."""
        with _lock:
            kept = self._items.get(folder)
        return kept[1] if kept is not None and kept[0] == key else None

    def keep(self, folder: str, key: Key, value: V, since: int) -> None:
        """Keep ``value``, looked at under ``key`` from :func:`generation` ``since``, if the
        folder is settled and still has that key (it did not change while it was looked at)."""
        if settled(key) and folder_key(folder) == key:
            self.put(folder, key, value, since)

    def put(self, folder: str, key: Key, value: V, since: int) -> None:
        """Keep ``value`` under ``key`` as it is (the caller checked every folder it read),
        unless the kept looks were dropped since the look began (``since``)."""
        with _lock:
            if _generation[0] != since:
                return  # a remount meanwhile: the look may be of the file system gone
            if len(self._items) >= self._limit and folder not in self._items:
                self._items.pop(next(iter(self._items)))
            self._items[folder] = (key, value)

    def items(self) -> dict[str, tuple[Key, V]]:
        """A copy, for tests and diagnostics."""
        with _lock:
            return dict(self._items)

    def clear(self) -> None:
        with _lock:
            self._items.clear()


class Kind(enum.Enum):
    """What a folder entry is, without following a symlink."""

    DIR = "dir"
    FILE = "file"
    LINK = "link"
    OTHER = "other"  # a socket, a pipe, a device


Listing = tuple[tuple[str, Kind], ...]
_LISTINGS: Kept[Listing] = Kept(512)


def listing(folder: str) -> Listing | None:
    """(name, kind) of each entry of ``folder``, in ``scandir`` order; None when it cannot be
    listed (gone, not a folder, no permission). One ``stat`` when nothing changed since it was
    kept, instead of a ``scandir`` and a ``stat`` per entry."""
    since = generation()
    key = folder_key(folder)
    if key is None:
        return None
    kept = _LISTINGS.get(folder, key)
    if kept is not None:
        return kept
    out: list[tuple[str, Kind]] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    if entry.is_symlink():
                        kind = Kind.LINK
                    elif entry.is_dir(follow_symlinks=False):
                        kind = Kind.DIR
                    elif entry.is_file(follow_symlinks=False):
                        kind = Kind.FILE
                    else:
                        kind = Kind.OTHER
                except OSError:
                    continue
                out.append((entry.name, kind))
    except OSError:
        return None
    found = tuple(out)
    _LISTINGS.keep(folder, key, found, since)
    return found


# The mount table's poll (Linux), opened at the first look: it fires once per change of the
# table. Its file is kept open with it.
_MOUNTS: list[tuple[object, Callable[[float], list[tuple[int, int]]]]] = []


def forget_if_remounted() -> None:
    """Drop every kept look when something was mounted or unmounted since the last call: a
    folder's key does not tell a file system from another mounted in its place (a second SD
    card in the same reader, a loop device reused for another image: the same device, the
    same root inode, and a reproducible image's times are all one instant). One ``poll``.
    What was kept before the table was first watched is dropped too. Elsewhere (macOS) the
    key's device is all there is."""
    if sys.platform != "linux":
        return
    with _lock:
        if _MOUNTS:
            changed = bool(_MOUNTS[0][1](0))
        else:
            try:
                f = open("/proc/self/mountinfo", "rb")  # noqa: SIM115 - kept open for good
            except OSError:
                return
            watcher = select.poll()
            watcher.register(f.fileno(), select.POLLPRI)
            _MOUNTS.append((f, watcher.poll))
            changed = True
        if changed:
            _generation[0] += 1
            for kind in _all:
                kind._items.clear()  # noqa: SLF001 - one lock for all kinds
