"""Small file helpers shared by config, pins and the file tools: private files, atomic replace."""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_private_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 so readers see the old or the new file, never half.

    The temporary file is created 0600 from the start (no 0644 window).
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    atomic_write(path, data, 0o600)


def atomic_write(
    path: str, data: bytes, mode: int, *, prefix: str = ".tmp-", suffix: str = ""
) -> None:
    """The one atomic replace: a temporary file (``mkstemp``: 0600, never another reader's) in
    the target's directory, fsynced, given ``mode``, then renamed over ``path``; on any failure
    the temporary file is removed and the target is untouched.

    (:mod:`server.policy.safeopen` renames relative to a directory fd instead, so a path that moves
    under it cannot redirect the write: a different job.)
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
