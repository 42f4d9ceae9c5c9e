"""A revoked machine acts no more: none of its calls still waiting for the human can be
approved after ``machines rm``, whatever carried it (a session, a sessionless 2026-07-28 call,
a task whose HTTP request has long ended).

Found in the outside review: revocation ended the machine's *sessions*, but a 2026-07-28 call
has no session in the table (a one-call session), so its approval kept waiting; the human
(or an *Approve all N*) could still approve it and the tool ran for a machine whose token no
longer existed.

The bridge's stop is checked here beside the revoke: both must end every running tool, whatever
request ids its client chose.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

from omp_a2a_bridge.server.core.approvals import Decision

from ..support.helpers import Http, Mcp, Response, in_thread, wait_for

V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "remote-agent", "version": "1"},
}
TASKS_META = {
    **META,
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}


def modern_call(port: int, token: str, args: dict[str, Any], meta: dict[str, Any]) -> Response:
    msg = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "write", "arguments": args, "_meta": meta},
    }
    headers = {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": "write"}
    return Http(port, token=token, timeout=60).request("POST", body=msg, headers=headers)


def add_machine(cli, name: str) -> str:
    r = cli("machines", "add", name, "--json")
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["token"])


def test_a_revoked_machines_waiting_calls_end_whatever_carries_them(
    start_bridge, cli, memory_keyring
):
    running = start_bridge({}, control=True)  # write is prompt-tier
    human = running.runner.attach_approver("pytest")
    root = running.env["root"]
    try:
        laptop = add_machine(cli, "laptop")
        desk = add_machine(cli, "desk")
        # 1. a task: the HTTP request ends at once, the approval waits on
        r = modern_call(running.port, laptop, {"path": "task.txt", "content": "x"}, TASKS_META)
        assert r.status == 200 and r.result["resultType"] == "task", r
        # 2. a plain sessionless call, its request held open
        t, out = in_thread(
            modern_call, running.port, laptop, {"path": "held.txt", "content": "x"}, META
        )
        # 3. a call in an ordinary session
        s = Mcp(running.port, token=laptop, client="remote-agent", timeout=60)
        s.initialize()
        t2, out2 = in_thread(s.call, "write", {"path": "session.txt", "content": "x"})
        # another machine's waiting call is left alone
        t3, _ = in_thread(
            modern_call, running.port, desk, {"path": "desk.txt", "content": "x"}, META
        )
        pending = running.pending(4, timeout=30)
        laptops = [p.id for p in pending if p.machine == "laptop"]
        [desks] = [p.id for p in pending if p.machine == "desk"]
        assert len(laptops) == 3

        rm = cli("machines", "rm", "laptop")
        assert rm.returncode == 0, rm.stderr

        # None of the revoked machine's calls waits any more, so none can be approved.
        wait_for(
            lambda: not {p.id for p in running.runner.snapshot().pending} & set(laptops),
            timeout=30,
        )
        for cid in laptops:
            assert running.runner.decide(cid, Decision.APPROVE) is False
        t.join(30)
        t2.join(30)
        assert out[0].result["isError"] is True, out[0]
        assert out2[0].result["isError"] is True, out2[0]
        for name in ("task.txt", "held.txt", "session.txt"):
            assert not os.path.exists(os.path.join(root, name)), name
        # desk's call still waits, and is still the human's to decide
        assert desks in {p.id for p in running.runner.snapshot().pending}
        assert running.runner.decide(desks, Decision.DENY) is True
        t3.join(30)
    finally:
        running.runner.detach_approver(human)


HOSTILE_NAMES = [
    "\x1b]52;c;ZXZpbA==\x07",  # OSC 52: write the clipboard
    "lap\x1b[2Jtop",
    "lap\u202etop",  # RTL override
    "lap\ntop",
    "lap\rtop",
    "a" * 5000,
    "Laptop",
    "default",
    "-rf",
    "lap top",
    "../laptop",
    "",
]


def test_a_hostile_machine_name_never_becomes_a_machine_or_raw_text(
    start_bridge, cli, memory_keyring
):
    """A machine name reaches every terminal, menu and page; none that could carry an escape,
    a bidi override, a newline or a path is ever accepted, and the refusal shows it escaped."""
    from ..support.control_client import Api

    running = start_bridge({}, control=True)
    api = Api(running.runner.control)
    for name in HOSTILE_NAMES:
        r = api.call("POST", "/api/machines", {"name": name})
        assert r.status == 400, (name, r)
        error = r.json["error"]
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in error), error
        assert "\u202e" not in error and len(error) < 400, error
        if name and "/" not in name and "\n" not in name:
            d = api.call("DELETE", "/api/machines/" + urllib.parse.quote(name, safe=""))
            assert d.status in (400, 404), (name, d)
            assert not any(ord(c) < 0x20 for c in d.json["error"]), d.json
        c = cli("machines", "add", name)
        assert c.returncode != 0, name
        assert "\x1b" not in c.stdout + c.stderr and "\u202e" not in c.stdout + c.stderr
    assert [m.name for m in running.runner.machines()] == ["default"]


def test_rotating_the_token_ends_the_calls_made_with_the_old_one(keyring_token, start_bridge):
    """Rotation is what a human does when the token leaked: a call the old token made, still
    waiting, must not be approvable afterwards (its result would go back to the old token's
    holder on the request it still holds open)."""
    from ..support.control_client import Api

    running = start_bridge({}, control=True)  # write is prompt-tier
    human = running.runner.attach_approver("pytest")
    root = running.env["root"]
    old = running.runner.token
    try:
        s = Mcp(running.port, token=old, client="leaked", timeout=60)
        s.initialize()
        t1, out1 = in_thread(s.call, "write", {"path": "one.txt", "content": "x"})
        t2, out2 = in_thread(
            modern_call, running.port, old, {"path": "two.txt", "content": "x"}, META
        )
        ids = [p.id for p in running.pending(2, timeout=30)]
        r = Api(running.runner.control).call("POST", "/api/token/rotate")
        assert r.status == 200, r
        wait_for(
            lambda: not {p.id for p in running.runner.snapshot().pending} & set(ids), timeout=30
        )
        for cid in ids:
            assert running.runner.decide(cid, Decision.APPROVE) is False
        t1.join(30)
        t2.join(30)
        assert out1[0].result["isError"] is True and out2[0].result["isError"] is True
        assert not os.path.exists(os.path.join(root, "one.txt"))
        assert not os.path.exists(os.path.join(root, "two.txt"))
        # a call with the new token waits as usual
        fresh = Mcp(running.port, token=running.runner.token, client="mine", timeout=60)
        fresh.initialize()
        t3, _ = in_thread(fresh.call, "write", {"path": "three.txt", "content": "x"})
        [p] = running.pending(1, timeout=30)
        assert running.runner.decide(p.id, Decision.DENY) is True
        t3.join(30)
    finally:
        running.runner.detach_approver(human)


def test_a_revoked_machines_running_tools_are_cancelled(start_bridge, cli, memory_keyring):
    """``machines rm`` also stops what the machine has running: its approved ``bash`` is
    killed (audited ``cancelled``), whatever request id its client used; another machine's
    running call is left alone."""
    from ..support.helpers import sleep_n, sleeping_pids

    running = start_bridge({"approval": {"tiers": {"bash": "allow"}}}, control=True)
    laptop, desk = add_machine(cli, "laptop"), add_machine(cli, "desk")
    a, d = Mcp(running.port, token=laptop), Mcp(running.port, token=desk)
    a.initialize()
    d.initialize()
    ta, _ = in_thread(a.call, "bash", {"command": f"sleep {sleep_n('7301')}", "box": True})
    td, _ = in_thread(
        d.call, "bash", {"command": f"sleep {sleep_n('7302')}; echo desk done", "box": True}
    )
    wait_for(lambda: sleeping_pids("7301") and sleeping_pids("7302"), timeout=30)
    assert cli("machines", "rm", "laptop").returncode == 0
    ta.join(30)
    assert not ta.is_alive()
    wait_for(lambda: not sleeping_pids("7301"), timeout=30)
    assert sleeping_pids("7302")  # desk's call still runs
    done = wait_for(
        lambda: [
            r
            for r in running.audit()
            if r["phase"] == "done" and r["machine"] == "laptop" and r["tool"] == "bash"
        ],
        timeout=30,
    )
    assert done[0]["outcome"] == "cancelled", done
    assert td.is_alive()  # the bridge's stop ends it


def test_the_bridges_stop_cancels_every_running_tool_whatever_its_request_id(start_bridge):
    """The stop cancels what still runs after its grace period, as a revoke does: two boxed
    ``bash`` calls of one session sent with the same JSON-RPC id (a client reusing ids; only
    the first is held under it, for a cancel) are both killed, and both audited ``cancelled``
    before the audit closes. The stop used to cancel the calls held by id only: the second
    ran on past it."""
    from omp_a2a_bridge.server.infra.audit import read_records

    from ..support.helpers import sleep_n, sleeping_pids

    running = start_bridge({"approval": {"tiers": {"bash": "allow"}}})
    first = running.client()
    second = running.client(init=False)
    second.sid = first.sid  # the same session: its own connection, for its own held POST
    t1, _ = in_thread(first.call, "bash", {"command": f"sleep {sleep_n('7303')}", "box": True}, 5)
    wait_for(lambda: sleeping_pids("7303"), timeout=30)
    t2, _ = in_thread(second.call, "bash", {"command": f"sleep {sleep_n('7304')}", "box": True}, 5)
    wait_for(lambda: sleeping_pids("7304"), timeout=30)
    running.runner.stop()
    t1.join(30)
    t2.join(30)
    wait_for(lambda: not sleeping_pids("7303", "7304"), timeout=30)
    done = [
        r
        for r in read_records(running.env["audit"])
        if r["phase"] == "done" and r["tool"] == "bash"
    ]
    assert [r["outcome"] for r in done] == ["cancelled", "cancelled"], done
