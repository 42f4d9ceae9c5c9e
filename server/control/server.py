"""The local control API and approval page: a second listener on the bridge's loop.

It binds ``127.0.0.1`` on a free port with a fresh secret per run. A request is allowed with
``Authorization: Bearer <secret>`` (the CLI, the tray) or with the page's cookie, set by
``/login?code=<code>``; cookie requests that change state must carry the page's CSRF token.
The code comes from ``POST /api/login-code`` (bearer only), works once and expires after 60 s.
The CLI and the tray do not put it on the browser's command line (``ps`` shows that to every
local user while the code is fresh): they open a 0600 page in the runtime directory by path
(:meth:`ControlState.login_file`), which POSTs the code to ``/login``; the history, where a
later reader could see it, never holds anything that still opens the API.
``Host`` must be a loopback name and a foreign ``Origin`` is refused, so a web page elsewhere
can neither read nor drive it. An open ``/api/events`` WebSocket counts as an approver.

This module is the application: its routes, the login, the page and its assets. The checks
every request passes are :mod:`server.control.auth`; the API's endpoints (the
:class:`~server.api.BridgeApi` over HTTP) are :mod:`server.control.endpoints`.
"""

from __future__ import annotations

import html
import os
import secrets

from tornado import web

from omp_a2a_bridge.assets import ASSETS_DIR

from .auth import (
    COOKIE,
    LOGIN_CODE_TTL_S,
    MAX_PAGE_SESSIONS,
    NEXT_ANCHOR,
    ControlHandler,
    ControlState,
    Refused,
)
from .endpoints import ROUTES

__all__ = ["ControlState", "control_app"]

# After a POST login: a same-origin refresh, not a redirect, so the first request that carries
# the SameSite=Strict cookie starts on this origin (a redirect would continue the file page's
# cross-site navigation, and the cookie would not be sent with it).
LOGGED_IN_HTML = """<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="refresh" content="0;url=/{next}"><title>omp A2A bridge</title></head>
<body><p><a href="/{next}">Open the approval page</a></p></body></html>
"""


class LoginHandler(ControlHandler):
    """``GET /login?code=`` (a link) or ``POST /login`` with ``code`` and ``next`` in a form
    body (the login page file the CLI and the tray open by path)."""

    page = True

    async def prepare(self) -> None:
        # The login page file is a file:// page, whose form posts with ``Origin: null``.
        # Harmless here: without a fresh one-time code the POST logs nobody in.
        self.check_request(auth=False, null_origin=self.request.method == "POST")
        await self.check_peer()  # a tool that read a login page file from the runtime dir

    def _log_in(self, code: str) -> None:
        if not code or not self.state.use_login_code(code):
            raise Refused(
                401, "this login link has expired or was already used (each works once, for 60 s)"
            )
        sessions = self.state.page_sessions
        while len(sessions) >= MAX_PAGE_SESSIONS:
            del sessions[next(iter(sessions))]  # the oldest page login
        value = secrets.token_urlsafe(32)
        sessions[value] = secrets.token_urlsafe(24)
        self.set_cookie(COOKIE, value, httponly=True, samesite="Strict", path="/")

    def get(self) -> None:
        self._log_in(self.get_query_argument("code", ""))
        self.redirect("/", status=303)  # drops the (used) code from the address bar

    def post(self) -> None:
        self._log_in(self.get_body_argument("code", ""))
        anchor = self.get_body_argument("next", "")
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            LOGGED_IN_HTML.format(next=html.escape(anchor if NEXT_ANCHOR.match(anchor) else ""))
        )


class LoginCodeHandler(ControlHandler):
    """``POST /api/login-code``: a one-time code for ``/login``; the bearer secret only."""

    def post(self) -> None:
        if self.via_cookie:
            raise Refused(403, "login codes are for the CLI and the tray")
        body = self.body_json() if self.request.body else {}
        if body.get("file"):  # the login page file: what a browser should be started with
            anchor = body.get("next", "")
            if not isinstance(anchor, str):
                raise Refused(400, "next must be a string like #call-a3")
            path = self.state.login_file(anchor)
            self.send_json({"file": path, "expires_s": LOGIN_CODE_TTL_S})
            return
        code = self.state.new_login_code()
        base = f"http://127.0.0.1:{self.state.port}/"
        self.send_json(
            {"code": code, "url": f"{base}login?code={code}", "expires_s": LOGIN_CODE_TTL_S}
        )


class PageHandler(ControlHandler):
    page = True

    def get(self) -> None:
        with open(os.path.join(ASSETS_DIR, "page.html"), encoding="utf-8") as f:
            html = f.read()
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header(
            "Content-Security-Policy",
            "default-src 'self'; connect-src 'self' ws://127.0.0.1:* ws://localhost:* "
            "ws://[::1]:*; img-src 'self' data:; frame-ancestors 'none'",
        )
        self.finish(html.replace("{{csrf}}", self.csrf))


class AssetHandler(ControlHandler):
    TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

    async def prepare(self) -> None:
        self.check_request(auth=False)  # static, public code: no secrets in it

    def get(self, name: str) -> None:
        ext = os.path.splitext(name)[1]
        if name not in ("page.js", "page.css"):
            raise Refused(404, "not found")
        with open(os.path.join(ASSETS_DIR, name), encoding="utf-8") as f:
            self.set_header("Content-Type", self.TYPES[ext])
            self.finish(f.read())


def control_app(state: ControlState) -> web.Application:
    kw = {"state": state}
    return web.Application(
        [
            (r"/login", LoginHandler, kw),
            (r"/", PageHandler, kw),
            (r"/assets/([a-z.]+)", AssetHandler, kw),
            (r"/api/login-code", LoginCodeHandler, kw),
            *((pattern, handler, kw) for pattern, handler in ROUTES),
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=kw,
        websocket_ping_interval=20,
        websocket_ping_timeout=30,
        xsrf_cookies=False,  # our own CSRF token, tied to the page session
    )


class NotFoundHandler(ControlHandler):
    async def prepare(self) -> None:
        self.check_request()
        raise Refused(404, "not found")
