"""File helpers the tools share: friendly errors, text sniffing, atomic writes, glob matching."""

from __future__ import annotations

import errno
import fnmatch
import functools
import os
import re
import stat

from ..infra import fsutil
from .base import ToolError

SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", ".hg", ".svn", ".tox"})
SNIFF_BYTES = 8192

IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(head: bytes) -> str | None:
    for magic, mime in IMAGE_MAGIC:
        if head.startswith(magic):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def is_binary(head: bytes) -> bool:
    return b"\x00" in head


_ERRNO_TEXT = {
    errno.ENOENT: "not found",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "a parent is not a directory",
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "read-only file system",
    errno.ENAMETOOLONG: "name too long",
    errno.ELOOP: "too many symbolic links",
    errno.EEXIST: "already exists",
}


def read_upto(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes from ``fd``, fewer only at the end of the file."""
    chunks = []
    while n > 0:
        chunk = os.read(fd, n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def io_error(e: OSError, shown: str) -> ToolError:
    """A short text for an OS error: what failed and why, never a traceback."""
    why = _ERRNO_TEXT.get(e.errno or 0) or (e.strerror or "I/O error").lower()
    return ToolError(f"{shown}: {why}")


def atomic_write(path: str, data: bytes) -> bool:
    """Replace ``path`` with ``data`` via a temp file + rename in the same directory.

    Keeps an existing file's permission bits; a new file gets the usual umask-derived mode.
    Returns True when the file existed before.
    """
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:  # a file where a parent directory should be
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", directory) from None
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        mode: int | None = stat.S_IMODE(st.st_mode)
        existed = True
    except FileNotFoundError:
        mode = None
        existed = False
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fsutil.atomic_write(path, data, mode, prefix=".a2a-", suffix=".tmp")
    return existed


# Glob pieces: a literal character, ``?``, a ``[...]`` class, ``*`` (inside one component),
# ``**`` (anything) and ``**/`` (nothing, or anything ending in ``/``).
_LIT, _ONE, _CLASS, _STAR, _DSTAR, _DSTAR_SLASH = range(6)
# Past this many unbounded wildcards a backtracking regex can take exponential time
# (``*a*a*a*a*a*a*b`` against a long name): such globs run on the linear matcher instead.
MAX_REGEX_STARS = 2


def _class_end(pattern: str, i: int) -> int:
    """Where the ``[...]`` starting at ``i`` ends, as fnmatch reads it (a ``]`` right after
    ``[`` or ``[!`` is a member); -1 when it never closes (then ``[`` is literal)."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    j = pattern.find("]", j)
    return j


def _class_regex(segment: str) -> str:
    """One ``[...]`` as a regex for one path character, through :func:`fnmatch.translate`,
    which already handles what agents send: ``[]x]``, a reversed range ``[z-a]`` (matches
    nothing), ``[!...]``, backslashes and regex set operators. A class never matches ``/``."""
    regex = fnmatch.translate(segment)
    assert regex.startswith("(?s:") and regex.endswith(")\\Z"), regex
    return "(?!/)" + regex[4:-3]


def _glob_tokens(pattern: str) -> list[tuple[int, str]]:
    if "/" not in pattern:
        pattern = "**/" + pattern
    out: list[tuple[int, str]] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append((_DSTAR_SLASH, "(?:.*/)?"))
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append((_DSTAR, ".*"))
            i += 2
            continue
        if c == "*":
            out.append((_STAR, "[^/]*"))
        elif c == "?":
            out.append((_ONE, "[^/]"))
        elif c == "[":
            j = _class_end(pattern, i)
            if j == -1:
                out.append((_LIT, re.escape(c)))
            else:
                out.append((_CLASS, _class_regex(pattern[i : j + 1])))
                i = j + 1
                continue
        else:
            out.append((_LIT, re.escape(c)))
        i += 1
    return out


class GlobMatcher:
    """A glob matched without backtracking: a set of positions in the pattern advanced one
    character at a time (Thompson's construction), so any glob costs at most
    ``len(path) * len(pattern)`` steps. ``find`` runs it on agent input for every path."""

    def __init__(self, tokens: list[tuple[int, str]]) -> None:
        self.kinds = [k for k, _ in tokens]
        self.classes = [re.compile(t, re.DOTALL) if k == _CLASS else None for k, t in tokens]
        self.lits = [re.sub(r"\\(.)", r"\1", t) if k == _LIT else "" for k, t in tokens]
        self.end = len(tokens)

    def _close(self, states: set[int]) -> set[int]:
        todo = list(states)
        while todo:
            s = todo.pop()
            if (
                0 <= s < self.end
                and self.kinds[s] in (_STAR, _DSTAR, _DSTAR_SLASH)
                and s + 1 not in states
            ):
                states.add(s + 1)
                todo.append(s + 1)
        return states

    def match(self, text: str) -> bool:
        # State s >= 0: before token s. State -(s + 1): inside the ``.*`` of a ``**/`` at s.
        states = self._close({0})
        kinds, lits, classes, end = self.kinds, self.lits, self.classes, self.end
        for ch in text:
            nxt: set[int] = set()
            for s in states:
                if s < 0:
                    nxt.add(s)
                    if ch == "/":
                        nxt.add(-s)  # -(t + 1) -> t + 1
                    continue
                if s >= end:
                    continue
                k = kinds[s]
                if k == _LIT:
                    if lits[s] == ch:
                        nxt.add(s + 1)
                elif k == _ONE:
                    if ch != "/":
                        nxt.add(s + 1)
                elif k == _CLASS:
                    rx = classes[s]
                    if rx is not None and rx.match(ch):
                        nxt.add(s + 1)
                elif k == _STAR:
                    if ch != "/":
                        nxt.add(s)
                elif k == _DSTAR:
                    nxt.add(s)
                else:  # _DSTAR_SLASH: ".*" then "/"
                    nxt.add(-(s + 1))
                    if ch == "/":
                        nxt.add(s + 1)
            if not nxt:
                return False
            states = self._close(nxt)
        return end in states


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str] | GlobMatcher:
    """Compile a glob with ``**`` (any depth), ``*``, ``?`` and ``[...]`` to a matcher (a
    regex when it has few wildcards, else the linear :class:`GlobMatcher`).

    A pattern without a ``/`` matches a name at any depth (``*.py`` finds every Python file).
    """
    tokens = _glob_tokens(pattern)
    stars = sum(1 for k, _ in tokens if k in (_STAR, _DSTAR, _DSTAR_SLASH))
    if stars > MAX_REGEX_STARS:
        return GlobMatcher(tokens)
    return re.compile("".join(t for _, t in tokens) + r"\Z", re.DOTALL)


def walk_files(base: str, limit: int):
    """Yield (relative path, absolute path, is_dir) under ``base``, skipping noise dirs.

    Symlinked directories are listed but not entered. Stops after ``limit`` entries and then
    yields ``None`` once so callers can say the walk was cut short.
    """
    seen = 0
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        rel_dir = os.path.relpath(dirpath, base)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        for d in dirnames:
            seen += 1
            if seen > limit:
                yield None
                return
            yield rel_dir + d, os.path.join(dirpath, d), True
        for f in sorted(filenames):
            seen += 1
            if seen > limit:
                yield None
                return
            yield rel_dir + f, os.path.join(dirpath, f), False
