"""Talk to the running bridge through its control file (used by the CLI commands)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from .controlfile import ControlInfo, control_path, read_control


class NotRunning(Exception):
    def __init__(self) -> None:
        super().__init__(
            f"a2a-bridge is not running (no live control file at {control_path()}); "
            "start it with 'a2a-bridge' or 'a2a-bridge serve'"
        )


class ControlError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ControlClient:
    def __init__(self, info: ControlInfo, timeout: float = 10.0) -> None:
        self.info = info
        self.timeout = timeout

    @classmethod
    def connect(cls) -> ControlClient:
        info = read_control()
        if info is None:
            raise NotRunning()
        return cls(info)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(  # noqa: S310 - a loopback http URL from our own file
            self.info.url.rstrip("/") + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.info.secret}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                raw = resp.read()
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error") or e.reason
            except ValueError:
                message = str(e.reason)
            raise ControlError(e.code, message) from None
        except (urllib.error.URLError, OSError) as e:
            raise NotRunning() from e
        return json.loads(raw) if raw else None

    def login_page(self) -> str:
        """A ``file://`` URL of a one-time login page (0600, runtime directory): started with
        it, the browser's command line names a file, not the code."""
        import pathlib

        return pathlib.Path(
            self.request("POST", "/api/login-code", {"file": True})["file"]
        ).as_uri()

    def login_url(self) -> str:
        """A one-time page link (60 s, first use): never the secret itself, which would sit
        on the browser's command line for every local user to read."""
        return str(self.request("POST", "/api/login-code")["url"])
