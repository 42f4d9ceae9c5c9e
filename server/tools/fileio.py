"""File helpers the tools share: friendly errors, text sniffing, atomic writes, glob matching."""

from __future__ import annotations

import errno
import functools
import os
import re
import stat

from .. import fsutil
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


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob with ``**`` (any depth), ``*``, ``?`` and ``[...]`` to a regex.

    A pattern without a ``/`` matches a name at any depth (``*.py`` finds every Python file).
    """
    if "/" not in pattern:
        pattern = "**/" + pattern
    out = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


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
