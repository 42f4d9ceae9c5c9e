"""The local control API and approval page: a second listener on the bridge's loop.

It binds ``127.0.0.1`` on a free port with a fresh secret per run. A request is allowed with
``Authorization: Bearer <secret>`` (the CLI, the tray) or with the page's cookie, set by
``/login?code=<code>``; cookie requests that change state must carry the page's CSRF token.
The code comes from ``POST /api/login-code`` (bearer only), works once and expires after 60 s:
the browser's command line and history, where other local users or later readers can see it,
never hold anything that still opens the API.
``Host`` must be a loopback name and a foreign ``Origin`` is refused, so a web page elsewhere
can neither read nor drive it. An open ``/api/events`` WebSocket counts as an approver.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
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


class ControlState:
    """What every control handler shares: the bridge, the secret, the page sessions."""

    def __init__(self, bridge: Bridge, secret: str, rotate_token: Callable[[], str]) -> None:
        self.bridge = bridge
        self.secret = secret
        self.rotate_token = rotate_token
        self.port = 0
        self.page_sessions: dict[str, str] = {}  # cookie value -> CSRF token
        self.login_codes: dict[str, float] = {}  # one-time code -> expiry (monotonic)

    def new_login_code(self) -> str:
        """A one-time login code, valid for ``LOGIN_CODE_TTL_S``; at most a few outstanding."""
        now = time.monotonic()
        for code, expires in list(self.login_codes.items()):
            if expires <= now:
                del self.login_codes[code]
        while len(self.login_codes) >= MAX_LOGIN_CODES:
            del self.login_codes[next(iter(self.login_codes))]  # the oldest
        code = secrets.token_urlsafe(24)
        self.login_codes[code] = now + LOGIN_CODE_TTL_S
        return code

    def use_login_code(self, code: str) -> bool:
        """True once for a fresh code; the code is gone afterwards whatever the answer."""
        expires = self.login_codes.pop(code, None)
        return expires is not None and time.monotonic() < expires

    def login_url(self, base_url: str) -> str:
        return f"{base_url}login?code={self.new_login_code()}"

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

    def check_request(self, *, auth: bool = True) -> None:
        host = self.request.headers.get("Host")
        if host is None or not is_loopback_name(host_name(host)):
            raise Refused(403, "forbidden host")
        origin = self.request.headers.get("Origin")
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
