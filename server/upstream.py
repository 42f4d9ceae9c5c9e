"""Upstream MCP servers behind the bridge: ``mcp__<server>__<tool>`` with the bridge's approvals.

Each configured server gets a supervisor task on the bridge loop. It connects with the official
``mcp`` SDK client (stdio through :class:`StdioTransport`, HTTP through the SDK's Streamable
HTTP transport), lists the tools and registers each as an :class:`UpstreamTool` - an ordinary
:class:`server.tools.base.Tool`, so tiers, approvals, audit and rules apply unchanged. When the
connection ends (a stdio server died, an HTTP server stopped answering its ping) the tools are
withdrawn and the supervisor reconnects with exponential back-off; a server that is down costs
``tools/list`` nothing - its tools are simply absent and the reason is in the snapshot.

Our own stdio transport (not the SDK's ``stdio_client``) because the bridge must: keep the
child's stderr in a small ring for the UI, give the child a minimal environment that never
carries the bridge's token or ``A2A_BRIDGE_*`` variables, and stop it within the bridge's 2 s
shutdown budget (the SDK waits up to 2 s + 2 s before it kills).

Pinning: a fingerprint of each tool's definition is saved (0600 JSON next to the config) when a
tier, a rule or a human first allows it; a later, different definition suspends every grant
until a human approves the new one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import REQUEST_TIMEOUT
from pydantic import TypeAdapter, ValidationError

from . import __version__
from .fsutil import write_private_atomic
from .paths import CallPaths, Escalation, PathPolicy
from .snapshot import ServerView, UpstreamInfo
from .tools.base import Tool, ToolContext, ToolResult
from .tools.bashpaths import arguments_escalation
from .upstream_config import McpServerSpec
from .vocab import Tier

log = logging.getLogger("a2a-bridge")

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 10.0  # a server that stayed up this long starts its back-off afresh
START_TIMEOUT_S = 20.0  # initialize and tools/list
PING_EVERY_S = 15.0  # HTTP servers: how often we check the connection is alive
RELIST_EVERY_PINGS = 4  # and re-list their tools every minute: the SDK's GET stream (where
# list_changed arrives) gives up silently after two failed reconnects
STDERR_LINES = 50
STDERR_LINE_MAX = 400
LINE_MAX_BYTES = 32 * 1024 * 1024
STOP_GRACE_S = 0.2  # after stdin closes, before SIGTERM; then as long again before SIGKILL
TOOL_PAGES_MAX = 50
TOOLS_MAX = 1000  # per server; more are skipped (and said so)
BASE_ENV = (
    ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
    if sys.platform != "win32"
    else (
        "APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT", "SYSTEMDRIVE",
        "SYSTEMROOT", "TEMP", "TMP", "USERNAME", "USERPROFILE", "PROCESSOR_ARCHITECTURE",
    )
)  # fmt: skip
# Results as plain JSON. The SDK's send_request takes a TypeAdapter of any type, but its TypeVar
# is bound to BaseModel: hence the type-var ignores where _RAW is passed.
_RAW = TypeAdapter(dict[str, Any])
TIMED_OUT = "Request 'tools/call' timed out"  # the SDK's own text when our deadline passes


class ServerState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


def child_env(spec: McpServerSpec, secret: str | None) -> dict[str, str]:
    """A minimal base plus the configured variables; never the bridge's own.

    Refused: any ``A2A_BRIDGE_*`` name, and any value that contains the bridge's token (a
    token pasted into a server's ``env`` by mistake).
    """
    env = {k: v for k in BASE_ENV if (v := os.environ.get(k)) is not None}
    env.update(spec.env)
    for k in list(env):
        if k.upper().startswith("A2A_BRIDGE_") or (secret and secret in env[k]):
            log.warning("upstream %s: variable %s withheld from its environment", spec.name, k)
            del env[k]
    return env


class StdioTransport(contextlib.AbstractAsyncContextManager[Any]):
    """Runs a stdio MCP server in its own process group; yields the SDK's stream pair."""

    def __init__(self, spec: McpServerSpec, env: dict[str, str], ring: collections.deque) -> None:
        self.spec = spec
        self.env = env
        self.ring = ring
        self.exited = asyncio.Event()
        self.pid: int | None = None
        self.returncode: int | None = None
        self._cm: contextlib.AbstractAsyncContextManager[Any] | None = None

    async def __aenter__(self) -> Any:
        self._cm = self._run()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._cm is not None
        return await self._cm.__aexit__(*exc)

    @contextlib.asynccontextmanager
    async def _run(self) -> AsyncIterator[Any]:
        spec = self.spec
        if spec.cwd is not None and not os.path.isdir(spec.cwd):
            raise NotADirectoryError(f"working directory {spec.cwd} does not exist")
        proc = await anyio.open_process(
            [spec.command or "", *spec.args],
            env=self.env,
            cwd=spec.cwd,
            start_new_session=True,
        )
        self.pid = proc.pid
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

        async def stdout() -> None:
            assert proc.stdout is not None
            buf = b""
            try:
                async with read_send:
                    async for chunk in proc.stdout:
                        buf += chunk
                        if len(buf) > LINE_MAX_BYTES:
                            self.ring.append("(bridge) a message over 32 MiB: disconnected")
                            return
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            if not line.strip():
                                continue
                            try:
                                item: SessionMessage | Exception = SessionMessage(
                                    types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                                )
                            except ValueError as e:
                                item = e
                            await read_send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass
            finally:
                self.exited.set()

        async def stderr() -> None:
            assert proc.stderr is not None
            buf = b""
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in proc.stderr:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        self.ring.append(line.decode("utf-8", "replace")[:STDERR_LINE_MAX])
                    buf = buf[-STDERR_LINE_MAX:]

        async def stdin() -> None:
            assert proc.stdin is not None
            try:
                async with write_recv:
                    async for msg in write_recv:
                        data = msg.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await proc.stdin.send(data.encode() + b"\n")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await read_send.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stdout)
            tg.start_soon(stderr)
            tg.start_soon(stdin)
            try:
                yield read_recv, write_send
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop(proc)
                    for s in (read_recv, write_send, read_send, write_recv):
                        await s.aclose()
                tg.cancel_scope.cancel()

    async def _stop(self, proc: Any) -> None:
        """Close stdin (the spec's polite stop), then SIGTERM, then SIGKILL the group."""
        with contextlib.suppress(Exception):
            await proc.stdin.aclose()
        # Windows has no SIGKILL (there, proc.kill() below is the hard stop).
        for sig in (None, signal.SIGTERM, getattr(signal, "SIGKILL", signal.SIGTERM)):
            if sig is not None and sys.platform != "win32":
                with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                    os.killpg(proc.pid, sig)
            elif sig is not None:
                with contextlib.suppress(ProcessLookupError, OSError):
                    proc.kill()
            with anyio.move_on_after(STOP_GRACE_S):
                await proc.wait()
            if proc.returncode is not None:
                self.returncode = proc.returncode
                break
        if sys.platform != "win32":  # children the server left behind in its group
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                os.killpg(proc.pid, signal.SIGKILL)


def fingerprint(definition: dict[str, Any]) -> str:
    """sha256 over what a human judged: name, description, input schema, annotations."""
    data = {k: definition.get(k) for k in ("name", "description", "inputSchema", "annotations")}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


class PinStore:
    """Approved tool fingerprints, ``{"tools": {full_name: sha256}}`` in a 0600 file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pins: dict[str, str] = {}
        self.unreadable = False  # then no tool counts as approved: each asks once again
        self._lock = threading.Lock()
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read())
            tools = data.get("tools", {}) if isinstance(data, dict) else {}
            self.pins = {k: v for k, v in tools.items() if isinstance(v, str)}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as e:
            self.unreadable = True
            log.warning("tool pins at %s unreadable (%s): every upstream tool asks again", path, e)

    def get(self, name: str) -> str | None:
        return self.pins.get(name)

    def set(self, name: str, fp: str) -> None:
        if self.pins.get(name) == fp:
            return
        self.pins[name] = fp
        path = self.path

        def save() -> None:
            # Serialised, and each save writes the latest pins: saves finishing out of order
            # can never leave an older set on disk.
            with self._lock:
                data = json.dumps({"tools": dict(self.pins)}, indent=1, sort_keys=True)
                try:
                    write_private_atomic(path, (data + "\n").encode())
                except OSError as e:
                    log.warning("could not save tool pins to %s: %s", path, e)

        try:
            asyncio.get_running_loop().run_in_executor(None, save)
        except RuntimeError:
            save()


class UpstreamTool(Tool):
    """One upstream tool as a bridge tool; arguments are passed as they are (rules see them)."""

    default_tier = Tier.PROMPT  # upstream annotations are untrusted: never a reason to allow
    cancel_on_disconnect = True

    def __init__(self, server: UpstreamServer, definition: dict[str, Any]) -> None:
        self.server = server
        self.upstream_name: str = definition["name"]
        self.name = f"mcp__{server.spec.name}__{self.upstream_name}"
        self.description = str(definition.get("description") or "")
        self.input_schema = definition.get("inputSchema") or {"type": "object"}
        self.annotations = dict(definition.get("annotations") or {})
        self.extra: dict[str, Any] = {
            k: definition[k] for k in ("title", "outputSchema") if k in definition
        }
        self.fingerprint = fingerprint(definition)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(self.extra)
        return d

    def escalation(self, args: dict[str, Any], policy: PathPolicy | CallPaths) -> Escalation | None:
        """A string argument naming a protected or persistence location always asks: the
        bridge cannot know what the upstream opens (a filesystem server reads what it is told),
        and no rule or tier may cover those locations."""
        return arguments_escalation(args, policy)

    def grants_suspended(self) -> bool:
        pin = self.server.pins.get(self.name)
        if pin is None:
            return self.server.pins.unreadable  # a lost pin is not "never approved"
        return pin != self.fingerprint

    def on_allowed(self, how: str) -> None:
        if how == "session_rule":
            return
        if (
            how == "approve"
            and self.server.pins.get(self.name) is None
            and not self.server.pins.unreadable
        ):
            return  # "approve once" remembers nothing
        self.server.pins.set(self.name, self.fingerprint)
        self.server.changed()

    def approval_info(self) -> UpstreamInfo:
        return UpstreamInfo(
            self.server.spec.name,
            self.upstream_name,
            self.description,
            self.annotations,
            self.grants_suspended(),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        current = self.server.current(self.upstream_name)
        if current is not None and current.fingerprint != self.fingerprint:
            # The server re-listed while the call waited: the human judged another definition.
            return ToolResult.text(
                f"tool '{self.name}' changed on its server while the call waited; call it again",
                True,
            )
        return await self.server.call(self.upstream_name, args)


@dataclass(slots=True)
class RawResult(ToolResult):
    """An upstream result, passed through as the upstream sent it."""

    raw: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return self.raw if self.raw is not None else ToolResult.to_json(self)


class UpstreamServer:
    def __init__(self, spec: McpServerSpec, manager: UpstreamManager) -> None:
        self.spec = spec
        self.manager = manager
        self.pins = manager.pins
        self.state = ServerState.STOPPED
        self.last_error: str | None = None
        self.restarts = 0
        self.tools: list[UpstreamTool] = []
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
            self._stdio = StdioTransport(spec, child_env(spec, self.manager.secret()), self.stderr)
            return self._stdio
        self._stdio = None
        http = httpx2.AsyncClient(
            headers=spec.headers, timeout=httpx2.Timeout(10.0, read=max(300.0, spec.timeout_s + 30))
        )
        self._http = http
        return streamable_http_client(spec.url or "", http_client=http)

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
        return next((t for t in self.tools if t.upstream_name == upstream_name), None)

    # -- calls ------------------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """Forward one call; every failure becomes an ``isError`` result with a clear text.

        Cancelling the awaiting task makes the SDK send ``notifications/cancelled`` upstream.
        """
        name, client = self.spec.name, self.client
        if client is None or self.state is not ServerState.READY:
            # Not last_error: it may quote the server's stderr, which stays on this machine.
            return ToolResult.text(
                f"upstream server '{name}' is not available ({self.state.value}); "
                "the bridge keeps trying to reconnect it",
                True,
            )
        params = types.CallToolRequestParams(name=tool, arguments=args)
        try:
            raw = await client.session.send_request(  # type: ignore[type-var]  # _RAW
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
                return ToolResult.text(
                    f"upstream server '{name}' did not answer '{tool}' within "
                    f"{self.spec.timeout_s:g} s (the call was cancelled upstream)",
                    True,
                )
            return ToolResult.text(
                f"upstream server '{name}' returned an error for '{tool}': "
                f"{e.error.message} (code {e.error.code})",
                True,
            )
        except ValidationError:
            return ToolResult.text(
                f"upstream server '{name}' sent a malformed result for '{tool}'", True
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.HTTPError) as e:
            log.warning("upstream %s: '%s' failed: %s", name, tool, describe_error(e))
            self._wake.set()  # the supervisor checks the connection and reconnects
            return ToolResult.text(
                f"upstream server '{name}' is unreachable; the bridge is reconnecting it", True
            )
        content = raw.get("content")
        if not isinstance(content, list):
            return ToolResult.text(
                f"upstream server '{name}' sent a result without content for '{tool}'", True
            )
        return RawResult(content, raw.get("isError") is True, raw)

    def _lost(self) -> bool:
        stdio = self._stdio
        return stdio is not None and stdio.exited.is_set()


def describe_error(e: BaseException) -> str:
    """A short text for the UIs; task groups' wrappers are peeled to what actually failed."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
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
    ) -> None:
        self.registry = registry
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
