"""Clients for the control API in tests: REST with the secret or a cookie, and the events socket."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
import urllib.parse
import urllib.request
from typing import Any

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from omp_a2a_bridge.server.control.controlfile import ControlInfo
from omp_a2a_bridge.server.present.delta import apply_event

from .helpers import Http


class Api(Http):
    """Control-API client: bearer secret by default, or a page cookie."""

    def __init__(self, info: ControlInfo, secret: str | bool | None = True) -> None:
        port = int(info.url.rsplit(":", 1)[1].strip("/"))
        super().__init__(port, token=info.secret if secret is True else secret or None)

    def call(self, method: str, path: str, body=None, **kw):
        return self.request(method, body=body, path=path, **kw)


def with_control(start_bridge: Any, timeout_s: float) -> Any:
    """A bridge with the control API on: ``.info`` (the control file's data) and ``.api`` (a
    client with the secret) attached to the running bridge."""
    # bash asks here: the control tests hold bash calls (its default tier, box, runs unasked)
    approval = {"timeout_s": timeout_s, "tiers": {"bash": "prompt"}}
    running = start_bridge({"approval": approval}, control=True)
    running.info = running.runner.control
    running.api = Api(running.info)
    return running


class WsApprover:
    """An events WebSocket on its own thread and loop: while open, it is an approver.

    With ``diffs`` it asks for the diff form: ``messages`` holds what came, ``snapshots``
    the states they add up to (:func:`server.present.delta.apply_event`)."""

    def __init__(
        self, info: ControlInfo, headers: dict[str, str] | None = None, diffs: bool = False
    ) -> None:
        self.info = info
        self.diffs = diffs
        self.snapshots: list[dict] = []
        self.messages: list[dict] = []
        self.headers = {"Authorization": f"Bearer {info.secret}"} if headers is None else headers
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.ended = threading.Event()  # the server's side of the socket is gone
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        assert self.ready.wait(30), self.error
        if self.error:
            raise self.error

    async def _run(self) -> None:
        try:
            self.ws = await websocket_connect(
                HTTPRequest(
                    self.info.ws_url + "?as=pytest%20page" + ("&diff=1" if self.diffs else ""),
                    headers=self.headers,
                )
            )
        except BaseException as e:
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        try:
            while (msg := await self.ws.read_message()) is not None:
                message = json.loads(msg)
                self.messages.append(message)
                last = self.snapshots[-1] if self.snapshots else None
                state = apply_event(last, message) if self.diffs else message
                assert state is not None, f"a diff that does not follow: {message}"
                self.snapshots.append(state)
        finally:
            self.ended.set()

    def send(self, text: str) -> None:
        self.loop.call_soon_threadsafe(self.ws.write_message, text)

    def close(self) -> None:
        """Close the socket and wait for the server's close reply (or the connection's end)."""
        self.loop.call_soon_threadsafe(self.ws.close)
        self.ended.wait(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def login_page_text(url: str) -> str:
    """What a browser was started with to open the page: a ``file://`` URL of a 0600 login
    page whose one-time code is inside the file, never in the URL. Returns the page."""
    assert url.startswith("file:///") and "code" not in url, url
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    assert os.path.basename(path).startswith("login-"), path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        return f.read()


def login_page_code(url: str) -> str:
    return login_page_text(url).split('name="code" value="', 1)[1].split('"', 1)[0]
