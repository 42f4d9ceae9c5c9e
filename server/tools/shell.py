"""``bash``: run a shell command in its own process group, with a timeout and an output cap.

The whole group is killed on timeout, on ``notifications/cancelled`` and at bridge shutdown,
so a ``sleep`` in a subshell does not outlive the call. Output is stdout and stderr merged in
order; when it is too long the head and tail are kept and the middle is elided.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from typing import Any

from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import io_error

KILL_GRACE_S = 0.5
DRAIN_AFTER_EXIT_S = 0.2


class CappedOutput:
    """Keeps the first and last ``cap/2`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        elided = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if elided > 0:
            return f"{head}\n… [{elided} bytes of output elided] …\n{tail}"
        return head + tail


def shell_argv(command: str) -> list[str]:
    if sys.platform == "win32":
        return [os.environ.get("COMSPEC", "cmd.exe"), "/c", command]
    shell = shutil.which("bash") or shutil.which("sh") or "/bin/sh"
    return [shell, "-c", command]


def kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if sys.platform == "win32":
            subprocess.run(
                ["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True, check=False
            )
        else:
            os.killpg(proc.pid, sig)


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a shell command on the bridge machine (bash -c, or sh -c where bash is missing) "
        "and return its combined stdout and stderr. Non-zero exit codes are reported as errors "
        "with the output. The command runs in its own process group, which is killed on "
        "timeout or cancellation. Long output keeps its beginning and end."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The command line."},
            "cwd": {
                "type": "string",
                "minLength": 1,
                "description": "Working directory (default: the bridge's first root).",
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Seconds before the command is killed (default 120).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    annotations = {
        "title": "Run shell command",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    default_tier = "prompt"
    path_args = ("cwd",)
    default_paths = {"cwd": ""}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        limits = ctx.limits
        timeout = float(args.get("timeout_s", limits.bash_timeout_s))
        if timeout > limits.bash_max_timeout_s:
            raise ToolError(f"timeout_s must be at most {limits.bash_max_timeout_s:g}")
        shown_cwd = args.get("cwd") or ctx.policy.roots[0]
        cwd = ctx.resolve(args.get("cwd"))
        if not os.path.isdir(cwd):
            raise ToolError(f"cwd {shown_cwd}: not a directory")
        extra: dict[str, Any] = {}
        if sys.platform == "win32":
            extra["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
        else:
            extra["start_new_session"] = True
        try:
            proc = await asyncio.create_subprocess_exec(
                *shell_argv(args["command"]),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                **extra,
            )
        except OSError as e:
            raise io_error(e, "cannot start the shell") from None
        output = CappedOutput(limits.output_max_bytes)
        reader = asyncio.ensure_future(self._pump(proc, output))
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            await self._kill(proc)
            reader.cancel()
            text = output.text().rstrip("\n")
            note = f"[timed out after {timeout:g} s; the process group was killed]"
            return ToolResult.text(f"{text}\n{note}" if text else note, True)
        except asyncio.CancelledError:
            await self._kill(proc)
            reader.cancel()
            raise
        # Background children may keep the pipe open; give them a moment, not forever.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), DRAIN_AFTER_EXIT_S)
        reader.cancel()
        text = output.text().rstrip("\n")
        code = proc.returncode
        if code == 0:
            return ToolResult.text(text or "(no output)")
        status = (
            f"exit code {code}"
            if code is not None and code >= 0
            else f"killed by signal {-(code or 0)}"
        )
        return ToolResult.text(f"{text}\n[{status}]" if text else f"[{status}]", True)

    @staticmethod
    async def _pump(proc: asyncio.subprocess.Process, output: CappedOutput) -> None:
        assert proc.stdout is not None
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                return
            output.feed(chunk)

    @staticmethod
    async def _kill(proc: asyncio.subprocess.Process) -> None:
        kill_group(proc, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
        # The shell may be gone while its children linger in the group: always finish them.
        kill_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
