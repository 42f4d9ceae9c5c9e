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
PROMPT = "[a]pprove / allow for [s]ession / [A]lways / [d]eny? "


def describe(p: dict[str, Any]) -> str:
    """The full picture of one pending call, as the terminal shows it."""
    lines = [
        f"── {p['id']}: {p['tool']} from {p['client']} (session {p['sid'][:8]}), "
        f"waiting {p['waiting_s']:g} s"
    ]
    if p.get("escalation"):
        lines.append(f"   needs a human because {p['escalation']}")
    lines += _upstream_lines(p.get("upstream"))
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


def _upstream_lines(u: dict[str, Any] | None) -> list[str]:
    """An upstream server's tool: whose it is and what it says it does (its words)."""
    if not u:
        return []
    lines = [f"   upstream server {u['server']}, tool {u['tool']}"]
    if u.get("changed"):
        lines.append("   ! its definition CHANGED since it was approved - read it again")
    lines.append("   description (from the server, untrusted):")
    lines += ["     " + line for line in (u.get("description") or "(none)").splitlines()]
    if u.get("annotations"):
        lines.append(f"   annotations (untrusted): {json.dumps(u['annotations'])}")
    return lines


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
            while decision is None:
                print(PROMPT, end="", file=out)
                out.flush()
                line = await lines.get()
                if line is None:
                    return 0
                decision = ANSWERS.get(line.strip())
            body: dict[str, Any] = {"decision": decision}
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
