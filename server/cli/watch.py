"""``a2a-bridge watch``: a terminal approver that follows the bridge's state.

While it runs it is an attached approver (its events socket counts), so prompt-tier calls wait
for it. It shows one pending call at a time — a bounded, safe preview (head and tail of a huge
write, counts, the reason it needs a human, the working directory, a live countdown to the
auto-deny) — and reads ``[a]pprove / allow for [s]ession / [A]lways / [d]eny`` or ``f`` (the
full call, fetched on demand). Under the call it says how many others wait ("2 more waiting");
``n``/``p`` show the next or previous one (every key decides the call on screen), and ``aa``/
``dd`` approve or deny all calls of its kind that the screen last listed, by id
(:mod:`server.present.batch`). A call decided elsewhere, timed out or withdrawn leaves the
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
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from ..control.client import ControlClient
from ..errors import ControlError
from ..present.watchtext import (
    NO_SESSION,
    RUN_OUTSIDE_KEY,
    batch_lines,
    countdown_text,
    describe,
    describe_full,
    no_always_text,
    remaining,
    safe_line,
    waiting_line,
)
from ..vocab import ApproverKind, Decision

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
# No session grant can cover the call (escalated, ``rm``...): no [s].
PROMPT_NO_GRANT = "[a]pprove / [A]lways allow calls like this / [d]eny? ([f] full call) "
PROMPT_ONCE = "[a]pprove / [d]eny? ([f] full call) "
# Moving between waiting calls, and deciding all calls of the shown one's kind at once.
MOVES = {"n": 1, "p": -1}
BATCH_ANSWERS = {"aa": Decision.APPROVE, "dd": Decision.DENY}


def prompt_for(p: dict[str, Any]) -> str:
    """The decisions this call offers: [s] only with a scoped grant, [A] only with a rule."""
    if p.get("session_grant"):
        return PROMPT if p.get("proposed_rule") else PROMPT_NO_RULE
    return PROMPT_NO_GRANT if p.get("proposed_rule") else PROMPT_ONCE


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


class Watcher:
    """One terminal approver: the events it follows, the call on screen and what was typed.

    Why a class: the prompt, the events and the answers share this state (the call on screen,
    the stage of its question, the rules being kept); as closures over one long function's
    locals they could only be read top to bottom. Each event kind is one method here.
    """

    def __init__(
        self,
        connect: Callable[[], ControlClient],
        out: TextIO,
        tty: bool,
        first: ControlClient | None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.connect = connect
        self.out = out
        self.tty = tty
        self.screen = Screen(out, tty)
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.client: ControlClient | None = first
        self.live: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}  # call id -> its batch (snapshot JSON)
        self.shown_batch: list[str] = []  # the ids the batch listing on screen named
        self.shown_waiting = ""  # the "N more waiting" line last shown
        self.answered: set[str] = set()
        self.current: dict[str, Any] | None = None
        self.stage = "decision"  # or "reason" (a deny's reason) or "rule" (an "always" rule)
        self.warned_at_10: set[str] = set()
        # "Always allow calls like this": each proposed rule is kept (Enter), replaced (typed)
        # or dropped ("-") before anything is saved.
        self.rules_left: list[str] = []
        self.rules_kept: list[str] = []

    # -- the event sources ------------------------------------------------------------------------

    def post_line(self, line: str | None) -> None:
        """From the stdin thread: one typed line, or None at end of input."""
        with contextlib.suppress(RuntimeError):  # the loop already closed: we are exiting
            self.loop.call_soon_threadsafe(self.events.put_nowait, ("line", line))

    async def follow(self) -> None:
        """Keep one events socket open; reconnect when the bridge goes away or restarts."""
        announced = False
        while True:
            ws = None
            try:
                client = self.client
                if client is None:
                    client = self.client = await self.loop.run_in_executor(None, self.connect)
                ws = await client.stream(ApproverKind.WATCH)  # diffs, applied (issue 26)
            except Exception:  # not running (yet), refused, or gone mid-handshake: retry
                self.client = None
                if not announced:
                    await self.events.put(("gone", None))
                    announced = True
                await asyncio.sleep(RECONNECT_S)
                continue
            if announced:
                await self.events.put(("back", client.info.url))
                announced = False
            # A broken stream is the bridge going away too.
            with contextlib.suppress(Exception):
                while (snap := await ws.next()) is not None:
                    await self.events.put(("snap", snap))
            ws.close()
            self.client = None
            await self.events.put(("gone", None))
            announced = True

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.events.put(("tick", None))

    # -- the loop ---------------------------------------------------------------------------------

    async def run(self, stdin_fd: int) -> int:
        """Run until Ctrl-C, SIGTERM or end of input (0), or until the terminal is gone."""
        threading.Thread(target=_stdin_reader, args=(stdin_fd, self.post_line), daemon=True).start()
        tasks = [asyncio.ensure_future(self.follow()), asyncio.ensure_future(self.tick())]
        screen = self.screen
        try:
            screen.write(
                "watching for tool calls that need approval (Ctrl-C or end of input to stop)"
            )
            while True:
                kind, data = await self.events.get()
                if kind == "snap":
                    self.on_snapshot(data)
                elif kind == "line":
                    if data is None:
                        if self.current is not None:
                            screen.write("")
                        return 0
                    await self.on_line(data)
                elif kind == "tick" and self.current is not None and self.stage == "decision":
                    self.on_tick(self.current)
                elif kind == "gone":
                    if self.current is not None:
                        screen.write("")
                    self.current, self.live = None, {}
                    screen.write("the bridge went away; reconnecting… (Ctrl-C to stop)")
                elif kind == "back":
                    screen.write(f"connected to the bridge again ({safe_line(data)})")
        except Gone:
            # The reader left (`watch | head`): no traceback now, no flush error at exit.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.out.fileno())
            return 0
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- what is on screen ------------------------------------------------------------------------

    def prompt(self) -> None:
        current = self.current
        assert current is not None
        if self.stage == "reason":
            self.screen.prompt("reason (optional, shown to the agent): ")
            return
        if self.stage == "rule":
            self.screen.prompt(
                f"   rule to save [{safe_line(self.rules_left[0])}] (Enter keeps it, '-' drops "
                "it, or type a rule): "
            )
            return
        left = countdown_text(current)
        text = prompt_for(current)
        self.screen.prompt((f"({left}) " if left and self.tty else "") + text)

    def pick(self) -> None:
        """Show the next waiting call not answered yet, unless one is on screen."""
        if self.current is not None:
            return
        for p in self.live.values():
            if p["id"] not in self.answered:
                self.show(p)
                return

    def waiting(self) -> list[str]:
        """The ids still waiting and not answered here, in arrival order."""
        return [pid for pid in self.live if pid not in self.answered]

    def context_lines(self, p: dict[str, Any]) -> list[str]:
        """How many others wait (and the keys to move), and what "all of this kind" covers."""
        ids = self.waiting()
        batch = self.batches.get(p["id"])
        self.shown_batch = list(batch["ids"]) if batch else []
        pos = ids.index(p["id"]) + 1 if p["id"] in ids else 1
        self.shown_waiting = waiting_line(pos, max(len(ids), 1), len(self.shown_batch))
        lines = [self.shown_waiting] if self.shown_waiting else []
        return lines + (batch_lines(batch) if batch else [])

    def show(self, p: dict[str, Any]) -> None:
        self.current, self.stage = p, "decision"
        self.screen.write(describe(p))
        for line in self.context_lines(p):
            self.screen.write(line)
        self.prompt()

    def move(self, step: int) -> None:
        """``n``/``p``: show the next or previous waiting call (wrapping around)."""
        current = self.current
        ids = self.waiting()
        if current is None or len(ids) < 2 or current["id"] not in ids:
            self.screen.write("   (no other call is waiting)")
            self.prompt()
            return
        nxt = ids[(ids.index(current["id"]) + step) % len(ids)]
        self.show(self.live[nxt])

    def on_snapshot(self, data: dict[str, Any]) -> None:
        self.live = {p["id"]: p for p in data.get("pending", []) if isinstance(p, dict)}
        self.batches = {
            cid: b
            for b in data.get("batches", []) or []
            if isinstance(b, dict)
            for cid in b.get("ids", [])
        }
        self.answered &= set(self.live)
        current = self.current
        if current is not None and current["id"] not in self.live:
            self.screen.write(
                f"   ✗ {safe_line(current['id'])} is no longer waiting "
                "(decided elsewhere, timed out or withdrawn)"
            )
            self.current = None
        elif current is not None:
            self.current = self.live[current["id"]]
            self.refresh_context(self.current)
        self.pick()

    def refresh_context(self, p: dict[str, Any]) -> None:
        """Others arrived or left while this call is shown: say so (and list the new batch),
        so "all of this kind" always covers what the screen last listed."""
        if self.stage != "decision":
            return
        before = (self.shown_waiting, self.shown_batch)
        lines = self.context_lines(p)
        if (self.shown_waiting, self.shown_batch) != before:
            for line in lines or ["   (no other call is waiting)"]:
                self.screen.write(line)
            self.prompt()

    def on_tick(self, current: dict[str, Any]) -> None:
        left = remaining(current)
        if self.tty and left is not None:
            self.prompt()  # redraw the line with the new countdown
        elif left is not None and left <= 10 and current["id"] not in self.warned_at_10:
            self.warned_at_10.add(current["id"])
            self.screen.write(f"   {safe_line(current['id'])}: {countdown_text(current)}")
            self.prompt()

    # -- what was typed ---------------------------------------------------------------------------

    async def on_line(self, line: str) -> None:
        p = self.current
        if p is None:
            return
        if self.stage == "reason":
            await self.answer(p, Decision.DENY, line.strip() or None)
        elif self.stage == "rule":
            await self.on_rule_line(p, line)
        elif line.strip() == "f":
            await self.show_full(p)
        elif line.strip() in MOVES:
            self.move(MOVES[line.strip()])
        elif line.strip() in BATCH_ANSWERS:
            await self.answer_batch(p, BATCH_ANSWERS[line.strip()])
        else:
            await self.on_decision(p, ANSWERS.get(line.strip()))

    async def on_decision(self, p: dict[str, Any], decision: Decision | None) -> None:
        if decision is Decision.RUN_OUTSIDE_BOX and not (p.get("box") or {}).get("inside"):
            decision = None  # not a call that would run in the box
        if decision is Decision.ALLOW_ALWAYS and not p.get("proposed_rule"):
            decision = None  # no rule can cover this call: approve it instead
            self.screen.write(f"   {no_always_text(p.get('preview') or {})}")
        if decision is Decision.ALLOW_SESSION and not p.get("session_grant"):
            decision = None  # no grant as narrow as the call: approve it instead
            self.screen.write(f"   {NO_SESSION}")
        if decision is None:
            self.prompt()
        elif decision is Decision.ALLOW_ALWAYS:
            self.stage = "rule"
            self.rules_left = p["proposed_rule"].splitlines()
            self.rules_kept = []
            self.prompt()
        elif decision is Decision.DENY:
            self.stage = "reason"
            self.prompt()
        else:
            await self.answer(p, decision)

    async def on_rule_line(self, p: dict[str, Any], line: str) -> None:
        """One proposed rule kept, replaced or dropped; after the last, save the kept ones."""
        typed = line.strip()
        if typed != "-":
            self.rules_kept.append(typed or self.rules_left[0])
        self.rules_left.pop(0)
        if self.rules_left:
            self.prompt()
            return
        self.stage = "decision"
        if not self.rules_kept:
            self.prompt()  # every proposed rule dropped: ask for a decision again
            return
        await self.answer(p, Decision.ALLOW_ALWAYS, rule="\n".join(self.rules_kept))

    async def show_full(self, p: dict[str, Any]) -> None:
        try:
            c = self.client
            if c is None:
                raise ControlError(503, "not connected to the bridge")
            full = await self.loop.run_in_executor(None, c.pending_call, p["id"])
            self.screen.write(describe_full(full))
        except (ControlError, OSError) as e:
            self.screen.write(f"   (could not fetch the full call: {safe_line(e)})")
        if self.current is p:
            self.prompt()

    async def answer(
        self,
        p: dict[str, Any],
        decision: Decision,
        reason: str | None = None,
        rule: str | None = None,
    ) -> None:
        """Leave the call (it is answered), send the decision, then show the next call."""
        self.answered.add(p["id"])
        self.current = None
        await self.send(p, decision, reason, rule)
        self.pick()

    async def answer_batch(self, p: dict[str, Any], decision: Decision) -> None:
        """``aa``/``dd``: decide exactly the calls the batch listing on screen named."""
        ids = [i for i in self.shown_batch if i not in self.answered]
        if len(ids) < 2:
            self.screen.write(
                "   (no other call of this kind is waiting: [a] or [d] decides this one)"
            )
            self.prompt()
            return
        c = self.client
        self.current = None
        self.answered.update(ids)
        try:
            if c is None:
                raise ControlError(503, "not connected to the bridge")
            out = await self.loop.run_in_executor(
                None, lambda: c.decide_batch(ids, decision, None, ApproverKind.WATCH)
            )
            word = "approved" if decision is Decision.APPROVE else "denied"
            gone = f" ({len(out.gone)} no longer waiting)" if out.gone else ""
            self.screen.write(
                f"   → {word} {len(out.decided)} calls: {', '.join(out.decided)}{gone}"
            )
        except (ControlError, OSError) as e:
            self.answered.difference_update(ids)
            self.screen.write(f"   → not applied: {safe_line(e)}")
        self.pick()

    async def send(
        self,
        p: dict[str, Any],
        decision: Decision,
        reason: str | None = None,
        rule: str | None = None,
    ) -> None:
        c = self.client
        if c is None:
            self.screen.write("   → not applied: not connected to the bridge")
            return
        try:
            decided = await self.loop.run_in_executor(
                None, lambda: c.decide(p["id"], decision, reason, ApproverKind.WATCH, rule)
            )
            if not decided:
                raise ControlError(404, f"call {p['id']} is no longer pending")
            self.screen.write(f"   → {decision.replace('_', ' ')}")
        except (ControlError, OSError) as e:
            self.screen.write(f"   → not applied: {safe_line(e)}")


async def watch(
    connect: Callable[[], ControlClient],
    stdin_fd: int,
    out: TextIO,
    *,
    tty: bool | None = None,
    first: ControlClient | None = None,
) -> int:
    """Run until Ctrl-C, SIGTERM or end of input (0), or until the terminal is gone."""
    tty = out.isatty() if tty is None else tty
    return await Watcher(connect, out, tty, first).run(stdin_fd)


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
