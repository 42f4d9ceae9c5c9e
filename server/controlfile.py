"""``control.json``: how local tools find the running bridge, and the single-instance marker.

It lives in the user's runtime directory (or ``$A2A_BRIDGE_RUNTIME_DIR``), mode 0600, and holds
``pid``, ``url`` (the control API), ``secret`` and ``mcp_url``. It is created exclusively, so
two instances cannot both claim it; a file left behind by a dead process is detected by its pid
and replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass
from typing import Any

import platformdirs

from . import APP_NAME

FILE_NAME = "control.json"


def runtime_dir() -> str:
    explicit = os.environ.get("A2A_BRIDGE_RUNTIME_DIR")
    if explicit:
        return explicit
    with warnings.catch_warnings():  # no XDG_RUNTIME_DIR: its /tmp fallback is fine for us
        warnings.simplefilter("ignore")
        return platformdirs.user_runtime_dir(APP_NAME, appauthor=False)


def control_path() -> str:
    return os.path.join(runtime_dir(), FILE_NAME)


@dataclass(frozen=True)
class ControlInfo:
    pid: int
    url: str
    secret: str
    mcp_url: str

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http") :] + "api/events"


class AlreadyRunning(Exception):
    def __init__(self, info: ControlInfo) -> None:
        super().__init__(f"already running (pid {info.pid}, {info.mcp_url})")
        self.info = info


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


def read_control(path: str | None = None) -> ControlInfo | None:
    """The live instance's control info; None when nothing runs (a stale file is ignored)."""
    path = path or control_path()
    try:
        with open(path, encoding="utf-8") as f:
            raw: Any = json.load(f)
        info = ControlInfo(
            int(raw["pid"]), str(raw["url"]), str(raw["secret"]), str(raw["mcp_url"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if pid_alive(info.pid) else None


def claim(info: ControlInfo, path: str | None = None) -> str:
    """Create the control file exclusively; raise AlreadyRunning if a live instance holds it."""
    path = path or control_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
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
