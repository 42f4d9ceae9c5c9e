"""Upstream MCP servers behind the bridge: ``mcp__<server>__<tool>`` with the bridge's approvals.

Each configured server gets a supervisor task on the bridge loop. It connects with the official
``mcp`` SDK client (stdio through :class:`StdioTransport`, HTTP through the SDK's Streamable
HTTP transport), lists the tools and registers each as an :class:`UpstreamTool` - an ordinary
:class:`server.tools.base.Tool`, so tiers, approvals, audit and rules apply unchanged. When the
connection ends (a stdio server died, an HTTP server stopped answering its ping) the tools are
withdrawn and the supervisor reconnects with exponential back-off; a server that is down costs
``tools/list`` nothing - its tools are simply absent and the reason is in the snapshot.

The stdio transport is :mod:`server.upstream.stdio`; the tool wrapper and the pins of approved
tool definitions are :mod:`server.upstream.tools`. This module is the supervisor: one
connection's life (connect, list, watch, reconnect with back-off, withdraw) and the manager of
all of them. A little over 400 lines because that life is one state machine over one SDK
session; split, its states would be read across files.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import REQUEST_TIMEOUT
from pydantic import TypeAdapter, ValidationError

from .. import __version__
from ..box import probe as box_probe
from ..box.run import BoxRequest
from ..tools.base import ToolResult
from ..types import ServerView
from ..vocab import ServerState
from . import http as upstream_http
from .config import McpServerSpec, working_dir
from .stdio import BOX_HINT, BoxRefused, StdioTransport, child_env
from .tools import PinStore, RawResult, UpstreamTool

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 10.0  # a server that stayed up this long starts its back-off afresh
START_TIMEOUT_S = 20.0  # initialize and tools/list
PING_EVERY_S = 15.0  # HTTP servers: how often we check the connection is alive
RELIST_EVERY_PINGS = 4  # and re-list their tools every minute: the SDK's GET stream (where
# list_changed arrives) gives up silently after two failed reconnects
STDERR_LINES = 50
TOOL_PAGES_MAX = 50
TOOLS_MAX = 1000  # per server; more are skipped (and said so)
# Results as plain JSON. The SDK's send_request takes a TypeAdapter of any type, but its TypeVar
# is bound to BaseModel: hence the type-var ignores where _RAW is passed.
_RAW = TypeAdapter(dict[str, Any])
TIMED_OUT = "Request 'tools/call' timed out"  # the SDK's own text when our deadline passes


class UpstreamServer:
    """One upstream MCP server's supervised connection: its state, its tools and its stderr.

    Why one object per server: a server's life (connect, list, watch, reconnect with back-off,
    withdraw its tools) is one state machine over one SDK session, and the snapshot shows each
    server on its own; the :class:`UpstreamManager` only starts, restarts and stops them.
    """

    def __init__(self, spec: McpServerSpec, manager: UpstreamManager) -> None:
        self.spec = spec
        self.manager = manager
        self.pins = manager.pins
        self.state = ServerState.STOPPED
        self.last_error: str | None = None
        self.restarts = 0
        self.tools: list[UpstreamTool] = []
        self._by_name: dict[str, UpstreamTool] = {}  # the same tools by their upstream name
        self.skipped: list[str] = []
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._restart = False
        self._refreshing: asyncio.Task[None] | None = None
        self._refresh_again = False
        self._stdio: StdioTransport | None = None
        self._defs: list[dict[str, Any]] = []
        self._http: httpx2.AsyncClient | None = None

    # -- what the UIs see ---------------------------------------------------------------------

    def view(self) -> ServerView:
        return ServerView(
            self.spec.name,
            self.spec.kind,
            self.spec.target,
            self.state.value,
            self.last_error,
            len(self.tools),
            self.restarts,
            tuple(t.name for t in self.tools if t.grants_suspended()),
            tuple(self.skipped),
            tuple(self.stderr),
            self._box_text(),
        )

    def changed(self) -> None:
        self.manager.on_change(False)

    def _set(self, state: ServerState, error: str | None = None) -> None:
        self.state = state
        if error is not None or state is ServerState.READY:
            self.last_error = error
        self.changed()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"upstream {self.spec.name}"
        )

    def restart(self) -> None:
        self._restart = True
        self._wake.set()

    async def stop(self, timeout: float) -> None:
        self._stopping = True
        self._wake.set()
        task = self._task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=0.2)

    async def _supervise(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._stopping:
            self._restart = False
            self._wake.clear()
            self._set(ServerState.STARTING)
            up_since: float | None = None
            error: str | None = None
            try:
                up_since = await self._session()
            except Exception as e:  # ExceptionGroups included: describe_error unwraps them
                error = describe_error(e)
            finally:
                self.client = None
                self._withdraw()
            if self._stopping:
                break
            if up_since is not None and time.monotonic() - up_since >= HEALTHY_AFTER_S:
                backoff = BACKOFF_FIRST_S
            if self._restart:
                self.restarts += 1
                backoff = BACKOFF_FIRST_S
                continue
            if error is None or (self._stdio is not None and self._stdio.exited.is_set()):
                error = self._exit_reason()  # "exited with code 3: <its last stderr line>"
            self._set(ServerState.FAILED, error)
            log.warning("upstream %s: %s - retrying in %.1f s", self.spec.name, error, backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), backoff)
            backoff = BACKOFF_FIRST_S if self._restart else min(backoff * 2, BACKOFF_MAX_S)
            self.restarts += 1
        self._set(ServerState.STOPPED)

    def _box_text(self) -> str:
        """Where a stdio server runs, for every UI: the human should know what it can touch."""
        if self.spec.kind != "stdio":
            return ""
        if not self.spec.box:
            return 'outside the box ("box": false)'
        if self.manager.box is None:
            return "outside the box (this bridge boxes no server)"
        status = box_probe.status()
        if not status.available:
            return f"outside the box: no box here ({status.detail})"
        net = "network on" if self.spec.network else "no network"
        text = f"in the box ({net}; writes only its cwd inside a root, else its TMPDIR)"
        if self.state is ServerState.FAILED:  # what it lacked is otherwise a mystery
            text += f"; it failed there: {BOX_HINT}"
        return text

    def _exit_reason(self) -> str:
        if self._stdio is not None:
            code = self._stdio.returncode
            tail = next((line for line in reversed(self.stderr) if line.strip()), "")
            text = "the server exited" + (f" with code {code}" if code else "")
            return text + (f": {tail.strip()[:200]}" if tail else "")
        return "the connection was lost"

    def _transport(self) -> Any:
        spec = self.spec
        if spec.kind == "stdio":
            env = child_env(spec, self.manager.secret())
            cwd = working_dir(spec, self.manager.default_cwd)
            self._stdio = StdioTransport(spec, env, self.stderr, cwd, self.manager.box)
            return self._stdio
        self._stdio = None
        http = upstream_http.http_client(spec.headers, spec.timeout_s)
        self._http = http
        return streamable_http_client(
            spec.url or "", http_client=http, max_sse_event_size=upstream_http.MESSAGE_MAX_BYTES
        )

    async def _session(self) -> float | None:
        """One connection: connect, list, serve until it ends; the time it became ready."""
        transport = self._transport()
        client = Client(
            transport,
            mode="legacy",
            cache=None,
            read_timeout_seconds=START_TIMEOUT_S,
            message_handler=self._on_message,
            client_info=types.Implementation(name="omp-a2a-bridge", version=__version__),
        )
        try:
            async with client:
                self.client = client
                await self._list()
                self._set(ServerState.READY)
                log.info("upstream %s: ready, %d tool(s)", self.spec.name, len(self.tools))
                up = time.monotonic()
                await self._serve(client)
                return up
        finally:
            if self._http is not None:
                with contextlib.suppress(Exception):
                    await self._http.aclose()

    async def _serve(self, client: Client) -> None:
        """Until the process exits, the HTTP server stops answering, a restart or the stop."""
        stdio = self._stdio
        pings = 0
        while not (self._stopping or self._restart):
            waits = {asyncio.ensure_future(self._wake.wait())}
            if stdio is not None:
                waits.add(asyncio.ensure_future(stdio.exited.wait()))
            try:
                await asyncio.wait(
                    waits, timeout=None if stdio is not None else PING_EVERY_S,
                    return_when=asyncio.FIRST_COMPLETED,
                )  # fmt: skip
            finally:
                for w in waits:
                    w.cancel()
            if stdio is not None and stdio.exited.is_set():
                return
            if stdio is None and not (self._stopping or self._restart or self._wake.is_set()):
                pings += 1
                try:
                    await client.session.send_request(  # type: ignore[type-var]  # _RAW
                        types.PingRequest(), _RAW, request_read_timeout_seconds=5.0
                    )
                except Exception:
                    return
                if pings % RELIST_EVERY_PINGS == 0:
                    self._schedule_refresh()
            self._wake.clear()

    # -- tools -------------------------------------------------------------------------------------

    async def _list(self) -> None:
        assert self.client is not None
        session = self.client.session
        defs: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(TOOL_PAGES_MAX):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            request = types.ListToolsRequest(params=params)
            page = await session.send_request(request, _RAW)  # type: ignore[type-var]  # _RAW
            tools = page.get("tools")
            if isinstance(tools, list):
                defs += [t for t in tools if isinstance(t, dict)]
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str):
                break
        self._install(defs)

    def _install(self, defs: list[dict[str, Any]]) -> None:
        if self.tools and defs == self._defs:
            return  # a periodic re-list that found nothing new: tools/list stays cached
        self._defs = defs
        registry = self.manager.registry
        self._withdraw(notify=False)
        skipped: list[str] = []
        for i, d in enumerate(defs):
            name = d.get("name")
            if not isinstance(name, str):
                continue
            if i >= TOOLS_MAX:
                skipped.append(f"{len(defs) - TOOLS_MAX} more tool(s): over {TOOLS_MAX}")
                break
            try:
                tool = UpstreamTool(self, d)
                registry.add(tool)  # checks the name and compiles the schema
            except Exception as e:  # one odd definition must not cost the server its others
                skipped.append(f"{name}: {e}"[:300])
                continue
            self.tools.append(tool)
            self._by_name.setdefault(tool.upstream_name, tool)
        self.skipped = skipped
        for s in skipped:
            log.warning("upstream %s: tool skipped - %s", self.spec.name, s)
        self.manager.on_change(True)

    def _withdraw(self, notify: bool = True) -> None:
        if not self.tools:
            return
        for t in self.tools:
            self.manager.registry.remove(t.name)
        self.tools = []
        self._by_name = {}
        if notify:
            self.manager.on_change(True)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._schedule_refresh()

    def _schedule_refresh(self) -> None:
        """Re-list after ``tools/list_changed``, off the SDK's reader (it would deadlock there)."""
        if self._refreshing is not None and not self._refreshing.done():
            self._refresh_again = True
            return
        self._refreshing = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        while True:
            self._refresh_again = False
            try:
                if self.client is not None and self.state is ServerState.READY:
                    await self._list()
            except Exception as e:
                log.warning("upstream %s: re-listing tools failed: %s", self.spec.name, e)
            if not self._refresh_again:
                return

    def current(self, upstream_name: str) -> UpstreamTool | None:
        """The tool as the server lists it now (asked once per call: a dict, not a scan of up
        to 1000 tools)."""
        return self._by_name.get(upstream_name)

    # -- calls ------------------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """Forward one call; every failure becomes an ``isError`` result with a clear text.

        Cancelling the awaiting task sends ``notifications/cancelled`` upstream (a stdio
        server's request is written past the SDK session, an HTTP server's goes through it).
        """
        name, client = self.spec.name, self.client
        if client is None or self.state is not ServerState.READY:
            # Not last_error: it may quote the server's stderr, which stays on this machine.
            return ToolResult.text(
                f"upstream server '{name}' is not available ({self.state.value}); "
                "the bridge keeps trying to reconnect it",
                True,
            )
        if self._stdio is not None:
            raw = await self._call_stdio(self._stdio, tool, args)
        else:
            raw = await self._call_session(client, tool, args)
        if isinstance(raw, ToolResult):
            return raw
        content = raw.get("content")
        if not isinstance(content, list):
            return ToolResult.text(
                f"upstream server '{name}' sent a result without content for '{tool}'", True
            )
        return RawResult(content, raw.get("isError") is True, raw)

    async def _call_stdio(
        self, stdio: StdioTransport, tool: str, args: dict[str, Any]
    ) -> dict[str, Any] | ToolResult:
        """``tools/call`` past the SDK session (:meth:`StdioTransport.request`): the result
        dict, or the text of what went wrong, in the words the SDK path uses."""
        name = self.spec.name
        params = {"name": tool, "arguments": args}
        try:
            msg = await stdio.request("tools/call", params, self.spec.timeout_s)
        except TimeoutError:
            return self._timed_out(tool)
        except ConnectionError:
            self._wake.set()
            return ToolResult.text(
                f"upstream server '{name}' stopped while running '{tool}'; it is being restarted",
                True,
            )
        error = msg.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            text = error.get("message") if isinstance(error, dict) else None
            if not isinstance(code, int) or isinstance(code, bool) or not isinstance(text, str):
                return self._malformed(tool)
            return self._error(tool, text, code)
        result = msg.get("result")
        return result if isinstance(result, dict) else self._malformed(tool)

    async def _call_session(
        self, client: Client, tool: str, args: dict[str, Any]
    ) -> dict[str, Any] | ToolResult:
        """``tools/call`` through the SDK session (HTTP servers)."""
        name = self.spec.name
        params = types.CallToolRequestParams(name=tool, arguments=args)
        try:
            raw: dict[str, Any] = await client.session.send_request(  # type: ignore[type-var]
                types.CallToolRequest(params=params),
                _RAW,
                request_read_timeout_seconds=self.spec.timeout_s,
            )
        except MCPError as e:
            if self.client is None or self._lost():
                self._wake.set()
                return ToolResult.text(
                    f"upstream server '{name}' stopped while running '{tool}'; "
                    "it is being restarted",
                    True,
                )
            if e.error.code == REQUEST_TIMEOUT and e.error.message == TIMED_OUT:  # ours
                return self._timed_out(tool)
            return self._error(tool, e.error.message, e.error.code)
        except ValidationError:
            return self._malformed(tool)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.HTTPError) as e:
            log.warning("upstream %s: '%s' failed: %s", name, tool, describe_error(e))
            self._wake.set()  # the supervisor checks the connection and reconnects
            return ToolResult.text(
                f"upstream server '{name}' is unreachable; the bridge is reconnecting it", True
            )
        return raw

    def _timed_out(self, tool: str) -> ToolResult:
        return ToolResult.text(
            f"upstream server '{self.spec.name}' did not answer '{tool}' within "
            f"{self.spec.timeout_s:g} s (the call was cancelled upstream)",
            True,
        )

    def _error(self, tool: str, message: str, code: int) -> ToolResult:
        return ToolResult.text(
            f"upstream server '{self.spec.name}' returned an error for '{tool}': "
            f"{message} (code {code})",
            True,
        )

    def _malformed(self, tool: str) -> ToolResult:
        return ToolResult.text(
            f"upstream server '{self.spec.name}' sent a malformed result for '{tool}'", True
        )

    def _lost(self) -> bool:
        stdio = self._stdio
        return stdio is not None and stdio.exited.is_set()


def describe_error(e: BaseException) -> str:
    """A short text for the UIs; task groups' wrappers are peeled to what actually failed."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, BoxRefused):
        return str(e)
    if isinstance(e, NotADirectoryError):
        return f"cannot start it: {e}"
    if isinstance(e, FileNotFoundError):
        return f"cannot start it: command not found ({e.filename or e})"
    if isinstance(e, PermissionError):
        return f"cannot start it: permission denied ({e.filename or e})"
    if isinstance(e, MCPError):
        return f"{e.error.message} (code {e.error.code})"
    if isinstance(e, httpx2.HTTPError):
        return f"HTTP: {type(e).__name__}: {e}"[:300]
    text = str(e).strip()
    return f"{type(e).__name__}: {text}"[:300] if text else type(e).__name__


class UpstreamManager:
    """All upstream servers of one bridge; runs on the bridge loop."""

    def __init__(
        self,
        specs: tuple[McpServerSpec, ...],
        registry: Any,
        pins_path: str,
        secret: Callable[[], str | None],
        on_change: Callable[[bool], None],
        default_cwd: str | None = None,
        box: BoxRequest | None = None,
    ) -> None:
        self.registry = registry
        # What stdio servers' boxes are built from (the bridge's roots, ``box`` config and own
        # files); None: no server is boxed (a manager built without a bridge, in tests).
        self.box = box
        self.default_cwd = default_cwd  # where a stdio server without ``cwd`` runs
        self.pins = PinStore(pins_path)
        self.secret = secret
        self.on_change = on_change  # (tools changed?) -> None
        self.servers = {s.name: UpstreamServer(s, self) for s in specs}

    def start(self) -> None:
        for s in self.servers.values():
            s.start()

    def restart(self, name: str) -> bool:
        server = self.servers.get(name)
        if server is None:
            return False
        server.restart()
        return True

    async def stop(self, timeout: float) -> None:
        if self.servers:
            await asyncio.gather(*(s.stop(timeout) for s in self.servers.values()))

    def views(self) -> tuple[ServerView, ...]:
        return tuple(s.view() for s in self.servers.values())
