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
from collections.abc import Callable
from typing import Any

from tornado import web, websocket
from tornado.iostream import StreamClosedError

from omp_a2a_bridge.assets import ASSETS_DIR

from .approvals import Decision
from .audit import pair_calls, recent_records
from .bridge import Bridge
from .config import ConfigError, edit_config
from .controlfile import runtime_dir
from .protocol import bearer_token, host_name, is_loopback_name
from .rules import RuleError, RuleList, edit_raw_rules
from .sessions import sid_hash
from .snapshot import DecisionError, Snapshot
from .textsafe import shorten
from .views import (
    audit_call_json,
    pending_full_json,
    pending_json,
    server_json,
    session_json,
    snapshot_json,
)

log = logging.getLogger("a2a-bridge")

COOKIE = "a2a_page"
LOGIN_CODE_TTL_S = 60.0
MAX_LOGIN_CODES = 16
MAX_PAGE_SESSIONS = 64
DECISIONS = {d.value for d in Decision}
LOGIN_FILE_PREFIX = "login-"
# Where the page opens after a login: the page itself or one call's card (the tray's
# "Show full call..."); anything else is dropped, so /login redirects nowhere else.
_NEXT = re.compile(r"#call-[A-Za-z0-9_-]{1,64}\Z")
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
# After a POST login: a same-origin refresh, not a redirect, so the first request that carries
# the SameSite=Strict cookie starts on this origin (a redirect would continue the file page's
# cross-site navigation, and the cookie would not be sent with it).
LOGGED_IN_HTML = """<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="refresh" content="0;url=/{next}"><title>omp A2A bridge</title></head>
<body><p><a href="/{next}">Open the approval page</a></p></body></html>
"""


class ControlState:
    """What every control handler shares: the bridge, the secret, the page sessions."""

    def __init__(self, bridge: Bridge, secret: str, rotate_token: Callable[[], str]) -> None:
        self.bridge = bridge
        self.secret = secret
        self.rotate_token = rotate_token
        self.port = 0
        self.page_sessions: dict[str, str] = {}  # cookie value -> CSRF token
        self.login_codes: dict[str, float] = {}  # one-time code -> expiry (monotonic)
        self.login_files: dict[str, str] = {}  # code -> the login page file holding it

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
            next=html.escape(anchor if _NEXT.match(anchor) else ""),
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

    def prepare(self) -> None:
        self.check_request()

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


class LoginHandler(ControlHandler):
    """``GET /login?code=`` (a link) or ``POST /login`` with ``code`` and ``next`` in a form
    body (the login page file the CLI and the tray open by path)."""

    page = True

    def prepare(self) -> None:
        # The login page file is a file:// page, whose form posts with ``Origin: null``.
        # Harmless here: without a fresh one-time code the POST logs nobody in.
        self.check_request(auth=False, null_origin=self.request.method == "POST")

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
        self.finish(LOGGED_IN_HTML.format(next=html.escape(anchor if _NEXT.match(anchor) else "")))


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

    def prepare(self) -> None:
        self.check_request(auth=False)  # static, public code: no secrets in it

    def get(self, name: str) -> None:
        ext = os.path.splitext(name)[1]
        if name not in ("page.js", "page.css"):
            raise Refused(404, "not found")
        with open(os.path.join(ASSETS_DIR, name), encoding="utf-8") as f:
            self.set_header("Content-Type", self.TYPES[ext])
            self.finish(f.read())


class StatusHandler(ControlHandler):
    def get(self) -> None:
        self.send_json(snapshot_json(self.state.bridge.snapshot()))


class PendingListHandler(ControlHandler):
    def get(self) -> None:
        self.send_json({"pending": [pending_json(p) for p in self.state.bridge.broker.pending()]})


class PendingHandler(ControlHandler):
    async def get(self, call_id: str) -> None:
        """The full call: rendering a huge argument safe runs off the loop (the call is
        immutable, so another thread may read it)."""
        p = self.state.bridge.broker.get(call_id)
        if p is None:
            raise Refused(404, f"call {call_id} is not pending")
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(None, lambda: json.dumps(pending_full_json(p)))
        self.set_header("Content-Type", "application/json")
        self.finish(body)

    def post(self, call_id: str) -> None:
        body = self.body_json()
        decision = body.get("decision")
        if decision not in DECISIONS:
            raise Refused(400, f"decision must be one of {', '.join(sorted(DECISIONS))}")
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise Refused(400, "reason must be a string")
        by = body.get("by")
        if self.via_cookie:
            approver = "approval page"
        elif isinstance(by, str) and by.strip():
            approver = by.strip()[:40]
        else:
            approver = "control API"
        rule = body.get("rule")
        if rule is not None and not isinstance(rule, str):
            raise Refused(400, "rule must be a string (one rule per line)")
        try:
            decided = self.state.bridge.decide(
                call_id, Decision(decision), reason, approver=approver, rule=rule
            )
        except DecisionError as e:
            raise Refused(400, str(e)) from None
        if not decided:
            raise Refused(404, f"call {call_id} is no longer pending")
        self.send_json({"ok": True, "id": call_id, "decision": decision})


class SessionsHandler(ControlHandler):
    def get(self) -> None:
        sessions = self.state.bridge.snapshot().sessions
        self.send_json({"sessions": [session_json(s) for s in sessions]})


class SessionHandler(ControlHandler):
    def delete(self, sid: str) -> None:
        if not self.state.bridge.end_session(sid):
            raise Refused(404, "no such session")
        self.set_status(204)
        self.finish()


class ServersHandler(ControlHandler):
    def get(self) -> None:
        """Upstream MCP servers, with the whole stderr ring (the snapshot has its tail)."""
        upstreams = self.state.bridge.upstreams
        views = upstreams.views() if upstreams is not None else ()
        self.send_json({"servers": [server_json(v) for v in views]})


class ServerRestartHandler(ControlHandler):
    def post(self, name: str) -> None:
        if not self.state.bridge.restart_upstream(name):
            raise Refused(404, f"no upstream server named {name}")
        self.send_json({"ok": True, "name": name}, 202)


class PauseHandler(ControlHandler):
    def post(self) -> None:
        paused = self.body_json().get("paused")
        if not isinstance(paused, bool):
            raise Refused(400, "paused must be true or false")
        self.state.bridge.set_paused(paused)
        self.send_json({"paused": paused})


class RotateHandler(ControlHandler):
    async def post(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.state.rotate_token)
        except Exception as e:
            raise Refused(500, f"token not rotated: {e}") from None
        token = self.state.bridge.tokens.state
        assert token is not None  # rotated, so resolved
        self.send_json({"ok": True, "token_source": token.source})


class ClientConfigHandler(ControlHandler):
    def get(self) -> None:
        from .cli import client_config

        bridge = self.state.bridge
        self.send_json(client_config(bridge.url, bridge.tokens.token))


class AuditHandler(ControlHandler):
    async def get(self) -> None:
        try:
            limit = int(self.get_query_argument("limit", "50"))
        except ValueError:
            raise Refused(400, "limit must be an integer") from None
        limit = max(1, min(limit, 1000))
        bridge = self.state.bridge
        await asyncio.get_running_loop().run_in_executor(None, bridge.audit.flush, 2.0)
        # start and done of a call are two records; a little slack for interleaving
        records = await asyncio.get_running_loop().run_in_executor(
            None, recent_records, bridge.audit.path, bridge.config.audit_keep, 2 * limit + 64
        )
        calls = [audit_call_json(c) for c in pair_calls(records)[-limit:]]
        self.send_json({"calls": calls})


def rules_json(bridge: Bridge) -> dict[str, Any]:
    """The three lists as saved, and the live "Allow for this session" grants."""
    data: dict[str, Any] = bridge.rules.to_json()
    # The client name is agent text (rendered like everywhere else); "sid" is for revoking
    # through this API only, "session" is what a UI shows.
    data["grants"] = [
        {
            "sid": g.sid,
            "session": sid_hash(g.sid),
            "client": shorten(g.client, 80).text,
            "tool": g.tool,
        }
        for g in bridge.grants()
    ]
    return data


def _rule_list(name: str) -> RuleList:
    try:
        return RuleList(name)
    except ValueError:
        raise Refused(400, "list must be one of allow, ask, deny") from None


class _RuleEditing(ControlHandler):
    async def _edit(self, which: RuleList, **change: list[str]) -> None:
        bridge = self.state.bridge
        loop = asyncio.get_running_loop()
        try:
            cfg = await loop.run_in_executor(
                None,
                edit_config,
                bridge.config.path,
                lambda raw: edit_raw_rules(raw, which, **change),
            )
        except RuleError as e:
            raise Refused(404 if change.get("remove") else 400, str(e)) from None
        except (ConfigError, OSError) as e:
            raise Refused(400, str(e)) from None
        bridge.set_rules(cfg.rules)


class RulesHandler(_RuleEditing):
    """GET the rules; POST ``{"list": "allow", "rule": "bash(git status)"}`` adds one."""

    def get(self) -> None:
        self.send_json(rules_json(self.state.bridge))

    async def post(self) -> None:
        body = self.body_json()
        which = _rule_list(body.get("list", "allow"))
        rule = body.get("rule")
        if not isinstance(rule, str) or not rule.strip():
            raise Refused(400, "rule must be a non-empty string, e.g. bash(git status)")
        texts = [line.strip() for line in rule.splitlines() if line.strip()]
        await self._edit(which, add=texts)
        self.send_json(rules_json(self.state.bridge))


class RuleHandler(_RuleEditing):
    """DELETE /api/rules/<list>/<index or URL-encoded rule text>."""

    async def delete(self, which: str, key: str) -> None:
        lst = _rule_list(which)
        current = [r.text for r in self.state.bridge.rules.get(lst)]
        if key.isdigit():
            if int(key) >= len(current):
                raise Refused(404, f"rules.{lst.value} has no entry {key}")
            key = current[int(key)]
        await self._edit(lst, remove=[key])
        self.send_json(rules_json(self.state.bridge))


class RulesTestHandler(ControlHandler):
    """POST ``{"command": "..."}`` or ``{"tool": "read", "arguments": {...}}``: who decides."""

    def post(self) -> None:
        body = self.body_json()
        name: object
        args: object
        if "command" in body:
            if not isinstance(body["command"], str):
                raise Refused(400, "command must be a string")
            name, args = "bash", {"command": body["command"]}
        else:
            name, args = body.get("tool"), body.get("arguments", body.get("args", {}))
            if not isinstance(name, str) or not isinstance(args, dict):
                raise Refused(400, "give command, or tool and arguments (an object)")
        self.send_json(self.state.bridge.explain(name, args))


class GrantsHandler(ControlHandler):
    def get(self) -> None:
        self.send_json({"grants": rules_json(self.state.bridge)["grants"]})


class GrantHandler(ControlHandler):
    """DELETE /api/grants/<sid>/<tool>: revoke an "Allow for this session" grant."""

    def delete(self, sid: str, tool: str) -> None:
        if not self.state.bridge.revoke_grant(sid, tool):
            raise Refused(404, "no such grant")
        self.set_status(204)
        self.finish()


class EventsHandler(websocket.WebSocketHandler, ControlHandler):
    """Pushes the snapshot on connect and on every change; an open socket is an approver."""

    approver: int | None = None
    unsubscribe: Callable[[], None] | None = None

    def check_origin(self, origin: str) -> bool:
        return origin.rstrip("/").lower() in self.state.own_origins()

    def open(self) -> None:
        name = self.get_query_argument("as", "approval page")[:40]
        bridge = self.state.bridge
        self.approver = bridge.broker.attach(name)
        self.unsubscribe = bridge.subscribe(self._push)
        bridge._changed(now=True)

    def _push(self, snap: Snapshot) -> None:
        if self.ws_connection is None or self.ws_connection.is_closing():
            return
        try:
            sent = self.write_message(json.dumps(snapshot_json(snap)))
        except websocket.WebSocketClosedError:
            return
        # The approver may hang up while this is being written: the write's future then fails.
        # Retrieve that here, so asyncio never logs "Task exception was never retrieved".
        sent.add_done_callback(_ignore_closed)

    def on_message(self, message: str | bytes) -> None:
        pass  # decisions go through the REST endpoints

    def on_close(self) -> None:
        bridge = self.state.bridge
        if self.approver is not None:
            bridge.broker.detach(self.approver)
            self.approver = None
        if self.unsubscribe is not None:
            self.unsubscribe()
            self.unsubscribe = None
        bridge._changed(now=True)


def _ignore_closed(fut: Any) -> None:
    if not fut.cancelled():
        exc = fut.exception()
        if exc is not None and not isinstance(
            exc, websocket.WebSocketClosedError | StreamClosedError
        ):
            log.warning("approval page push failed: %s", exc)


def control_app(state: ControlState) -> web.Application:
    kw = {"state": state}
    return web.Application(
        [
            (r"/login", LoginHandler, kw),
            (r"/", PageHandler, kw),
            (r"/assets/([a-z.]+)", AssetHandler, kw),
            (r"/api/status", StatusHandler, kw),
            (r"/api/login-code", LoginCodeHandler, kw),
            (r"/api/pending", PendingListHandler, kw),
            (r"/api/pending/([A-Za-z0-9_-]+)", PendingHandler, kw),
            (r"/api/sessions", SessionsHandler, kw),
            (r"/api/sessions/([A-Za-z0-9_-]+)", SessionHandler, kw),
            (r"/api/pause", PauseHandler, kw),
            (r"/api/servers", ServersHandler, kw),
            (r"/api/servers/([a-z0-9_]+)/restart", ServerRestartHandler, kw),
            (r"/api/token/rotate", RotateHandler, kw),
            (r"/api/client-config", ClientConfigHandler, kw),
            (r"/api/audit", AuditHandler, kw),
            (r"/api/events", EventsHandler, kw),
            (r"/api/rules", RulesHandler, kw),
            (r"/api/rules/test", RulesTestHandler, kw),
            (r"/api/rules/([a-z]+)/(.+)", RuleHandler, kw),
            (r"/api/grants", GrantsHandler, kw),
            (r"/api/grants/([A-Za-z0-9_-]+)/([A-Za-z0-9_.-]+)", GrantHandler, kw),
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
