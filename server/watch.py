"""``a2a-bridge watch``: a terminal approver.

While it runs it is an attached approver (its events socket counts), so prompt-tier calls wait
for it. Each pending call is printed in full and answered with
``[a]pprove / allow for [s]ession / [A]lways / [d]eny``. It reads answers line by line, so it
works with a terminal or with piped input; end of input ends the watch.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, TextIO

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from .control_client import ControlClient, ControlError

ANSWERS = {"a": "approve", "s": "allow_session", "A": "allow_always", "d": "deny"}
PROMPT = "[a]pprove / allow for [s]ession / [A]lways allow calls like this / [d]eny? "
PROMPT_NO_RULE = "[a]pprove / allow for [s]ession / [d]eny? "


async def edit_rule(proposal: str, lines: asyncio.Queue[str | None], out: TextIO) -> str | None:
    """Let the human keep, replace or drop each proposed rule; None when nothing is left."""
    kept: list[str] = []
    for rule in proposal.splitlines():
        print(
            f"   rule to save [{rule}] (Enter keeps it, '-' drops it, or type a rule): ",
            end="",
            file=out,
        )
        out.flush()
        line = await lines.get()
        if line is None:
            return None
        text = line.strip()
        if text != "-":
            kept.append(text or rule)
    return "\n".join(kept) or None


def describe(p: dict[str, Any]) -> str:
    """The full picture of one pending call, as the terminal shows it."""
    lines = [
        f"── {p['id']}: {p['tool']} from {p['client']} (session {p['sid'][:8]}), "
        f"waiting {p['waiting_s']:g} s"
    ]
    if p.get("escalation"):
        lines.append(f"   needs a human because {p['escalation']}")
    if p.get("proposed_rule"):
        lines.append("   [A]lways would save: " + " + ".join(p["proposed_rule"].splitlines()))
    args = p.get("arguments") or {}
    if p["tool"] == "bash" and isinstance(args.get("command"), str):
        lines.append("   command:")
        lines.extend("     " + line for line in args["command"].splitlines() or [""])
    if p["tool"] == "write" and isinstance(args.get("content"), str):
        lines.append(f"   {args.get('path')}: {len(args['content'])} characters:")
        lines.extend("     " + line for line in args["content"].splitlines() or [""])
    lines.append("   arguments:")
    lines.extend(
        "     " + line for line in json.dumps(args, indent=2, ensure_ascii=False).splitlines()
    )
    return "\n".join(lines)


async def watch(client: ControlClient, stdin: TextIO, out: TextIO) -> int:
    request = HTTPRequest(
        client.info.ws_url + "?as=terminal%20(watch)",
        headers={"Authorization": f"Bearer {client.info.secret}"},
    )
    ws = await websocket_connect(request)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    seen: set[str] = set()
    live: set[str] = set()

    async def read_events() -> None:
        while True:
            msg = await ws.read_message()
            if msg is None:
                await queue.put(None)
                return
            snap = json.loads(msg)
            live.clear()
            for p in snap["pending"]:
                live.add(p["id"])
                if p["id"] not in seen:
                    seen.add(p["id"])
                    await queue.put(p)

    # One reader owns stdin, so end of input is noticed even while nothing is pending.
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    ended = asyncio.Event()

    async def read_lines() -> None:
        while line := await loop.run_in_executor(None, stdin.readline):
            await lines.put(line)
        await lines.put(None)
        ended.set()

    print("watching for tool calls that need approval (Ctrl-C or end of input to stop)", file=out)
    out.flush()
    tasks = [asyncio.ensure_future(read_events()), asyncio.ensure_future(read_lines())]
    try:
        while True:
            next_call = asyncio.ensure_future(queue.get())
            input_ended = asyncio.ensure_future(ended.wait())
            await asyncio.wait({next_call, input_ended}, return_when=asyncio.FIRST_COMPLETED)
            input_ended.cancel()
            if not next_call.done():
                next_call.cancel()
                return 0  # input ended while nothing was waiting
            p = next_call.result()
            if p is None:
                print("the bridge went away", file=out)
                return 1
            if p["id"] not in live:
                continue  # decided elsewhere or ended while an earlier one was on screen
            print(describe(p), file=out)
            decision = None
            body: dict[str, Any] = {}
            proposal = p.get("proposed_rule")
            while decision is None:
                print(PROMPT if proposal else PROMPT_NO_RULE, end="", file=out)
                out.flush()
                line = await lines.get()
                if line is None:
                    return 0
                decision = ANSWERS.get(line.strip())
                if decision == "allow_always":
                    rule = await edit_rule(proposal, lines, out) if proposal else None
                    if rule is None:
                        decision = None
                        continue
                    body["rule"] = rule
            body["decision"] = decision
            if decision == "deny":
                print("reason (optional, shown to the agent): ", end="", file=out)
                out.flush()
                reason = (await lines.get() or "").strip()
                if reason:
                    body["reason"] = reason
            try:
                await loop.run_in_executor(
                    None, client.request, "POST", f"/api/pending/{p['id']}", body
                )
                print(f"   → {decision.replace('_', ' ')}", file=out)
            except ControlError as e:
                print(f"   → not applied: {e}", file=out)
            out.flush()
    finally:
        for task in tasks:
            task.cancel()
        ws.close()


def run_watch(client: ControlClient) -> int:
    try:
        return asyncio.run(watch(client, sys.stdin, sys.stdout))
    except KeyboardInterrupt:
        return 0
