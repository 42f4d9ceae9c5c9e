"""The control API's endpoints: :class:`~server.api.BridgeApi` over HTTP, and nothing else.

Each handler checks its request's shape, calls one API method and turns the answer into JSON
(:mod:`server.present.views`); it never reaches into the bridge. What may call at all is decided
before, in :class:`~server.control.auth.ControlHandler`. Work that blocks (a keyring call, a
config write, reading the audit files, rendering a huge argument) runs in a worker, so the
bridge loop these handlers share never waits on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from tornado import websocket
from tornado.iostream import StreamClosedError

from ..core.approvals import ApproverKind, Decision
from ..errors import BridgeError, ConfigError
from ..machines.identity import MachineError, MachineNotFound
from ..policy.examples import examples
from ..policy.rules import Kind, RuleError, RuleList, parse_rule
from ..present.delta import FULL_REQUEST
from ..present.views import (
    grant_json,
    judgement_json,
    machine_json,
    pending_full_json,
    pending_json,
    rules_json,
    server_json,
    session_json,
    snapshot_json,
    tunnel_json,
)
from ..types import DecisionError
from .auth import ControlHandler, Refused
from .feed import FeedClient

log = logging.getLogger(__name__)

DECISIONS = {d.value for d in Decision}


class StatusHandler(ControlHandler):
    def get(self) -> None:
        self.send_json(snapshot_json(self.state.api.snapshot()))


class PendingListHandler(ControlHandler):
    def get(self) -> None:
        self.send_json({"pending": [pending_json(p) for p in self.state.api.snapshot().pending]})


class PendingHandler(ControlHandler):
    async def get(self, call_id: str) -> None:
        """The full call: rendering a huge argument safe runs off the loop (the call is
        immutable, so another thread may read it)."""
        p = self.state.api.pending_call(call_id)
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
        approver = _approver(self, body)
        rule = body.get("rule")
        if rule is not None and not isinstance(rule, str):
            raise Refused(400, "rule must be a string (one rule per line)")
        try:
            decided = self.state.api.decide(
                call_id, Decision(decision), reason, approver=approver, rule=rule
            )
        except DecisionError as e:
            raise Refused(400, str(e)) from None
        if not decided:
            raise Refused(404, f"call {call_id} is no longer pending")
        self.send_json({"ok": True, "id": call_id, "decision": decision})


def _approver(handler: ControlHandler, body: dict[str, Any]) -> str:
    """Who decided, for the audit: the page (its cookie), or the caller's ``by``."""
    by = body.get("by")
    if handler.via_cookie:
        return ApproverKind.PAGE
    if isinstance(by, str) and by.strip():
        return by.strip()[:40]
    return ApproverKind.CONTROL_API


class BatchHandler(ControlHandler):
    def post(self) -> None:
        """*Approve all N* / *Deny all N*: ``{"ids": [...], "decision": "approve"|"deny"}``;
        exactly the calls named, all of one kind (server/present/batch.py)."""
        body = self.body_json()
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not ids:
            raise Refused(400, "ids must be a non-empty list of call ids")
        decision = body.get("decision")
        if decision not in (Decision.APPROVE.value, Decision.DENY.value):
            raise Refused(400, "decision must be approve or deny")
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise Refused(400, "reason must be a string")
        try:
            out = self.state.api.decide_batch(
                ids, Decision(decision), reason, approver=_approver(self, body)
            )
        except DecisionError as e:
            raise Refused(400, str(e)) from None
        self.send_json(
            {"ok": True, "decision": decision, "decided": list(out.decided), "gone": list(out.gone)}
        )


class SessionsHandler(ControlHandler):
    def get(self) -> None:
        sessions = self.state.api.snapshot().sessions
        self.send_json({"sessions": [session_json(s) for s in sessions]})


class SessionHandler(ControlHandler):
    def delete(self, sid: str) -> None:
        if not self.state.api.end_session(sid):
            raise Refused(404, "no such session")
        self.set_status(204)
        self.finish()


class ServersHandler(ControlHandler):
    def get(self) -> None:
        """Upstream MCP servers, with the whole stderr ring (the snapshot has its tail)."""
        self.send_json({"servers": [server_json(v) for v in self.state.api.servers()]})


class ServerRestartHandler(ControlHandler):
    def post(self, name: str) -> None:
        if not self.state.api.restart_server(name):
            raise Refused(404, f"no upstream server named {name}")
        self.send_json({"ok": True, "name": name}, 202)


class PauseHandler(ControlHandler):
    def post(self) -> None:
        paused = self.body_json().get("paused")
        if not isinstance(paused, bool):
            raise Refused(400, "paused must be true or false")
        self.state.api.pause(paused)
        self.send_json({"paused": paused})


class RotateHandler(ControlHandler):
    async def post(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            source = await loop.run_in_executor(None, self.state.api.rotate_token)
        except Exception as e:
            raise Refused(500, f"token not rotated: {e}") from None
        self.send_json({"ok": True, "token_source": source})


class ClientConfigHandler(ControlHandler):
    def get(self) -> None:
        self.send_json(self.state.api.client_config())


class AuditHandler(ControlHandler):
    async def get(self) -> None:
        try:
            limit = int(self.get_query_argument("limit", "50"))
        except ValueError:
            raise Refused(400, "limit must be an integer") from None
        limit = max(1, min(limit, 1000))
        loop = asyncio.get_running_loop()
        calls = await loop.run_in_executor(None, self.state.api.audit_tail, limit)
        self.send_json({"calls": calls})


class LogsHandler(ControlHandler):
    async def get(self) -> None:
        """The log file's last lines (the page's *Show logs*), read in a worker."""
        try:
            limit = int(self.get_query_argument("limit", "200"))
        except ValueError:
            raise Refused(400, "limit must be an integer") from None
        limit = max(1, min(limit, 5000))
        loop = asyncio.get_running_loop()
        self.send_json(await loop.run_in_executor(None, self.state.api.log_tail, limit))


def _rule_list(name: str) -> RuleList:
    try:
        return RuleList(name)
    except ValueError:
        raise Refused(400, "list must be one of allow, ask, deny") from None


class _RuleEditing(ControlHandler):
    def rules_json(self) -> dict[str, Any]:
        api = self.state.api
        return rules_json(api.rules(), api.grants())

    async def edit(self, fn: Callable[[], None], *, removing: bool) -> None:
        """A config write: in a worker. A rule that is not there is a 404 when removing."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, fn)
        except RuleError as e:
            raise Refused(404 if removing else 400, str(e)) from None
        except (ConfigError, OSError) as e:
            raise Refused(400, str(e)) from None


class RulesHandler(_RuleEditing):
    """GET the rules; POST ``{"list": "allow", "rule": "bash(git status)"}`` adds one."""

    def get(self) -> None:
        self.send_json(self.rules_json())

    async def post(self) -> None:
        body = self.body_json()
        which = _rule_list(body.get("list", "allow"))
        rule = body.get("rule")
        if not isinstance(rule, str) or not rule.strip():
            raise Refused(400, "rule must be a non-empty string, e.g. bash(git status)")
        texts = [line.strip() for line in rule.splitlines() if line.strip()]
        await self.edit(lambda: self.state.api.add_rules(which, texts), removing=False)
        self.send_json(self.rules_json())


class RuleHandler(_RuleEditing):
    """DELETE /api/rules/<list>/<index or URL-encoded rule text>."""

    async def delete(self, which: str, key: str) -> None:
        lst = _rule_list(which)
        await self.edit(lambda: self.state.api.remove_rule(lst, key), removing=True)
        self.send_json(self.rules_json())


class RulesExamplesHandler(ControlHandler):
    """POST ``{"list": "deny", "rule": "bash(echo forbidden*)"}``: two calls the rule matches
    and one it does not (the page shows them before saving), or 400 with why it is invalid."""

    def post(self) -> None:
        body = self.body_json()
        which = _rule_list(body.get("list", "allow"))
        rule = body.get("rule")
        if not isinstance(rule, str) or not rule.strip():
            raise Refused(400, "rule must be a non-empty string, e.g. bash(git status)")
        try:
            parsed = parse_rule(rule, allow=which is RuleList.ALLOW)
        except RuleError as e:
            raise Refused(400, str(e)) from None
        if parsed.kind is Kind.ANY:
            self.send_json({"every": True, "matches": [], "misses": []})
            return
        ex = examples(parsed, which)
        self.send_json({"every": False, "matches": list(ex.matches), "misses": list(ex.misses)})


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
        machine = body.get("machine")
        if machine is not None and not isinstance(machine, str):
            raise Refused(400, "machine must be a machine's name")
        self.send_json(judgement_json(self.state.api.test_rule(name, args, machine)))


class MachinesHandler(ControlHandler):
    """GET the machines (never a token); POST ``{"name": "laptop"}`` adds one and answers
    its token, shown this once, with the client config."""

    def get(self) -> None:
        self.send_json({"machines": [machine_json(m) for m in self.state.api.machines()]})

    async def post(self) -> None:
        name = self.body_json().get("name")
        if not isinstance(name, str):
            raise Refused(400, "name must be a string, e.g. laptop")
        loop = asyncio.get_running_loop()
        try:  # a config write and a keyring call: in a worker
            added = await loop.run_in_executor(None, self.state.api.add_machine, name)
        except MachineError as e:
            raise Refused(400, str(e)) from None
        except (ConfigError, OSError) as e:
            raise Refused(500, f"machine not added: {e}") from None
        self.send_json(added.to_json(), 201)


class MachineHandler(ControlHandler):
    """DELETE /api/machines/<name>: revoke it (its sessions end, its token answers 401)."""

    async def delete(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            removed = await loop.run_in_executor(None, self.state.api.remove_machine, name)
        except MachineNotFound as e:
            raise Refused(404, str(e)) from None
        except MachineError as e:
            raise Refused(400, str(e)) from None
        except (ConfigError, OSError) as e:
            raise Refused(500, f"machine not removed: {e}") from None
        if not removed:
            raise Refused(404, f"no machine named {name}")
        self.send_json({"ok": True, "name": name})


class GrantsHandler(ControlHandler):
    def get(self) -> None:
        self.send_json({"grants": [grant_json(g) for g in self.state.api.grants()]})


class GrantHandler(ControlHandler):
    """DELETE /api/grants/<sid>/<tool>: revoke an "Allow for this session" grant."""

    def delete(self, sid: str, tool: str) -> None:
        if not self.state.api.revoke_grant(sid, tool):
            raise Refused(404, "no such grant")
        self.set_status(204)
        self.finish()


class TunnelsHandler(ControlHandler):
    """GET the tunnels; POST ``{"name", "target", "remote_port"?, "client"?, "install"?}``
    saves one and starts it (``install``: then writes its client's config on the remote)."""

    def get(self) -> None:
        self.send_json({"tunnels": [tunnel_json(t) for t in self.state.api.tunnels()]})

    async def post(self) -> None:
        body = self.body_json()
        name, target = body.get("name"), body.get("target")
        port, client, install = body.get("remote_port"), body.get("client"), body.get("install")
        if not isinstance(name, str) or not isinstance(target, str):
            raise Refused(400, "name and target must be strings")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
            raise Refused(400, "remote_port must be an integer")
        if client is not None and not isinstance(client, str):
            raise Refused(400, "client must be a string")
        if install is not None and not isinstance(install, bool):
            raise Refused(400, "install must be true or false")
        api = self.state.api
        await _in_worker(lambda: api.add_tunnel(name, target, port, client))
        installed = None
        if install:
            installed = await _in_worker(lambda: api.install_client(name))
        self.send_json({"ok": True, "name": name, "installed": installed}, 201)


class TunnelHandler(ControlHandler):
    """DELETE /api/tunnels/<name> stops and forgets it; POST …/reconnect starts its ssh again
    now; POST …/install writes its client's config on the remote machine."""

    async def delete(self, name: str) -> None:
        if not await _in_worker(lambda: self.state.api.remove_tunnel(name)):
            raise Refused(404, f"no tunnel named {name}")
        self.set_status(204)
        self.finish()

    async def post(self, name: str, action: str | None = None) -> None:
        api = self.state.api
        if action is None:
            raise Refused(405, "POST /api/tunnels/<name>/reconnect or …/install")
        if action == "reconnect":
            if not api.reconnect_tunnel(name):
                raise Refused(404, f"no tunnel named {name}")
            self.send_json({"ok": True, "name": name}, 202)
            return
        installed = await _in_worker(lambda: api.install_client(name))
        self.send_json({"ok": True, "name": name, "installed": installed})


async def _in_worker(fn: Callable[[], Any]) -> Any:
    """A config write or an ssh run, off the loop; a refusal the user should read is a 400."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, fn)
    except (BridgeError, OSError) as e:
        raise Refused(400, str(e)) from None


class EventsHandler(websocket.WebSocketHandler, ControlHandler):
    """Pushes the snapshot on connect and after changes; an open socket is an approver.

    ``?diff=1``: one full snapshot, then only what changed (:mod:`server.control.feed`); the
    text ``full`` sent on the socket asks for the whole state again."""

    approver: int | None = None
    client: FeedClient | None = None

    def check_origin(self, origin: str) -> bool:
        return origin.rstrip("/").lower() in self.state.own_origins()

    def open(self) -> None:
        # Snapshots go out as they happen, often two in a row (a call arrived, then it is
        # pending): with Nagle's algorithm the second waits for the approver's delayed ACK,
        # ~40 ms on Linux, before the human hears of the call.
        self.set_nodelay(True)
        name = self.get_query_argument("as", ApproverKind.PAGE)[:40]
        diffs = self.get_query_argument("diff", "") in ("1", "true")
        self.client = self.state.feed.add(self._push, diffs)
        self.approver = self.state.api.attach_approver(name)  # publishes: this socket hears

    def _push(self, text: str) -> None:
        if self.ws_connection is None or self.ws_connection.is_closing():
            return
        try:
            sent = self.write_message(text)
        except websocket.WebSocketClosedError:
            return
        # The approver may hang up while this is being written: the write's future then fails.
        # Retrieve that here, so asyncio never logs "Task exception was never retrieved".
        sent.add_done_callback(_ignore_closed)

    def on_message(self, message: str | bytes) -> None:
        """Decisions go through the REST endpoints; ``full`` asks for the whole state."""
        if message == FULL_REQUEST and self.client is not None:
            self.state.feed.resend(self.client)

    def on_close(self) -> None:
        if self.client is not None:
            self.state.feed.remove(self.client)
            self.client = None
        if self.approver is not None:
            self.state.api.detach_approver(self.approver)  # publishes to the others
            self.approver = None


def _ignore_closed(fut: Any) -> None:
    if not fut.cancelled():
        exc = fut.exception()
        if exc is not None and not isinstance(
            exc, websocket.WebSocketClosedError | StreamClosedError
        ):
            log.warning("approval page push failed: %s", exc)


ROUTES: list[tuple[str, type]] = [
    (r"/api/status", StatusHandler),
    (r"/api/pending", PendingListHandler),
    (r"/api/batch", BatchHandler),
    (r"/api/pending/([A-Za-z0-9_-]+)", PendingHandler),
    (r"/api/sessions", SessionsHandler),
    (r"/api/sessions/([A-Za-z0-9_-]+)", SessionHandler),
    (r"/api/pause", PauseHandler),
    (r"/api/servers", ServersHandler),
    (r"/api/servers/([a-z0-9_]+)/restart", ServerRestartHandler),
    (r"/api/token/rotate", RotateHandler),
    (r"/api/client-config", ClientConfigHandler),
    (r"/api/audit", AuditHandler),
    (r"/api/logs", LogsHandler),
    (r"/api/events", EventsHandler),
    (r"/api/rules", RulesHandler),
    (r"/api/rules/examples", RulesExamplesHandler),
    (r"/api/rules/test", RulesTestHandler),
    (r"/api/rules/([a-z]+)/(.+)", RuleHandler),
    (r"/api/machines", MachinesHandler),
    (r"/api/machines/([^/]+)", MachineHandler),
    (r"/api/grants", GrantsHandler),
    (r"/api/grants/([A-Za-z0-9_-]+)/([A-Za-z0-9_.-]+)", GrantHandler),
    (r"/api/tunnels", TunnelsHandler),
    (r"/api/tunnels/([A-Za-z0-9._-]+)", TunnelHandler),
    (r"/api/tunnels/([A-Za-z0-9._-]+)/(reconnect|install)", TunnelHandler),
]
"""The API's endpoints, in the order :func:`server.control.server.control_app` routes them."""
