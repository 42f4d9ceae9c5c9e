"""The running bridge's control API from another process: :class:`ControlClient`.

It implements :class:`~server.api.BridgeControl` (the actions, with the same signatures and
answers as the in-process :class:`~server.core.runner.BridgeRunner`) over HTTP, and offers the reads
as the API's JSON, which is what the CLI prints (``--json``) and renders. A refusal is a
:class:`~server.errors.ControlError` with the server's message and status; "not there any more"
(a 404 for a call, a session, a grant or a server) is ``False``, as in process.
"""

from __future__ import annotations

import json
import pathlib
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from ..core.approvals import Decision
from ..errors import ControlError, NotRunning
from ..infra.tokens import TokenSource
from ..policy.judge import Judgement
from ..policy.rules import RuleList
from ..present.delta import FULL_REQUEST, apply_event
from ..present.views import judgement_from_json
from ..types import BatchOutcome, NewMachine
from .controlfile import ControlInfo, control_path, read_control

if TYPE_CHECKING:
    from ..api import BridgeControl

__all__ = ["ControlClient", "ControlError", "NotRunning"]


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


class ControlClient:
    """The running bridge's :class:`~server.api.BridgeControl` from another process, over HTTP.

    Why: the CLI verbs and ``watch`` act on a bridge that another process runs; they get the
    same actions and answers as the in-process runner, found through ``control.json``.
    """

    def __init__(self, info: ControlInfo, timeout: float = 10.0) -> None:
        self.info = info
        self.timeout = timeout

    @classmethod
    def connect(cls) -> ControlClient:
        info = read_control()
        if info is None:
            raise NotRunning(control_path())
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
            raise NotRunning(control_path()) from e
        return json.loads(raw) if raw else None

    def _found(self, method: str, path: str, body: Any = None) -> bool:
        """True when done, False on a 404 ("not there any more"); other refusals raise."""
        try:
            self.request(method, path, body)
        except ControlError as e:
            if e.status == 404:
                return False
            raise
        return True

    # -- BridgeControl: the actions -------------------------------------------------------------

    def decide(
        self,
        call_id: str,
        decision: Decision | str,
        reason: str | None = None,
        approver: str | None = None,
        rule: str | None = None,
    ) -> bool:
        body: dict[str, Any] = {"decision": Decision(decision).value}
        if reason is not None:
            body["reason"] = reason
        if approver is not None:
            body["by"] = approver
        if rule is not None:
            body["rule"] = rule
        return self._found("POST", f"/api/pending/{_quote(call_id)}", body)

    def decide_batch(
        self,
        ids: list[str],
        decision: Decision | str,
        reason: str | None = None,
        approver: str | None = None,
    ) -> BatchOutcome:
        body: dict[str, Any] = {"ids": list(ids), "decision": Decision(decision).value}
        if reason is not None:
            body["reason"] = reason
        if approver is not None:
            body["by"] = approver
        data = self.request("POST", "/api/batch", body)
        return BatchOutcome(tuple(data["decided"]), tuple(data["gone"]))

    def pause(self, paused: bool) -> None:
        self.request("POST", "/api/pause", {"paused": paused})

    def end_session(self, sid: str) -> bool:
        return self._found("DELETE", f"/api/sessions/{_quote(sid)}")

    def rotate_token(self) -> TokenSource:
        return TokenSource(self.request("POST", "/api/token/rotate")["token_source"])

    def revoke_grant(self, sid: str, tool: str) -> bool:
        return self._found("DELETE", f"/api/grants/{_quote(sid)}/{_quote(tool)}")

    def restart_server(self, name: str) -> bool:
        return self._found("POST", f"/api/servers/{_quote(name)}/restart")

    def add_rules(self, which: RuleList, texts: list[str]) -> None:
        self.request(
            "POST", "/api/rules", {"list": RuleList(which).value, "rule": "\n".join(texts)}
        )

    def remove_rule(self, which: RuleList, key: str) -> None:
        self.request("DELETE", f"/api/rules/{RuleList(which).value}/{_quote(key)}")

    def test_rule(
        self, tool: str, arguments: dict[str, Any], machine: str | None = None
    ) -> Judgement:
        body: dict[str, Any] = {"tool": tool, "arguments": arguments}
        if machine is not None:
            body["machine"] = machine
        return judgement_from_json(self.request("POST", "/api/rules/test", body))

    def add_machine(self, name: str) -> NewMachine:
        data = self.request("POST", "/api/machines", {"name": name})
        return NewMachine(data["name"], data["token"], data["config"], data.get("warning"))

    def remove_machine(self, name: str) -> bool:
        return self._found("DELETE", f"/api/machines/{_quote(name)}")

    def client_config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.request("GET", "/api/client-config")
        return config

    def audit_tail(self, limit: int) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = self.request("GET", f"/api/audit?limit={limit}")["calls"]
        return calls

    def log_tail(self, limit: int) -> dict[str, Any]:
        tail: dict[str, Any] = self.request("GET", f"/api/logs?limit={limit}")
        return tail

    def login_page(self, anchor: str = "") -> str:
        """A ``file://`` URL of a one-time login page (0600, runtime directory): started with
        it, the browser's command line names a file, not the code."""
        body: dict[str, Any] = {"file": True}
        if anchor:
            body["next"] = anchor
        return pathlib.Path(self.request("POST", "/api/login-code", body)["file"]).as_uri()

    def login_url(self) -> str:
        """A one-time page link (60 s, first use): never the secret itself, which would sit
        on the browser's command line for every local user to read."""
        return str(self.request("POST", "/api/login-code")["url"])

    def add_tunnel(
        self, name: str, target: str, remote_port: int | None = None, client: str | None = None
    ) -> None:
        body: dict[str, Any] = {"name": name, "target": target}
        if remote_port is not None:
            body["remote_port"] = remote_port
        if client is not None:
            body["client"] = client
        self.request("POST", "/api/tunnels", body)

    def remove_tunnel(self, name: str) -> bool:
        return self._found("DELETE", f"/api/tunnels/{_quote(name)}")

    def reconnect_tunnel(self, name: str) -> bool:
        return self._found("POST", f"/api/tunnels/{_quote(name)}/reconnect")

    def install_client(self, name: str) -> str:
        return str(self.request("POST", f"/api/tunnels/{_quote(name)}/install")["installed"])

    # -- reads, as the API's JSON ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """``GET /api/status``: the snapshot as JSON."""
        status: dict[str, Any] = self.request("GET", "/api/status")
        return status

    def listing(self, key: str) -> dict[str, Any]:
        """``GET /api/<key>`` for ``sessions``, ``pending``, ``servers``, ``rules``, ``grants``,
        ``machines``."""
        data: dict[str, Any] = self.request("GET", f"/api/{key}")
        return data

    def pending_call(self, call_id: str) -> dict[str, Any]:
        """One waiting call in full (raises a 404 :class:`ControlError` when it is gone)."""
        call: dict[str, Any] = self.request("GET", f"/api/pending/{_quote(call_id)}")
        return call

    async def events(self, name: str, diffs: bool = False) -> WebSocketClientConnection:
        """The events socket: a snapshot now and after every change, and while it is open
        this client is an approver named ``name`` (subscribe + attach, over HTTP). With
        ``diffs``, one snapshot and then only what changed (:meth:`stream` applies them)."""
        request = HTTPRequest(
            f"{self.info.ws_url}?as={_quote(name)}" + ("&diff=1" if diffs else ""),
            headers={"Authorization": f"Bearer {self.info.secret}"},
            connect_timeout=5,
            request_timeout=5,
        )
        return await websocket_connect(request)

    async def stream(self, name: str) -> EventStream:
        """The events socket in its diff form, read as whole snapshots (:class:`EventStream`)."""
        return EventStream(await self.events(name, diffs=True))


class EventStream:
    """The events socket's diffs applied as they come: each read is the bridge's whole state
    (the snapshot's JSON, plus its ``version``), as the full form would have sent it (less
    the waiting calls' clocks, which a UI counts itself from ``arrived`` and ``deadline``).

    Why here: ``watch`` and any other Python approver get the small messages without each
    knowing the diff format (:mod:`server.present.delta`)."""

    def __init__(self, ws: WebSocketClientConnection) -> None:
        self.ws = ws
        self.state: dict[str, Any] | None = None

    async def next(self) -> dict[str, Any] | None:
        """The next state, or None when the socket closed. A diff that does not follow the
        last state (none should) asks the bridge for the whole state again."""
        while (message := await self.ws.read_message()) is not None:
            state = apply_event(self.state, json.loads(message))
            if state is None:
                await self.ws.write_message(FULL_REQUEST)
                continue
            self.state = state
            return state
        return None

    def close(self) -> None:
        self.ws.close()


if TYPE_CHECKING:

    def _conforms(client: ControlClient) -> BridgeControl:
        """Never called: mypy checks here that the client implements the API's Protocol."""
        return client
