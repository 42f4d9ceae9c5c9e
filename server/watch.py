"""``a2a-bridge watch``: a terminal approver that follows the bridge's state.

While it runs it is an attached approver (its events socket counts), so prompt-tier calls wait
for it. It shows one pending call at a time — a bounded, safe preview (head and tail of a huge
write, counts, the reason it needs a human, the working directory, a live countdown to the
auto-deny) — and reads ``[a]pprove / allow for [s]ession / [A]lways / [d]eny`` or ``f`` (the
full call, fetched on demand). A call decided elsewhere, timed out or withdrawn leaves the
prompt at once. When the bridge goes away it reconnects (a restarted bridge has a new control
file). Ctrl-C or SIGTERM exits at once; end of input exits too.

Every agent string it prints went through :mod:`server.textsafe` (the server renders the
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
import time
from collections.abc import Callable
from typing import Any, TextIO

from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from .control_client import ControlClient, ControlError
from .textsafe import HIDDEN_WARNING, render, safe

ANSWERS = {"a": "approve", "s": "allow_session", "A": "allow_always", "d": "deny"}
PROMPT = (
    "[a]pprove / allow for [s]ession / [A]lways allow calls like this / [d]eny? ([f] full call) "
)
PROMPT_NO_RULE = "[a]pprove / allow for [s]ession / [d]eny? ([f] full call) "
RECONNECT_S = 1.0


def _t(value: Any) -> str:
    """One line of agent text for the terminal (idempotent on already-safe text)."""
    return safe("" if value is None else value)


def _block(value: Any, indent: str = "     ") -> list[str]:
    text = render("" if value is None else str(value), multiline=True).text
    return [indent + line for line in text.split("\n")]


def remaining(p: dict[str, Any], now: float | None = None) -> float | None:
    deadline = p.get("deadline")
    if not isinstance(deadline, int | float):
        return None
    return max(deadline - (time.time() if now is None else now), 0.0)


def countdown_text(p: dict[str, Any], now: float | None = None) -> str:
    left = remaining(p, now)
    return "" if left is None else f"auto-deny in {left:.0f} s"


def describe(p: dict[str, Any], now: float | None = None) -> str:
    """One pending call as the terminal shows it, from the bounded summary (never raw args)."""
    now = time.time() if now is None else now
    waited = max(now - float(p.get("arrived") or now), 0.0)
    head = (
        f"── {_t(p.get('id'))}: {_t(p.get('tool'))} from {_t(p.get('client'))} "
        f"(session {_t(p.get('session') or str(p.get('sid', ''))[:8])}), waiting {waited:.0f} s"
    )
    left = countdown_text(p, now)
    lines = [head + (f", {left}" if left else "")]
    if p.get("hidden"):
        lines.append(f"   ⚠ {HIDDEN_WARNING} (shown escaped, e.g. \\u202e)")
    esc = p.get("escalation")
    if isinstance(esc, dict):
        if esc.get("category"):
            lines.append(f"   needs a human: {_t(esc['category'])} — {_t(esc.get('path'))}")
            lines.append(f"   because {_t(esc.get('text'))}")
        else:
            lines.append(f"   needs a human because {_t(esc.get('text'))}")
    elif esc:
        lines.append(f"   needs a human because {_t(esc)}")
    lines += _upstream_lines(p.get("upstream"))
    if p.get("proposed_rule"):
        lines.append("   [A]lways would save: " + _t(" + ".join(p["proposed_rule"].splitlines())))
    pv = p.get("preview") or {}
    tool = p.get("tool")
    if "command" in pv:
        lines.append(f"   in: {_t(pv.get('cwd') or '(first root)')}")
        lines.append("   command:")
        lines.extend(_block(pv["command"]))
    if "path" in pv:
        lines.append(f"   path: {_t(pv['path'])}")
    size = pv.get("size")
    if "content" in pv and isinstance(size, dict):
        lines.append(
            f"   {tool} {size.get('chars')} characters, {size.get('lines')} lines "
            f"({size.get('bytes')} bytes):"
        )
        lines.extend(_block(pv["content"]))
    if "old" in pv and isinstance(size, dict):
        every = " (every occurrence)" if pv.get("replace_all") else ""
        lines.append(f"   replace{every} ({size['old']['chars']} characters):")
        lines.extend(_block(pv["old"]))
        lines.append(f"   with ({size['new']['chars']} characters):")
        lines.extend(_block(pv["new"]))
    for key in ("pattern", "glob"):
        if key in pv:
            lines.append(f"   {key}: {_t(pv[key])}")
    if not pv or set(pv) <= {"hidden"}:
        lines.append(f"   {_t(p.get('summary'))}")
    return "\n".join(lines)


def _upstream_lines(u: dict[str, Any] | None) -> list[str]:
    """An upstream server's tool: whose it is and what it says it does (its words, untrusted
    and rendered safe like any agent text)."""
    if not u:
        return []
    lines = [f"   upstream server {_t(u.get('server'))}, tool {_t(u.get('tool'))}"]
    if u.get("changed"):
        lines.append("   ! its definition CHANGED since it was approved - read it again")
    lines.append("   description (from the server, untrusted):")
    lines += _block(u.get("description") or "(none)")
    if u.get("annotations"):
        lines.append(f"   annotations (untrusted): {_t(json.dumps(u['annotations']))}")
    return lines


def describe_full(call: dict[str, Any]) -> str:
    """Every argument of one call, each rendered safe in full (``GET /api/pending/<id>``)."""
    lines = [f"── {_t(call.get('id'))}: {_t(call.get('tool'))}, in full:"]
    for f in call.get("display") or []:
        note = " ⚠ hidden characters" if f.get("hidden") else ""
        lines.append(f"   {_t(f.get('name'))} ({f.get('chars')} characters){note}:")
        lines.extend(_block(f.get("text")))
    return "\n".join(lines)


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


async def _connect(client: ControlClient) -> WebSocketClientConnection:
    request = HTTPRequest(
        client.info.ws_url + "?as=terminal%20(watch)",
        headers={"Authorization": f"Bearer {client.info.secret}"},
        connect_timeout=5,
        request_timeout=5,
    )
    return await websocket_connect(request)


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
                ws = await _connect(client)
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
                f"   rule to save [{_t(rules_left[0])}] (Enter keeps it, '-' drops it, "
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

    async def send(p: dict[str, Any], body: dict[str, Any]) -> None:
        body["by"] = "terminal (watch)"
        c = client
        if c is None:
            screen.write("   → not applied: not connected to the bridge")
            return
        try:
            await loop.run_in_executor(None, c.request, "POST", f"/api/pending/{p['id']}", body)
            screen.write(f"   → {body['decision'].replace('_', ' ')}")
        except (ControlError, OSError) as e:
            screen.write(f"   → not applied: {_t(e)}")

    try:
        screen.write("watching for tool calls that need approval (Ctrl-C or end of input to stop)")
        while True:
            kind, data = await events.get()
            if kind == "snap":
                live = {p["id"]: p for p in data.get("pending", []) if isinstance(p, dict)}
                answered &= set(live)
                if current is not None and current["id"] not in live:
                    screen.write(
                        f"   ✗ {_t(current['id'])} is no longer waiting "
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
                    body: dict[str, Any] = {"decision": "deny"}
                    if data.strip():
                        body["reason"] = data.strip()
                    answered.add(p["id"])
                    current = None
                    await send(p, body)
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
                    await send(p, {"decision": "allow_always", "rule": "\n".join(rules_kept)})
                    pick()
                    continue
                answer = data.strip()
                if answer == "f":
                    try:
                        c = client
                        if c is None:
                            raise ControlError(503, "not connected to the bridge")
                        full = await loop.run_in_executor(
                            None, c.request, "GET", f"/api/pending/{p['id']}"
                        )
                        screen.write(describe_full(full))
                    except (ControlError, OSError) as e:
                        screen.write(f"   (could not fetch the full call: {_t(e)})")
                    if current is p:
                        prompt()
                    continue
                decision = ANSWERS.get(answer)
                if decision == "allow_always" and not p.get("proposed_rule"):
                    decision = None  # no rule can cover this call: approve it instead
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
                    await send(p, {"decision": decision})
                    pick()
            elif kind == "tick" and current is not None and stage == "decision":
                left = remaining(current)
                if tty and left is not None:
                    prompt()  # redraw the line with the new countdown
                elif left is not None and left <= 10 and current["id"] not in warned_at_10:
                    warned_at_10.add(current["id"])
                    screen.write(f"   {_t(current['id'])}: {countdown_text(current)}")
                    prompt()
            elif kind == "gone":
                if current is not None:
                    screen.write("")
                current, live = None, {}
                screen.write("the bridge went away; reconnecting… (Ctrl-C to stop)")
            elif kind == "back":
                screen.write(f"connected to the bridge again ({_t(data)})")
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
