"""The git config files a box shows, and a copy without their credentials to bind over each.

Why: the box must show git its config (``~/.gitconfig``, ``~/.config/git/config``, the
project's ``.git/config``: ``git commit`` needs ``user.name``), but git keeps credentials there
(:mod:`server.policy.gitsecrets`). For each such file that holds one, the box binds a redacted
copy over it, read-only: git still parses it, ``git remote -v`` shows the placeholder.

Blocking (stat, small reads, a write per changed file): call it from ``gather``, in a worker
thread. Bounded: at most :data:`MAX_FILES` files, :data:`~server.policy.gitsecrets.MAX_BYTES`
read from each; a file is read again only when its ``(inode, size, mtime_ns, ctime_ns)``
changed. The copies live in one private folder (0700, files 0600) made per bridge process in the
system's temporary folder (which every box covers with its own ``/tmp``), removed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterable

from ..policy.gitsecrets import MAX_BYTES, redact
from ..policy.private import included_files
from .secrets import RACY_NS

MAX_FILES = 64  # config files looked at per call (globals, includes, every repository's)
MAX_OTHER_REPOS = 512  # other repositories in the roots whose ``.git/config`` is looked at
MAX_INCLUDE_DEPTH = 4  # git itself stops at 10; nobody nests more than a few

_lock = threading.Lock()
_folder: str | None = None
# path -> (stat key, real path, the redacted copy or None when it holds no secret, includes)
_known: dict[str, tuple[tuple[int, int, int, int], str, str | None, tuple[str, ...]]] = {}
_KNOWN_MAX = 512


class Unreadable(Exception):
    """A git config file too big to redact whole: the box shows a comment in its place."""


def repo_configs(git_dirs: Iterable[str]) -> list[str]:
    """Each git dir's ``config`` and ``config.worktree`` (existing or not)."""
    out: list[str] = []
    for d in git_dirs:
        out += [os.path.join(d, "config"), os.path.join(d, "config.worktree")]
    return out


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _copies() -> str:
    """The private folder the copies live in (made once per process)."""
    global _folder
    with _lock:
        if _folder is None or not os.path.isdir(_folder):
            _folder = tempfile.mkdtemp(prefix="a2a-gitconfig-")  # 0700
            atexit.register(shutil.rmtree, _folder, True)
        return _folder


def _write_copy(real: str, text: str) -> str:
    """A 0600 file holding ``text``, replaced atomically (a running box keeps the inode it
    bound)."""
    folder = _copies()
    name = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:24]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".new-")  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        final = os.path.join(folder, name + ".gitconfig")
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return final


def _look(path: str, home: str) -> tuple[str, str | None, tuple[str, ...]]:
    """(real path, the redacted copy or None, the files it includes) of one existing config
    file; an unchanged file costs one ``stat`` (no read, no ``realpath``). Raises
    :class:`Unreadable` for a file over :data:`MAX_BYTES` (it may hold more than its head),
    :class:`OSError` for one that is not there or no regular file."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise IsADirectoryError(path)
    key = _key(st)
    with _lock:
        hit = _known.get(path)
    if hit is not None and hit[0] == key and (hit[2] is None or os.path.exists(hit[2])):
        return hit[1], hit[2], hit[3]
    real = os.path.realpath(path)
    with open(real, "rb") as f:
        st = os.fstat(f.fileno())
        key = _key(st)
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise Unreadable(real)
    text = data.decode("utf-8", "surrogateescape")
    redaction = redact(text)
    copy = _write_copy(real, redaction.text) if redaction.changed else None
    includes = tuple(included_files(path, real, text, home))
    if st.st_ctime_ns < time.time_ns() - RACY_NS:  # else it may change within the same tick
        with _lock:
            if len(_known) >= _KNOWN_MAX:
                _known.pop(next(iter(_known)))
            _known[path] = (key, real, copy, includes)
    return real, copy, includes


TOO_BIG = "# omp A2A bridge: this git config file is over 256 KiB; the box does not show it\n"


def redacted(candidates: Iterable[str], home: str, limit: int = MAX_FILES) -> list[tuple[str, str]]:
    """For the config files among ``candidates`` (and the files they include): the
    ``(real path, copy)`` pairs of those that hold a credential (the copy is redacted) or are
    too big to read whole (the copy is a comment). Files that do not exist are skipped; at
    most ``limit`` files are looked at."""
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    todo = [(p, 0) for p in candidates]
    looked = 0
    while todo and looked < limit:
        path, depth = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            real, copy, includes = _look(path, home)
        except Unreadable as e:
            real = str(e)
            pairs.append((real, _write_copy(real, TOO_BIG)))
            continue
        except (OSError, ValueError):
            continue
        looked += 1
        if copy is not None:
            pairs.append((real, copy))
        if depth < MAX_INCLUDE_DEPTH:
            todo += [(p, depth + 1) for p in includes]
    return list(dict.fromkeys(pairs))
