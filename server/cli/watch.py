"""``a2a-bridge watch``: a terminal approver that follows the bridge's state.

While it runs it is an attached approver (its events socket counts), so prompt-tier calls wait
for it. It shows one pending call at a time — a bounded, safe preview (head and tail of a huge
write, counts, the reason it needs a human, the working directory, a live countdown to the
auto-deny) — and reads ``[a]pprove / allow for [s]ession / [A]lways / [d]eny`` or ``f`` (the
full call, fetched on demand). A call decided elsewhere, timed out or withdrawn leaves the
prompt at once. When the bridge goes away it reconnects (a restarted bridge has a new control
file). Ctrl-C or SIGTERM exits at once; end of input exits too.

Every agent string it prints went through :mod:`server.present.textsafe` (the server renders the
previews; this module renders again before printing, which changes nothing on safe text), so
no escape sequence from an agent reaches the terminal. The terminal's own redraws (the
countdown on a TTY) are the only escape sequences it writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from ..control.client import ControlClient
from ..core.approvals import ApproverKind, Decision
from ..errors import ControlError
from ..present.watchtext import (
    NO_ALWAYS,
    RUN_OUTSIDE_KEY,
    countdown_text,
    describe,
    describe_full,
    remaining,
    safe_line,
)

ANSWERS = {
    "a": Decision.APPROVE,
    "s": Decision.ALLOW_SESSION,
    "A": Decision.ALLOW_ALWAYS,
    "d": Decision.DENY,
    RUN_OUTSIDE_KEY: Decision.RUN_OUTSIDE_BOX,  # offered on a bash call that would run in the box
}
PROMPT = (
    "[a]pprove / allow for [s]ession / [A]lways allow calls like this / [d]eny? ([f] full call) "
)
PROMPT_NO_RULE = "[a]pprove / allow for [s]ession / [d]eny? ([f] full call) "
RECONNECT_S = 1.0


class Gone(Exception):
    """The terminal is gone (a closed pipe): stop quietly."""


class Screen:
    """Writes to the terminal; a closed pipe ends the watch instead of a traceback."""

    def __init__(self, out: TextIO, tty: bool) -> None:
        self.out = out
        self.tty = tty
        self.prompt_shown = False

    def write(self, text: str, end: str = "\n") -> None:
        try:
            if self.prompt_shown and self.tty:
                self.out.write("\r\x1b[K")  # our own redraw, never agent text
            self.out.write(text + end)
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError) as e:
            raise Gone() from e
        self.prompt_shown = False

    def prompt(self, text: str) -> None:
        self.write(text, end="")
        self.prompt_shown = True


def _stdin_reader(fd: int, post: Callable[[str | None], None]) -> None:
    """Thread: read lines with ``os.read`` (no buffered-reader lock to block exit)."""
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            if buf:
                post(buf.decode("utf-8", "replace"))
            post(None)
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            post(line.decode("utf-8", "replace"))


async def watch(
    connect: Callable[[], ControlClient],
    stdin_fd: int,
    out: TextIO,
    *,
    tty: bool | None = None,
    first: ControlClient | None = None,
) -> int:
    """Run until Ctrl-C, SIGTERM or end of input (0), or until the terminal is gone."""
    loop = asyncio.get_running_loop()
    tty = out.isatty() if tty is None else tty
    screen = Screen(out, tty)
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    client: ControlClient | None = first

    def post_line(line: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop already closed: we are exiting
            loop.call_soon_threadsafe(events.put_nowait, ("line", line))

    async def follow() -> None:
        """Keep one events socket open; reconnect when the bridge goes away or restarts."""
        nonlocal client
        announced = False
        while True:
            ws = None
            try:
                if client is None:
                    client = await loop.run_in_executor(None, connect)
                ws = await client.events(ApproverKind.WATCH)
            except Exception:  # not running (yet), refused, or gone mid-handshake: retry
                client = None
                if not announced:
                    await events.put(("gone", None))
                    announced = True
                await asyncio.sleep(RECONNECT_S)
                continue
            if announced:
                await events.put(("back", client.info.url))
                announced = False
            # A broken stream is the bridge going away too.
            with contextlib.suppress(Exception):
                while (msg := await ws.read_message()) is not None:
                    with contextlib.suppress(ValueError):
                        await events.put(("snap", json.loads(msg)))
            ws.close()
            client = None
            await events.put(("gone", None))
            announced = True

    async def tick() -> None:
        while True:
            await asyncio.sleep(1.0)
            await events.put(("tick", None))

    threading.Thread(target=_stdin_reader, args=(stdin_fd, post_line), daemon=True).start()
    tasks = [asyncio.ensure_future(follow()), asyncio.ensure_future(tick())]
    live: dict[str, dict[str, Any]] = {}
    answered: set[str] = set()
    current: dict[str, Any] | None = None
    stage = "decision"
    warned_at_10: set[str] = set()
    # "Always allow calls like this": each proposed rule is kept (Enter), replaced (typed) or
    # dropped ("-") before anything is saved.
    rules_left: list[str] = []
    rules_kept: list[str] = []

    def prompt() -> None:
        assert current is not None
        if stage == "reason":
            screen.prompt("reason (optional, shown to the agent): ")
            return
        if stage == "rule":
            screen.prompt(
                f"   rule to save [{safe_line(rules_left[0])}] (Enter keeps it, '-' drops it, "
                "or type a rule): "
            )
            return
        left = countdown_text(current)
        text = PROMPT if current.get("proposed_rule") else PROMPT_NO_RULE
        screen.prompt((f"({left}) " if left and tty else "") + text)

    def pick() -> None:
        nonlocal current, stage
        if current is not None:
            return
        for pid, p in live.items():
            if pid not in answered:
                current, stage = p, "decision"
                screen.write(describe(p))
                prompt()
                return

    async def send(
        p: dict[str, Any], decision: Decision, reason: str | None = None, rule: str | None = None
    ) -> None:
        c = client
        if c is None:
            screen.write("   → not applied: not connected to the bridge")
            return
        try:
            decided = await loop.run_in_executor(
                None, lambda: c.decide(p["id"], decision, reason, ApproverKind.WATCH, rule)
            )
            if not decided:
                raise ControlError(404, f"call {p['id']} is no longer pending")
            screen.write(f"   → {decision.replace('_', ' ')}")
        except (ControlError, OSError) as e:
            screen.write(f"   → not applied: {safe_line(e)}")

    try:
        screen.write("watching for tool calls that need approval (Ctrl-C or end of input to stop)")
        while True:
            kind, data = await events.get()
            if kind == "snap":
                live = {p["id"]: p for p in data.get("pending", []) if isinstance(p, dict)}
                answered &= set(live)
                if current is not None and current["id"] not in live:
                    screen.write(
                        f"   ✗ {safe_line(current['id'])} is no longer waiting "
                        "(decided elsewhere, timed out or withdrawn)"
                    )
                    current = None
                elif current is not None:
                    current = live[current["id"]]
                pick()
            elif kind == "line":
                if data is None:
                    if current is not None:
                        screen.write("")
                    return 0
                if current is None:
                    continue
                p = current
                if stage == "reason":
                    answered.add(p["id"])
                    current = None
                    await send(p, Decision.DENY, data.strip() or None)
                    pick()
                    continue
                if stage == "rule":
                    typed = data.strip()
                    if typed != "-":
                        rules_kept.append(typed or rules_left[0])
                    rules_left.pop(0)
                    if rules_left:
                        prompt()
                        continue
                    stage = "decision"
                    if not rules_kept:
                        prompt()  # every proposed rule dropped: ask for a decision again
                        continue
                    answered.add(p["id"])
                    current = None
                    await send(p, Decision.ALLOW_ALWAYS, rule="\n".join(rules_kept))
                    pick()
                    continue
                answer = data.strip()
                if answer == "f":
                    try:
                        c = client
                        if c is None:
                            raise ControlError(503, "not connected to the bridge")
                        full = await loop.run_in_executor(None, c.pending_call, p["id"])
                        screen.write(describe_full(full))
                    except (ControlError, OSError) as e:
                        screen.write(f"   (could not fetch the full call: {safe_line(e)})")
                    if current is p:
                        prompt()
                    continue
                decision = ANSWERS.get(answer)
                if decision == "run_outside_box" and not (p.get("box") or {}).get("inside"):
                    decision = None  # not a call that would run in the box
                if decision == "allow_always" and not p.get("proposed_rule"):
                    decision = None  # no rule can cover this call: approve it instead
                    screen.write(f"   {NO_ALWAYS}")
                if decision is None:
                    prompt()
                elif decision == "allow_always":
                    stage = "rule"
                    rules_left = p["proposed_rule"].splitlines()
                    rules_kept = []
                    prompt()
                elif decision == "deny":
                    stage = "reason"
                    prompt()
                else:
                    answered.add(p["id"])
                    current = None
                    await send(p, decision)
                    pick()
            elif kind == "tick" and current is not None and stage == "decision":
                left = remaining(current)
                if tty and left is not None:
                    prompt()  # redraw the line with the new countdown
                elif left is not None and left <= 10 and current["id"] not in warned_at_10:
                    warned_at_10.add(current["id"])
                    screen.write(f"   {safe_line(current['id'])}: {countdown_text(current)}")
                    prompt()
            elif kind == "gone":
                if current is not None:
                    screen.write("")
                current, live = None, {}
                screen.write("the bridge went away; reconnecting… (Ctrl-C to stop)")
            elif kind == "back":
                screen.write(f"connected to the bridge again ({safe_line(data)})")
    except Gone:
        # The reader left (`watch | head`): no traceback now, no flush error at exit.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run_watch(connect: Callable[[], ControlClient]) -> int:
    """Entry point: the first connection must work (a clear error otherwise); later ones retry."""
    first = connect()

    async def main() -> int:
        task = asyncio.current_task()
        if task is not None and hasattr(signal, "SIGTERM"):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await watch(connect, sys.stdin.fileno(), sys.stdout, first=first)
        except asyncio.CancelledError:
            return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.write("\n")
            sys.stdout.flush()
        return 0
