"""The local control API and approval page: a second listener on the bridge's loop.

It binds ``127.0.0.1`` on a free port with a fresh secret per run. A request is allowed with
``Authorization: Bearer <secret>`` (the CLI, the tray) or with the page's cookie, set by
``/login?code=<code>``; cookie requests that change state must carry the page's CSRF token.
The code comes from ``POST /api/login-code`` (bearer only), works once and expires after 60 s:
the browser's command line and history, where other local users or later readers can see it,
never hold anything that still opens the API.
``Host`` must be a loopback name and a foreign ``Origin`` is refused, so a web page elsewhere
can neither read nor drive it. An open ``/api/events`` WebSocket counts as an approver.

This module is the application: its routes, the login, the page and its assets. The checks
every request passes are :mod:`server.control_auth`; the API's endpoints (the
:class:`~server.api.BridgeApi` over HTTP) are :mod:`server.control_api`.
"""

from __future__ import annotations

import os
import secrets

from tornado import web

from omp_a2a_bridge.assets import ASSETS_DIR

from .control_api import ROUTES
from .control_auth import (
    COOKIE,
    LOGIN_CODE_TTL_S,
    MAX_PAGE_SESSIONS,
    ControlHandler,
    ControlState,
    Refused,
)

__all__ = ["ControlState", "control_app"]


class LoginHandler(ControlHandler):
    page = True

    def prepare(self) -> None:
        self.check_request(auth=False)

    def get(self) -> None:
        code = self.get_query_argument("code", "")
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
        self.redirect("/", status=303)  # drops the (used) code from the address bar


class LoginCodeHandler(ControlHandler):
    """``POST /api/login-code``: a one-time code for ``/login``; the bearer secret only."""

    def post(self) -> None:
        if self.via_cookie:
            raise Refused(403, "login codes are for the CLI and the tray")
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

    def prepare(self) -> None:
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
    def prepare(self) -> None:
        self.check_request()
        raise Refused(404, "not found")
