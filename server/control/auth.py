"""Who may use the control API: the checks every request passes, and the page's logins.

Why apart from the handlers: this is the whole security boundary of the second listener
(``Host`` a loopback name, no foreign ``Origin``, then the bearer secret or the page's cookie,
with the CSRF token on a cookie request that changes state), so it is read and tested on its
own; :mod:`server.control.endpoints` and :mod:`server.control.server` only add endpoints on top.
The login codes live here too: ``POST /api/login-code`` (bearer only) mints one, ``/login``
spends it, once, within 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import json
import logging
import os
import re
import secrets
import time
import weakref
from typing import TYPE_CHECKING, Any

from tornado import web

from ..mcp.protocol import bearer_token, host_name, is_loopback_name
from .controlfile import runtime_dir
from .feed import EventFeed
from .peer import Peer, find_peer

if TYPE_CHECKING:
    from ..api import BridgeApi

log = logging.getLogger(__name__)

COOKIE = "a2a_page"
LOGIN_CODE_TTL_S = 60.0
MAX_LOGIN_CODES = 16
MAX_PAGE_SESSIONS = 64
LOGIN_FILE_PREFIX = "login-"
# Where the page opens after a login: the page itself or one call's card (the tray's
# "Show full call..."); anything else is dropped, so /login redirects nowhere else.
NEXT_ANCHOR = re.compile(r"#call-[A-Za-z0-9_-]{1,64}\Z")
# The page the browser is given by path: it sends the code in a POST body, so the code is on
# no command line, in no address bar and in no history entry.
LOGIN_FILE_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<title>omp A2A bridge - opening the approval page</title></head>
<body><form id="login" method="post" action="{action}">
<input type="hidden" name="code" value="{code}"><input type="hidden" name="next" value="{next}">
<p>Opening the approval page... <button type="submit">Open it</button> (this link works once,
for 60 s)</p></form>
<script>document.getElementById("login").submit();</script></body></html>
"""


class ControlState:
    """What every control handler shares: the bridge's API, the secret, the page sessions."""

    def __init__(self, api: BridgeApi, secret: str) -> None:
        self.api = api
        self.secret = secret
        self.port = 0
        self.page_sessions: dict[str, str] = {}  # cookie value -> CSRF token
        self.login_codes: dict[str, float] = {}  # one-time code -> expiry (monotonic)
        self.login_files: dict[str, str] = {}  # code -> the login page file holding it
        # Who is at the other end of each open connection (server.control.peer): found once
        # per connection, kept while it lives (keep-alive requests, the events socket).
        self.peers: weakref.WeakKeyDictionary[object, Peer] = weakref.WeakKeyDictionary()
        self.feed = EventFeed(api)  # every events socket behind one snapshot subscription

    def new_login_code(self) -> str:
        """A one-time login code, valid for ``LOGIN_CODE_TTL_S``; at most a few outstanding."""
        now = time.monotonic()
        for code, expires in list(self.login_codes.items()):
            if expires <= now:
                self._forget(code)
        while len(self.login_codes) >= MAX_LOGIN_CODES:
            self._forget(next(iter(self.login_codes)))  # the oldest
        code = secrets.token_urlsafe(24)
        self.login_codes[code] = now + LOGIN_CODE_TTL_S
        return code

    def _forget(self, code: str) -> None:
        """Drop a code and delete the login page that holds it, if any."""
        self.login_codes.pop(code, None)
        path = self.login_files.pop(code, None)
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def use_login_code(self, code: str) -> bool:
        """True once for a fresh code; the code is gone afterwards whatever the answer."""
        expires = self.login_codes.get(code)
        self._forget(code)
        return expires is not None and time.monotonic() < expires

    def login_url(self, base_url: str) -> str:
        return f"{base_url}login?code={self.new_login_code()}"

    def login_file(self, anchor: str = "") -> str:
        """A fresh one-time login as a page in the runtime directory (0600, created
        exclusively, no symlink followed), for the browser to open by path: the command line
        that starts the browser then names a file, not the code. ``anchor`` (``#call-<id>``)
        is where the page opens. The file is deleted when its code is used, when it expires
        (at the next code or after 60 s) and when the bridge stops.
        """
        code = self.new_login_code()
        body = LOGIN_FILE_HTML.format(
            action=f"http://127.0.0.1:{self.port}/login",
            code=html.escape(code),
            next=html.escape(anchor if NEXT_ANCHOR.match(anchor) else ""),
        ).encode()
        path = os.path.join(runtime_dir(), f"{LOGIN_FILE_PREFIX}{secrets.token_hex(8)}.html")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        self.login_files[code] = path
        with contextlib.suppress(RuntimeError):  # no loop (a test): the next code cleans up
            asyncio.get_running_loop().call_later(LOGIN_CODE_TTL_S + 1, self._expire, code)
        return path

    def _expire(self, code: str) -> None:
        if code in self.login_files:
            self._forget(code)

    def close(self) -> None:
        """The bridge stops: no login page outlives it."""
        for code in list(self.login_files):
            self._forget(code)

    def own_origins(self) -> set[str]:
        return {f"http://{h}:{self.port}" for h in ("127.0.0.1", "localhost", "[::1]")}


class Refused(web.HTTPError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, reason=None)
        self.message = message


class ControlHandler(web.RequestHandler):
    """Security checks for every request, JSON errors."""

    state: ControlState
    via_cookie = False
    csrf = ""
    page = False  # HTML endpoints answer refusals with a short page, not JSON

    def initialize(self, state: ControlState) -> None:
        self.state = state

    def set_default_headers(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("X-Frame-Options", "DENY")
        self.set_header("Referrer-Policy", "no-referrer")

    def check_request(self, *, auth: bool = True, null_origin: bool = False) -> None:
        host = self.request.headers.get("Host")
        if host is None or not is_loopback_name(host_name(host)):
            raise Refused(403, "forbidden host")
        origin = self.request.headers.get("Origin")
        if null_origin and origin == "null":
            origin = None
        if origin is not None and origin.rstrip("/").lower() not in self.state.own_origins():
            raise Refused(403, "forbidden origin")
        if not auth:
            return
        presented = bearer_token(self.request.headers.get("Authorization"))
        if presented is not None:
            if hmac.compare_digest(presented.encode(), self.state.secret.encode()):
                return
            raise Refused(401, "unauthorized")
        cookie = self.get_cookie(COOKIE)
        csrf = self.state.page_sessions.get(cookie) if cookie else None
        if csrf is None:
            raise Refused(401, "unauthorized")
        self.via_cookie = True
        self.csrf = csrf
        if self.request.method not in ("GET", "HEAD"):
            sent = self.request.headers.get("X-CSRF-Token", "")
            if not hmac.compare_digest(sent.encode(), csrf.encode()):
                raise Refused(403, "missing or wrong CSRF token")

    async def check_peer(self) -> None:
        """Refuse a process the bridge started for a tool, or any of its descendants (boxed or
        not): a tool never approves its own calls, reads the token or changes a rule. Found in
        a worker (sock_diag and a /proc scan), once per connection."""
        connection = self.request.connection
        peer = self.state.peers.get(connection) if connection is not None else None
        if peer is None:
            address = getattr(getattr(connection, "context", None), "address", None)
            peer_ip, peer_port = "", 0
            if isinstance(address, tuple) and len(address) >= 2:
                peer_ip, peer_port = str(address[0]), int(address[1])
            loop = asyncio.get_running_loop()  # the listener is 127.0.0.1 (startup.prepare)
            peer = await loop.run_in_executor(
                None, find_peer, peer_port, self.state.port, None, peer_ip, "127.0.0.1"
            )
            if connection is not None:
                self.state.peers[connection] = peer
        if peer.refused:
            log.warning("control API: refused a request from a tool's process (%s)", peer.pid)
            raise Refused(403, peer.why())

    async def prepare(self) -> None:
        self.check_request()
        await self.check_peer()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, Refused):
            message = exc.message
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message
        else:
            message = self._reason.lower()
        if self.page:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(
                f"<!doctype html><title>omp A2A bridge</title><p>{message}. Open this page "
                "with <code>a2a-bridge open</code> (or the tray's Open approval page).</p>"
            )
            return
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if not isinstance(value, web.HTTPError):
            log.error("internal error: control API", exc_info=(typ, value, tb))

    def body_json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.request.body or b"{}")
        except ValueError:
            raise Refused(400, "body must be JSON") from None
        if not isinstance(data, dict):
            raise Refused(400, "body must be a JSON object")
        return data

    def send_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))
