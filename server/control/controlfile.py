"""``control.json``: how local tools find the running bridge, and the single-instance marker.

It lives in the user's runtime directory (or ``$A2A_BRIDGE_RUNTIME_DIR``), mode 0600, and holds
``pid``, ``url`` (the control API), ``secret`` and ``mcp_url``. It is created exclusively, so
two instances cannot both claim it. A file left behind is stale when its process is gone *or*
when nothing answers as a bridge at its control URL with its secret (the pid may have been
reused by an unrelated process). The directory must be ours and private (no group/other
access): the secret in it opens the control API, which hands out the MCP token.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import stat
import warnings
from typing import Any
from urllib.parse import urlsplit

import platformdirs

from .. import APP_NAME
from ..errors import AlreadyRunning, RuntimeDirError
from .info import ControlInfo  # the record itself lives apart (errors.py names it too)

FILE_NAME = "control.json"
PROBE_TIMEOUT_S = 2.0


def runtime_dir() -> str:
    explicit = os.environ.get("A2A_BRIDGE_RUNTIME_DIR")
    if explicit:
        return explicit
    with warnings.catch_warnings():  # no XDG_RUNTIME_DIR: its /tmp fallback is fine for us
        warnings.simplefilter("ignore")
        return platformdirs.user_runtime_dir(APP_NAME, appauthor=False)


def control_path() -> str:
    return os.path.join(runtime_dir(), FILE_NAME)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def answers_as_bridge(info: ControlInfo, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Does a bridge answer at ``info.url`` with ``info.secret``?

    Refused or foreign answers mean no (the pid was reused); a bridge too busy to answer in
    time counts as yes, so two instances never run at once.
    """
    try:
        parts = urlsplit(info.url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            return False
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        try:
            conn.request("GET", "/api/status", headers={"Authorization": f"Bearer {info.secret}"})
            resp = conn.getresponse()
            body = resp.read(1 << 20)
        finally:
            conn.close()
    except TimeoutError:
        return True
    except (OSError, ValueError, http.client.HTTPException):
        return False
    if resp.status != 200:
        return False
    try:
        return json.loads(body).get("mcp_url") == info.mcp_url
    except (ValueError, AttributeError):
        return False


def check_runtime_dir(directory: str) -> None:
    """Raise :class:`RuntimeDirError` unless ``directory`` is safe for the secret (POSIX).

    Safe: a directory owned by us that no one else can write to, in a parent owned by us or
    root that others cannot rename it in (not writable by others, or sticky like ``/tmp``).
    Readable by others is fine: the file itself is 0600.
    """
    if not hasattr(os, "getuid"):
        return
    fix = "set A2A_BRIDGE_RUNTIME_DIR (or XDG_RUNTIME_DIR) to a private directory"
    uid = os.getuid()
    try:
        st = os.lstat(directory)
        parent = os.stat(os.path.dirname(os.path.abspath(directory)))
    except OSError as e:
        raise RuntimeDirError(f"runtime directory {directory}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeDirError(f"runtime directory {directory} is not a directory; {fix}")
    if st.st_uid != uid:
        raise RuntimeDirError(
            f"runtime directory {directory} belongs to uid {st.st_uid}, not to you "
            f"(uid {uid}); refusing to put the control secret there; {fix}"
        )
    if st.st_mode & 0o022:
        raise RuntimeDirError(
            f"runtime directory {directory} is writable by other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}); run 'chmod 700 {directory}' or {fix}"
        )
    if parent.st_uid not in (uid, 0) or (
        parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX
    ):
        raise RuntimeDirError(
            f"runtime directory {directory} is inside a folder other users control "
            f"(owner uid {parent.st_uid}, mode {stat.S_IMODE(parent.st_mode):o}); {fix}"
        )


def prepare_runtime_dir(directory: str | None = None) -> str:
    """Create the runtime directory (0700) if needed and check it is ours and private."""
    directory = directory or runtime_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as e:
        raise RuntimeDirError(
            f"cannot create the runtime directory {directory}: {e.strerror or e}"
        ) from None
    check_runtime_dir(directory)
    return directory


def read_control(path: str | None = None, verify: bool = True) -> ControlInfo | None:
    """The live instance's control info; None when nothing runs (a stale file is ignored).

    A file not owned by us is ignored (someone else could have planted it). With ``verify``,
    a file of another process counts only if a bridge answers at its URL with its secret.
    """
    path = path or control_path()
    try:
        with open(path, encoding="utf-8") as f:
            if hasattr(os, "getuid") and os.fstat(f.fileno()).st_uid != os.getuid():
                return None
            raw: Any = json.load(f)
        info = ControlInfo(
            int(raw["pid"]), str(raw["url"]), str(raw["secret"]), str(raw["mcp_url"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not pid_alive(info.pid):
        return None
    if verify and info.pid != os.getpid() and not answers_as_bridge(info):
        return None
    return info


def claim(info: ControlInfo, path: str | None = None) -> str:
    """Create the control file exclusively; raise AlreadyRunning if a live instance holds it."""
    path = path or control_path()
    prepare_runtime_dir(os.path.dirname(path))
    data = json.dumps(
        {"pid": info.pid, "url": info.url, "secret": info.secret, "mcp_url": info.mcp_url}
    ).encode()
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            live = read_control(path)
            if live is not None and live.pid != info.pid:
                raise AlreadyRunning(live) from None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # stale: its process is gone
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path
    raise OSError(f"could not create {path}")


def release(info: ControlInfo, path: str | None = None) -> None:
    """Remove the control file if it is still ours."""
    path = path or control_path()
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        if raw.get("pid") == info.pid and raw.get("secret") == info.secret:
            os.unlink(path)
    except (OSError, ValueError):
        pass
