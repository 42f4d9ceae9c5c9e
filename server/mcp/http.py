"""The MCP endpoint on Tornado's HTTP/1.1 server, below ``tornado.web`` on purpose.

The whole order of checks (§2 of the protocol, steps 1 to 10) is in this module, and every step
answers with the one :class:`~server.mcp.protocol.Reply` type; the bridge only runs the method
(step 9, :meth:`~server.core.bridge.Bridge.dispatch`). A message delegate sees the headers before
the
body, so the checks run without a routing layer, an oversized body is refused before it is read,
and the hot path stays a handful of function calls. Early rejects are answered only after the
(bounded) body has been read, so a keep-alive connection stays in sync for the next request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from tornado import gen, httputil
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop, PeriodicCallback
from tornado.iostream import IOStream, StreamClosedError

from ..core.bridge import Bridge
from ..core.inflight import CallHandle
from .modern import MODERN_VERSION, check_request, is_modern
from .netlimits import LimitedHTTPServer
from .protocol import (
    BODY_TOO_LARGE,
    INTERNAL,
    MAX_BODY_BYTES,
    METHOD_NOT_ALLOWED,
    SERVER_ERROR,
    UNAUTHORIZED,
    Reject,
    Reply,
    bearer_token,
    check_host_origin,
    check_protocol_version,
    error_body,
    parse_message,
)

log = logging.getLogger(__name__)

TOO_MANY_CONNECTIONS = Reject(503, SERVER_ERROR, "too many connections")

# Tornado itself cuts chunked bodies above this (with a bare 400 and a close); below it, our
# own count answers 413 with a JSON-RPC body. Content-Length bodies are refused before reading.
TORNADO_BODY_CAP = 4 * MAX_BODY_BYTES
IDLE_CONNECTION_TIMEOUT_S = 120.0
BODY_TIMEOUT_S = 30.0
LINGER_S = 2.0  # how long an oversized body is drained after the 413
LINGER_MAX_BYTES = 64 * 1024 * 1024

_REASONS = httputil.responses


class McpServer(httputil.HTTPServerConnectionDelegate):
    """The MCP endpoint's HTTP delegate: one :class:`McpExchange` per request, and the sweep that
    closes connections whose body trickles in.

    Why below ``tornado.web``: the numbered checks run on the headers before a body is read.
    """

    def __init__(
        self,
        bridge: Bridge,
        loopback_bound: bool,
        idle_timeout_s: float = IDLE_CONNECTION_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.bridge = bridge
        self.loopback_bound = loopback_bound
        self.idle_timeout_s = idle_timeout_s
        self.body_timeout_s = body_timeout_s
        # Requests whose body is still arriving, with when their headers came in. One sweep a
        # second closes the overdue ones: the same slow-body protection as Tornado's
        # ``body_timeout``, without arming a timer around every request (~10% of throughput).
        self.reading: dict[McpExchange, float] = {}
        # The sweep runs only while a body is awaited: an idle bridge must not wake each second.
        self._sweeper = PeriodicCallback(self._sweep, min(1.0, body_timeout_s / 4) * 1000)
        self.sweeping = False  # the sweeper is armed (cheaper to read than is_running())
        self._serving = False
        self.active: set[asyncio.Task[None]] = set()

    def start_request(
        self, server_conn: object, request_conn: httputil.HTTPConnection
    ) -> httputil.HTTPMessageDelegate:
        return McpExchange(self, request_conn)

    def http_server(self, max_connections: int = 1024) -> HTTPServer:
        """The Tornado server for this delegate; call on the bridge loop (the sweeper starts
        with the first request)."""
        self._serving = True
        server = LimitedHTTPServer(
            self,
            max_body_size=TORNADO_BODY_CAP,
            idle_connection_timeout=self.idle_timeout_s,
            xheaders=False,
        )
        server.configure_limits(max_connections, TOO_MANY_CONNECTIONS.body(), "MCP listener")
        server.sweep_idle()  # one timer for idle connections, not one per request
        return server

    def stop(self) -> None:
        self._serving = False
        self._sweeper.stop()
        self.sweeping = False

    def arm_sweeper(self) -> None:
        """A body is awaited: sweep once a second until none is."""
        if self._serving:
            self._sweeper.start()
            self.sweeping = True

    def _sweep(self) -> None:
        if not self.reading:
            self._sweeper.stop()  # idle again; the next request arms it
            self.sweeping = False
            return
        limit = time.monotonic() - self.body_timeout_s
        for exchange, since in list(self.reading.items()):
            if since < limit:
                self.reading.pop(exchange, None)
                exchange.abort()


class McpExchange(httputil.HTTPMessageDelegate):
    """One request/response on a connection."""

    __slots__ = (
        "answered",
        "chunks",
        "conn",
        "handle",
        "headers",
        "machine",
        "method",
        "server",
        "size",
    )

    def __init__(self, server: McpServer, conn: httputil.HTTPConnection) -> None:
        self.server = server
        self.conn = conn
        self.chunks: list[bytes] = []
        self.size = 0
        self.method = ""
        self.headers: httputil.HTTPHeaders | None = None
        self.handle: CallHandle | None = None
        self.answered = False
        self.machine = ""  # which machine's token the request carries (server/machines)

    # -- tornado callbacks ----------------------------------------------------------------------

    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> None:
        assert isinstance(start_line, httputil.RequestStartLine)
        self.method = start_line.method
        self.headers = headers
        length = headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            self._refuse_oversized(int(length))
            return
        server = self.server
        server.reading[self] = time.monotonic()
        if not server.sweeping:
            server.arm_sweeper()

    def data_received(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size <= MAX_BODY_BYTES:
            self.chunks.append(chunk)

    def finish(self) -> None:
        self.server.reading.pop(self, None)
        try:
            early = self._early_checks()
        except Exception:
            log.exception("internal error: request checks")
            early = INTERNAL.reply()
        if early is not None:
            self._respond(early)
            return
        try:
            reply = self._dispatch()
        except Exception:
            log.exception("internal error")
            reply = INTERNAL.reply()
        if isinstance(reply, Reply):
            self._respond(reply)  # answered without a Task or another loop turn
            return
        # Tornado reports a hang-up during the async part only through this callback.
        # Tornado's HTTPServer passes an HTTP1Connection; the HTTPConnection interface lacks this.
        self.conn.set_close_callback(self.on_connection_close)  # type: ignore[attr-defined]
        if self.handle is not None:
            self.handle.answer = self._respond  # a cancel or a DELETE may answer it early
        task = asyncio.ensure_future(self._process(reply))
        self.server.active.add(task)
        task.add_done_callback(self.server.active.discard)

    def on_connection_close(self) -> None:
        self.server.reading.pop(self, None)
        if self.handle is not None:
            self.server.bridge.connection_closed(self.handle)

    def abort(self) -> None:
        """Close a connection whose body did not arrive in time."""
        close = getattr(self.conn, "close", None)
        if close is not None:
            close()

    # -- the order of checks ----------------------------------------------------------------------

    def _early_checks(self) -> Reply | None:
        """Steps 1-3 (+ the body cap and DELETE): everything that needs no parsing."""
        headers = self.headers
        assert headers is not None
        bridge = self.server.bridge
        method = self.method
        modern = headers.get("MCP-Protocol-Version") == MODERN_VERSION
        if method != "POST" and (method != "DELETE" or modern):
            # A modern client (§ 9) has no session to DELETE and no stream to GET.
            if modern:
                return Reply(METHOD_NOT_ALLOWED.status, b"", {"Allow": "POST"})
            extra = {"Allow": "POST, DELETE"} if method == "GET" else None
            return Reply(METHOD_NOT_ALLOWED.status, b"", extra)
        if self.size > MAX_BODY_BYTES:
            # A chunked body that grew too large: it has been read, but the protocol says the
            # connection closes after a 413, and Tornado adds the header when it does.
            self.conn._disconnect_on_finish = True  # type: ignore[attr-defined]  # noqa: SLF001
            return BODY_TOO_LARGE.reply()
        reject = check_host_origin(
            headers.get("Host"),
            headers.get("Origin"),
            loopback_bound=self.server.loopback_bound,
            allowed=bridge.config.allowed_origins,
        )
        if reject is not None:
            return reject.reply()
        machine = bridge.identify(bearer_token(headers.get("Authorization")))
        if machine is None:
            bridge.note_unauthorized()
            return UNAUTHORIZED.reply()
        self.machine = machine
        if method == "DELETE":
            sid = headers.get("mcp-session-id")
            if sid and bridge.remove_session(sid, machine):
                # Its held calls end first, each with a bare 202 (see Bridge.end_held_calls).
                bridge.end_held_calls(sid)
            return Reply(204)
        return None

    async def _process(self, pending: Coroutine[Any, Any, Reply]) -> None:
        try:
            reply = await pending
        except Exception:
            log.exception("internal error")
            reply = INTERNAL.reply()
        self._respond(reply)

    def _dispatch(self) -> Reply | Coroutine[Any, Any, Reply]:
        """Steps 4-9: parse, shape, session, protocol version header, notifications, method."""
        body = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks = []
        msg, reject = parse_message(body)
        if reject is not None:
            return reject.reply()
        assert msg is not None and self.headers is not None
        headers = self.headers
        bridge = self.server.bridge
        method: str = msg["method"]
        version = headers.get("MCP-Protocol-Version")
        if is_modern(version, method, msg.get("params")):
            assert version is not None
            return self._dispatch_modern(msg, version)
        req_id = msg.get("id")
        session = None
        if method != "initialize":
            sid = headers.get("mcp-session-id")
            if sid is None:
                return Reply(400, error_body(req_id, SERVER_ERROR, "missing mcp-session-id"))
            session = bridge.touch_session(sid, self.machine)
            if session is None:
                return Reply(404, error_body(req_id, SERVER_ERROR, "unknown session"))
        reject = check_protocol_version(headers.get("MCP-Protocol-Version"), req_id)
        if reject is not None:
            return reject.reply()
        if method.startswith("notifications/"):
            if method == "notifications/cancelled" and session is not None:
                bridge.cancel(session.sid, msg.get("params"))
            return Reply(202)
        if method == "tools/call":
            self.handle = CallHandle()
        return bridge.dispatch(msg, session, self.handle, self.machine)

    def _dispatch_modern(
        self, msg: dict[str, Any], version: str
    ) -> Reply | Coroutine[Any, Any, Reply]:
        """§ 9: one self-contained request, no session: version, headers, ``_meta``, method."""
        headers = self.headers
        assert headers is not None
        checked = check_request(msg, version, headers.get("Mcp-Method"), headers.get("Mcp-Name"))
        if isinstance(checked, Reply):
            return checked
        if "id" not in msg:
            return Reply(202)  # no client-to-server notification means anything on this wire
        if msg["method"] == "tools/call":
            self.handle = CallHandle()
        return self.server.bridge.dispatch_modern(msg, checked, self.handle, self.machine)

    # -- writing ---------------------------------------------------------------------------------

    def _respond(self, reply: Reply) -> None:
        """Write the response; only the first answer counts (a cancel may have answered)."""
        if self.answered:
            return
        self.answered = True
        headers = httputil.HTTPHeaders()
        if reply.body:
            headers["Content-Type"] = "application/json"
        if reply.status != 204:
            headers["Content-Length"] = str(len(reply.body))
        if reply.headers:
            headers.update(reply.headers)
        start = httputil.ResponseStartLine("HTTP/1.1", reply.status, _REASONS.get(reply.status, ""))
        try:
            self.conn.write_headers(start, headers, reply.body or None)
            self.conn.finish()
        except StreamClosedError:
            pass  # the client left; its call was already audited

    def _refuse_oversized(self, declared: int) -> None:
        """Answer 413 without buffering the body, then close the connection.

        The body is read and thrown away for a bounded time first ("lingering close"): a
        client that sends everything before reading would otherwise get a reset instead of
        the 413.
        """
        conn: Any = self.conn
        stream = conn.detach()
        body = BODY_TOO_LARGE.body()
        head = (
            f"HTTP/1.1 413 {_REASONS[413]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        task = asyncio.ensure_future(_linger(stream, head + body, declared))
        self.server.active.add(task)
        task.add_done_callback(self.server.active.discard)


async def _linger(stream: IOStream, response: bytes, declared: int) -> None:
    remaining = min(declared, LINGER_MAX_BYTES)
    # gen.with_timeout takes an absolute time on Tornado's clock (time.time), not asyncio's.
    deadline = IOLoop.current().time() + LINGER_S
    try:
        await stream.write(response)
        while remaining > 0:
            chunk = await gen.with_timeout(
                deadline,
                stream.read_bytes(min(remaining, 65536), partial=True),
                quiet_exceptions=(StreamClosedError,),
            )
            remaining -= len(chunk)
    except (StreamClosedError, TimeoutError, gen.TimeoutError):
        pass
    finally:
        stream.close()
