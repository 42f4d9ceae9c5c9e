"""Small file helpers shared by config, token and audit code: private files, atomic replace."""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_private_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 so readers see the old or the new file, never half.

    The temporary file is created 0600 from the start (no 0644 window) in the same directory,
    fsynced, then renamed over the target.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
