"""The stdio transport for upstream MCP servers: the child process, its environment, its stderr.

Our own (not the SDK's ``stdio_client``) because the bridge must: keep the child's stderr in a
small ring for the UI, give the child a minimal environment that never carries the bridge's
token or ``A2A_BRIDGE_*`` variables, run it in its own process group, and stop it within the
bridge's 2 s shutdown budget (the SDK waits up to 2 s + 2 s before it kills).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from ..box import probe as box_probe
from ..box.edges import program_tree, server_box
from ..box.run import BoxRequest, NoBox, Prepared, sweep
from ..infra import orphans
from ..infra.childenv import EnvSpec, build_env
from .config import McpServerSpec

log = logging.getLogger(__name__)

STDERR_LINE_MAX = 400
LINE_MAX_BYTES = 32 * 1024 * 1024
STOP_GRACE_S = 0.2  # after stdin closes, before SIGTERM; then as long again before SIGKILL
# Ids of the requests :meth:`StdioTransport.request` sends (the SDK's own ids are integers).
CALL_ID = "omp-"
_CALL_ID_BYTES = b'"' + CALL_ID.encode()


def child_env(spec: McpServerSpec, secret: str | None) -> dict[str, str]:
    """The same safe allow-list ``bash`` starts from (:mod:`server.infra.childenv`, like the SDK's
    ``get_default_environment()``) plus the server's configured ``env``, which is explicit and
    passes as written; never the bridge's own variables.

    Refused: any ``A2A_BRIDGE_*`` name, and any value that contains the bridge's token (a
    token pasted into a server's ``env`` by mistake).
    """
    env = build_env(EnvSpec()).env
    env.update(spec.env)
    for k in list(env):
        if k.upper().startswith("A2A_BRIDGE_") or (secret and secret in env[k]):
            log.warning("upstream %s: variable %s withheld from its environment", spec.name, k)
            del env[k]
    return env


BOX_HINT = 'if it needs more than the box allows, set "box": false for it in mcp_servers'


class BoxRefused(OSError):
    """No box could be made for a server configured to run in one (it is not started)."""


class LineTooLong(ValueError):
    """A line went over the cap before its newline came."""


class LineSplitter:
    """Splits a byte stream into lines in linear time, at most ``limit`` bytes per line.

    Each chunk is searched once and a partial line is kept as a list of pieces, so a 32 MiB
    message costs one join — appending to one ``bytes`` and re-splitting it per 64 KiB chunk
    cost ~6 s of event-loop time for 30 MiB.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pieces: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if self._size + end - start > self.limit:
                raise LineTooLong
            self._pieces.append(chunk[start:end])
            lines.append(b"".join(self._pieces))
            self._pieces, self._size = [], 0
            start = end + 1
        if start < len(chunk):
            self._pieces.append(chunk[start:])
            self._size += len(chunk) - start
            if self._size > self.limit:
                raise LineTooLong
        return lines


def _line(message: dict[str, Any]) -> bytes:
    """One JSON-RPC message as a stdio line (ASCII escapes: a lone surrogate stays valid)."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class Waiters:
    """Requests written past the SDK session (:meth:`StdioTransport.request`), waiting for
    their answers by id; the stdout reader offers each line here before the SDK sees it."""

    def __init__(self) -> None:
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._last = 0

    def new(self) -> tuple[str, asyncio.Future[dict[str, Any]]]:
        self._last += 1
        rid = f"{CALL_ID}{self._last}"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        return rid, fut

    def answer(self, line: bytes) -> bool:
        """Hand a response to its waiter; False for anything else (the SDK's to read)."""
        if not self.pending or _CALL_ID_BYTES not in line:
            return False
        try:
            msg = json.loads(line)
        except ValueError:
            return False
        rid = msg.get("id") if isinstance(msg, dict) else None
        if not isinstance(rid, str) or "method" in msg:
            return False
        fut = self.pending.pop(rid, None)
        if fut is None:
            return False  # a late answer to a call that timed out: the SDK drops it as before
        if not fut.done():
            fut.set_result(msg)
        return True

    def fail_all(self, error: Exception) -> None:
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(error)
        self.pending.clear()


class StdioTransport(contextlib.AbstractAsyncContextManager[Any]):
    """Runs a stdio MCP server in its own process group; yields the SDK's stream pair."""

    def __init__(
        self,
        spec: McpServerSpec,
        env: dict[str, str],
        ring: collections.deque,
        cwd: str | None = None,
        box: BoxRequest | None = None,
    ) -> None:
        self.spec = spec
        self.cwd = cwd if cwd is not None else spec.cwd  # see upstream_config.working_dir
        # The box to run it in (its config's ``"box": true`` and a bridge that boxes); None:
        # as before the box.
        self.box = box if spec.box else None
        self.boxed: Prepared | None = None
        self.env = env
        self.ring = ring
        self.exited = asyncio.Event()
        self.pid: int | None = None
        self.returncode: int | None = None
        self._cm: contextlib.AbstractAsyncContextManager[Any] | None = None
        self._stdin: Any = None  # the child's stdin while it runs
        # The asyncio stream under anyio's wrapper of that stdin (see :meth:`send_line`); None:
        # anyio's own ``send``.
        self.writer: asyncio.StreamWriter | None = None
        self.waiters = Waiters()  # request()'s calls, waiting for their answers
        self._notes: set[asyncio.Task[None]] = set()  # cancellations being written

    async def __aenter__(self) -> Any:
        self._cm = self._run()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._cm is not None
        return await self._cm.__aexit__(*exc)

    async def _open(self, argv: list[str], env: dict[str, str]) -> Any:
        """Start the server in a session of its own, recorded as ours to reap (its exit code
        is shown), not the orphan reaper's (``server/infra/orphans.py``)."""
        with orphans.starting() as own:
            proc = await anyio.open_process(argv, env=env, cwd=self.cwd, start_new_session=True)
            own(proc.pid)
        return proc

    @contextlib.asynccontextmanager
    async def _run(self) -> AsyncIterator[Any]:
        if self.cwd is not None and not os.path.isdir(self.cwd):
            raise NotADirectoryError(f"working directory {self.cwd} does not exist")
        argv, env = await self._argv()
        proc = await self._open(argv, env)
        self.pid = proc.pid
        self._stdin = proc.stdin
        raw = getattr(proc.stdin, "_stream", None)
        self.writer = raw if isinstance(raw, asyncio.StreamWriter) else None
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

        async def stdout() -> None:
            assert proc.stdout is not None
            splitter = LineSplitter(LINE_MAX_BYTES)
            try:
                async with read_send:
                    async for chunk in proc.stdout:
                        try:
                            lines = splitter.feed(chunk)
                        except LineTooLong:
                            self.ring.append("(bridge) a message over 32 MiB: disconnected")
                            return
                        for line in lines:
                            if not line.strip() or self.waiters.answer(line):
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
                self._stdin = None
                self.writer = None
                self.waiters.fail_all(ConnectionError("the server's output ended"))

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
                    if self.boxed is not None and (self.boxed.missing or self.boxed.watch):
                        boxed = self.boxed
                        await anyio.to_thread.run_sync(sweep, boxed.missing, boxed.watch)
                    for s in (read_recv, write_send, read_send, write_recv):
                        await s.aclose()
                tg.cancel_scope.cancel()

    # -- requests past the SDK session -----------------------------------------------------

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request written straight to the server's stdin, its response (the whole JSON-RPC
        message, as a dict) taken straight from its stdout.

        Why: ``tools/call`` through the SDK session built and validated pydantic models both
        ways, opened memory streams, a tracing span and a cancel scope per call: most of what a
        forwarded call cost the bridge. The session stays for everything else (initialize, the
        listing, the server's own requests and notifications), which it still receives.

        Raises :class:`TimeoutError` after ``timeout`` and :class:`ConnectionError` when the
        server is gone; on a timeout or a cancelled caller the server is sent
        ``notifications/cancelled``, as the SDK did.
        """
        stdin = self._stdin
        if stdin is None or self.exited.is_set():
            raise ConnectionError("the server is not running")
        rid, fut = self.waiters.new()
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}

        async def exchange() -> dict[str, Any]:
            # The write is inside the deadline too: a server that stops reading its stdin
            # fills the pipe. A write cut short leaves no half line: the whole line is in the
            # transport's buffer before the wait for it to drain.
            await self.send_line(stdin, _line(message))
            return await fut

        try:
            return await asyncio.wait_for(exchange(), timeout)
        except (TimeoutError, asyncio.CancelledError):
            self._cancel(rid)
            raise
        except ConnectionError:
            raise  # the server's output ended (Waiters.fail_all)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as e:
            raise ConnectionError(f"the server's input closed ({e})") from None
        finally:
            self.waiters.pending.pop(rid, None)

    async def send_line(self, stdin: Any, data: bytes) -> None:
        """Write whole lines to the server's stdin: straight to the asyncio stream under
        anyio's wrapper, and wait only while the pipe is full.

        Why: anyio's ``send`` ends with a shielded cancel scope and one more loop turn after
        every write (its "checkpoint"), 13% of the bridge's GIL time per forwarded stdio call
        in the profile; the write and the wait for a full pipe to drain are the same. Without
        that stream (another anyio, another backend) anyio's ``send`` as before.
        """
        w = self.writer
        if w is None:
            await stdin.send(data)
            return
        if w.is_closing():
            raise ConnectionError("the server's input closed")
        w.write(data)  # the whole line is in the buffer before any wait: no half line
        await w.drain()

    def _cancel(self, rid: str) -> None:
        """Tell the server a request is cancelled, in a task of its own (the caller may be a
        cancelled task, which must not await)."""
        stdin = self._stdin
        if stdin is None:
            return
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": rid, "reason": "cancelled by the bridge"},
        }

        async def send() -> None:
            with contextlib.suppress(Exception):
                await self.send_line(stdin, _line(note))

        task = asyncio.get_running_loop().create_task(send())
        self._notes.add(task)
        task.add_done_callback(self._notes.discard)

    async def _argv(self) -> tuple[list[str], dict[str, str]]:
        """The command line and environment: in its box (planned in a worker thread: the plan
        looks at the disk) unless the config says ``"box": false``."""
        argv = [self.spec.command or "", *self.spec.args]
        if self.box is None or not box_probe.status().available:
            return argv, self.env  # no box on this machine (macOS, Windows): as before
        if program_tree(argv[0]) is None:  # said as outside the box, not as bwrap's execvp
            raise FileNotFoundError(errno.ENOENT, "command not found", argv[0])
        cwd = self.cwd or os.path.expanduser("~")  # the home is never a project: TMPDIR only
        try:
            self.boxed = await anyio.to_thread.run_sync(
                server_box, self.box, cwd, argv, self.spec.network
            )
        except NoBox as e:
            raise BoxRefused(f"cannot start it in the box: {e}") from None
        env = dict(self.env, TMPDIR=self.boxed.plan.tmpdir)
        return list(self.boxed.argv), env

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
        # Close our ends of the pipes too: a stdout we stopped reading (a message over the cap)
        # would otherwise keep the subprocess transport open past the loop's end.
        with contextlib.suppress(Exception), anyio.move_on_after(STOP_GRACE_S):
            await proc.aclose()
