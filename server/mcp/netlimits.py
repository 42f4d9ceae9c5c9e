"""Connection limits and file-descriptor exhaustion: neither listener may be taken down by idle
sockets.

- :func:`raise_nofile` lifts the soft ``RLIMIT_NOFILE`` to the hard limit at start (the common
  soft limit of 1024 is what ~1020 idle connections exhausted).
- :class:`LimitedHTTPServer` caps the open connections per listener. At the cap, a new
  connection takes the place of the connection that has waited longest *without a request in
  progress* (idle keep-alive, never sent anything, or still trickling its headers), so idle
  sockets cannot lock real clients out; when every connection is busy, the new one gets one
  fixed ``503`` (``too many connections``) and is closed at once.
- Its accept loop survives ``EMFILE``/``ENFILE`` (Tornado's raises, and the readable listening
  socket then retries in a tight loop: 201 MB of tracebacks were measured): it frees an idle
  connection if there is one, else stops accepting, logs one line, and retries with a growing
  back-off until descriptors are free again.
- With :meth:`LimitedHTTPServer.sweep_idle` (the MCP listener), a connection that waits for a
  request's headers longer than the idle timeout is closed by one timer for the listener
  instead of Tornado's timer around every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import sys
import time
import weakref
from collections.abc import Iterable
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream
from tornado.log import app_log

log = logging.getLogger(__name__)

ACCEPT_BATCH = 128  # connections accepted per wake-up, so other work is not starved
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 1.0
LOG_EVERY_S = 60.0  # at most one "out of file descriptors" line a minute per listener
CONTROL_MAX_CONNECTIONS = 64
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# Every limited listener of this process: one out of descriptors may free an idle connection
# of another (the MCP listener's idle sockets must not lock the control API out).
_SERVERS: weakref.WeakSet[LimitedHTTPServer] = weakref.WeakSet()


def nofile_limit() -> int | None:
    """The soft RLIMIT_NOFILE, or None where there is none (Windows)."""
    if sys.platform == "win32":
        return None
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_nofile() -> int | None:
    """Raise the soft descriptor limit to the hard one; returns the soft limit now in force."""
    if sys.platform == "win32":  # no resource module
        return None
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    targets = [hard]
    if sys.platform == "darwin":  # an "unlimited" hard limit is refused there; OPEN_MAX is not
        targets = [min(hard, 10240) if hard != resource.RLIM_INFINITY else 10240, hard]
    for target in targets:
        if soft == resource.RLIM_INFINITY or (target != resource.RLIM_INFINITY and target <= soft):
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            break
        except (ValueError, OSError):
            continue
    return nofile_limit()


def connection_caps(configured: int, nofile: int | None) -> tuple[int, int]:
    """(MCP listener cap, control listener cap).

    The most the descriptor limit allows is what it leaves after a reserve for files, pipes,
    the audit log and the control API's peer lookup (an eighth, at least 64) and the control
    listener's share. ``configured`` 0 means that; an explicit value is used up to it (see
    :func:`cap_clamped`). Why never more: past it the process runs out of descriptors, every
    file open fails, and the control API cannot look up who is asking (it refuses, fail closed)
    while a flood of idle connections keeps the table full.
    """
    limit = nofile or 65536
    control = max(4, min(CONTROL_MAX_CONNECTIONS, limit // 16))
    reserve = max(64, limit // 8)
    most = max(16, limit - reserve - control)
    if configured > 0:
        return min(configured, most), control
    return most, control


def cap_clamped(configured: int, nofile: int | None) -> str | None:
    """The start's warning when ``limits.max_connections`` is more than the descriptor limit
    allows (it is lowered, not refused: the limit is the machine's, not a config mistake)."""
    used, _ = connection_caps(configured, nofile)
    if configured <= 0 or used >= configured:
        return None
    return (
        f"limits.max_connections {configured} is more than {nofile} file descriptors allow; "
        f"using {used} (raise the descriptor limit, e.g. ulimit -n, for more)"
    )


class NoDelayStream(IOStream):
    """A connection with ``TCP_NODELAY`` set once, at accept.

    Why: Tornado turns Nagle off before each response's last write and on again after it: two
    ``setsockopt`` calls and two ``socket.family`` enum conversions per request, ~10% of a
    ``tools/call read``'s GIL time in a profile. Every response here leaves in one or a few
    whole writes (and the events socket wants no delay anyway), so there is nothing for Nagle
    to coalesce."""

    def set_nodelay(self, value: bool) -> None:
        return


def _no_delay(conn: socket.socket) -> None:
    if conn.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):  # the peer may already be gone
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class LimitedHTTPServer(HTTPServer):
    """An HTTPServer with a connection cap and an accept loop that survives EMFILE."""

    max_connections = 1024
    refusal = b""
    label = "listener"
    refused = 0
    _last_log = -LOG_EVERY_S
    _backoff = 0.0

    def configure_limits(self, max_connections: int, refusal_body: bytes, label: str) -> None:
        self.max_connections = max_connections
        self.label = label
        self.refusal = (
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(refusal_body)).encode() + b"\r\n"
            b"Retry-After: 1\r\nConnection: close\r\n\r\n" + refusal_body
        )
        self.refused = 0
        self.evicted = 0
        self._last_log = -LOG_EVERY_S
        self._backoff = 0.0
        # connection -> its current request connection and when it began to wait for that
        # request, oldest wait first (re-inserted at every request start); a request
        # connection without a start line yet is idle
        self._waiting: dict[Any, tuple[Any, float]] = {}
        self._idle_timeout: float | None = None  # set by sweep_idle(): swept, not timed
        self._idle_timer: asyncio.TimerHandle | None = None
        _SERVERS.add(self)

    def sweep_idle(self) -> None:
        """Close connections that wait longer than the idle timeout for a request's headers
        with one timer for the listener, instead of Tornado's timer around every request's
        headers. Call on the loop that serves, before the first connection.

        Why: Tornado arms and cancels a timeout (``gen.with_timeout``: a future, a timer, a
        callback chain) around the headers of every request on a keep-alive connection, ~6%
        of a bare handler's CPU per request (docs/design/performance.md). Here the wait's
        start is noted where the listener already notes the connection (``start_request``),
        and one timer, due when the oldest wait times out, closes what is still waiting: an
        idle keep-alive connection and headers that trickle in alike, as Tornado did.
        """
        timeout = self.conn_params.header_timeout
        if timeout is None:
            return
        self._idle_timeout = timeout
        self._loop = asyncio.get_running_loop()
        self.conn_params.header_timeout = None  # every connection made from now on

    def start_request(self, server_conn: object, request_conn: Any) -> Any:
        waiting = self._waiting
        waiting.pop(server_conn, None)
        now = time.monotonic()
        waiting[server_conn] = (request_conn, now)
        if self._idle_timer is None and self._idle_timeout is not None:
            self._idle_timer = self._loop.call_at(now + self._idle_timeout, self._sweep_idle)
        return super().start_request(server_conn, request_conn)

    def _sweep_idle(self) -> None:
        """Close the connections whose wait for headers outlasted the timeout; come back when
        the oldest other wait would (none waiting: the next request arms it again)."""
        self._idle_timer = None
        timeout = self._idle_timeout
        assert timeout is not None
        limit = time.monotonic() - timeout
        for server_conn, (request_conn, since) in list(self._waiting.items()):
            if since > limit:  # in wait order: every later one waited less
                self._idle_timer = self._loop.call_at(since + timeout, self._sweep_idle)
                return
            if getattr(request_conn, "_request_start_line", "unknown") is None:
                del self._waiting[server_conn]
                stream = getattr(server_conn, "stream", None)
                if stream is not None:
                    stream.close()  # as Tornado's header timeout did; its on_close follows

    def on_close(self, server_conn: object) -> None:
        self._waiting.pop(server_conn, None)
        super().on_close(server_conn)

    def _handle_connection(self, connection: socket.socket, address: Any) -> None:
        """Tornado's, with :class:`NoDelayStream` (TLS, never used here, keeps Tornado's)."""
        if self.ssl_options is not None:
            super()._handle_connection(connection, address)
            return
        _no_delay(connection)
        try:
            stream = NoDelayStream(
                connection,
                max_buffer_size=self.max_buffer_size,
                read_chunk_size=self.read_chunk_size,
            )
            self.handle_stream(stream, address)  # HTTPServer's: synchronous
        except Exception:
            app_log.error("Error in connection callback", exc_info=True)

    def evict_idle(self) -> bool:
        """Close the connection idle the longest (no request headers yet); False if none."""
        for server_conn, (request_conn, _since) in self._waiting.items():
            if getattr(request_conn, "_request_start_line", "unknown") is None:
                del self._waiting[server_conn]
                stream = getattr(server_conn, "stream", None)
                if stream is None:
                    return False
                stream.close()  # frees the descriptor now; Tornado's on_close follows
                self.evicted += 1
                if self.evicted == 1 or self.evicted % 1000 == 0:
                    log.warning(
                        "%s: %d idle connection(s) closed to make room for new ones",
                        self.label,
                        self.evicted,
                    )
                return True
        return False

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        for sock in sockets:
            self._sockets[sock.fileno()] = sock
            self._handlers[sock.fileno()] = self._accept_on(sock)

    @property
    def open_connections(self) -> int:
        return len(getattr(self, "_connections", ()))

    def _closing(self) -> int:
        """Evicted connections Tornado has not yet removed from its set (their fd is closed)."""
        return sum(1 for c in getattr(self, "_connections", ()) if c.stream.closed())

    def _accept_on(self, sock: socket.socket) -> Any:
        loop = IOLoop.current()
        state: dict[str, Any] = {"removed": False, "watching": True}

        def handler(fd: Any, events: int) -> None:
            for _ in range(ACCEPT_BATCH):
                if state["removed"]:
                    return
                try:
                    conn, address = sock.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except ConnectionAbortedError:
                    continue
                except OSError as e:
                    if e.errno in _EXHAUSTED:
                        if any(srv.evict_idle() for srv in [self, *_SERVERS]):
                            continue  # a descriptor is free again (from either listener)
                        self._pause(loop, sock, state, e)
                        return
                    raise
                self._backoff = 0.0
                n = self.open_connections
                full = n >= self.max_connections and n - self._closing() >= self.max_connections
                if full and not self.evict_idle():
                    self._refuse(conn)
                    continue
                self._handle_connection(conn, address)

        def remove() -> None:
            state["removed"] = True
            if state["watching"]:
                state["watching"] = False
                loop.remove_handler(sock)

        state["handler"] = handler
        loop.add_handler(sock, handler, IOLoop.READ)
        return remove

    def _pause(self, loop: IOLoop, sock: socket.socket, state: dict, e: OSError) -> None:
        """Out of descriptors: stop watching the socket and look again after a back-off."""
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            log.warning(
                "%s: out of file descriptors (%s); new connections wait until some close",
                self.label,
                e.strerror or e,
            )
        self._backoff = min(max(self._backoff * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
        if state["watching"]:
            state["watching"] = False
            loop.remove_handler(sock)

        def resume() -> None:
            if not state["removed"] and not state["watching"]:
                state["watching"] = True
                loop.add_handler(sock, state["handler"], IOLoop.READ)

        loop.call_later(self._backoff, resume)

    def _refuse(self, conn: socket.socket) -> None:
        """Past the cap: one fixed 503, closed at once (never held for the idle timeout)."""
        self.refused += 1
        if self.refused == 1 or self.refused % 1000 == 0:
            log.warning(
                "%s: %d connection(s) refused - at the limit of %d open connections",
                self.label,
                self.refused,
                self.max_connections,
            )
        with contextlib.suppress(OSError):
            conn.setblocking(False)
            conn.send(self.refusal)
            with contextlib.suppress(OSError):
                conn.recv(65536)  # whatever already arrived: closing on unread data resets
            conn.shutdown(socket.SHUT_WR)
        conn.close()
