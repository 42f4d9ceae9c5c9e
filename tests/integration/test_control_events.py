"""The events socket under bursts (issue 26): publications coalesce, diffs add up to the
bridge's state, a waiting call is never held back, a late socket starts from a full state."""

from __future__ import annotations

import json

import pytest

from omp_a2a_bridge.server.core import bridge as bridge_module
from omp_a2a_bridge.server.present.views import snapshot_state

from ..support.control_client import WsApprover, with_control
from ..support.helpers import in_thread, wait_for


@pytest.fixture
def ctl(start_bridge):
    return with_control(start_bridge, timeout_s=30)


def bridge_state(ctl) -> dict:
    """The bridge's state now, as the events socket's diff form carries it."""
    return json.loads(json.dumps(snapshot_state(ctl.runner.snapshot())))


def client_state(ws: WsApprover) -> dict | None:
    if not ws.snapshots:
        return None
    state = dict(ws.snapshots[-1])
    state.pop("version")
    if not ws.diffs:
        state["pending"] = [
            {k: v for k, v in p.items() if k not in ("waiting_s", "remaining_s")}
            for p in state["pending"]
        ]
    return state


def burst(ctl, sessions: int = 12, pings: int = 5) -> list:
    """Many changes in a short time: sessions come, make calls, one goes."""
    clients = [ctl.client(f"agent{i}") for i in range(sessions)]
    for _ in range(pings):
        for c in clients:
            assert c.rpc("ping").status == 200
    assert clients[3].request("DELETE", headers={"mcp-session-id": clients[3].sid}).status == 204
    return clients


def test_a_burst_ends_with_every_socket_at_the_bridges_last_state(ctl):
    diffs, full = WsApprover(ctl.info, diffs=True), WsApprover(ctl.info)
    try:
        wait_for(lambda: diffs.snapshots and full.snapshots)
        burst(ctl)
        # The last state is always delivered: wait for it, whatever the coalescing did.
        wait_for(lambda: client_state(diffs) == bridge_state(ctl) == client_state(full), 60)
        assert len(bridge_state(ctl)["sessions"]) == 11
        # Only the first message of the diff socket was a whole snapshot; the rest were diffs.
        assert "diff" not in diffs.messages[0]
        assert diffs.messages[1:] and all("diff" in m for m in diffs.messages[1:])
        versions = [m["version"] for m in diffs.messages]
        assert versions == list(range(versions[0], versions[0] + len(versions)))
        # Coalesced: 12 sessions, 60 pings and a DELETE are far fewer publications.
        assert len(diffs.messages) < 60
    finally:
        diffs.close()
        full.close()


def test_a_call_that_waits_during_a_coalescing_window_is_delivered(ctl, monkeypatch):
    """With the window stretched to a minute, traffic's snapshot waits for it; a call that
    needs a human does not, and carries the traffic's changes with it."""
    monkeypatch.setattr(bridge_module, "PUBLISH_INTERVAL_S", 60.0)
    ws = WsApprover(ctl.info, diffs=True)
    try:
        wait_for(lambda: ws.snapshots)  # attaching published: a window starts
        agent = ctl.client("agent")  # a new session and a call: they wait for the window
        assert agent.rpc("ping").status == 200
        seen = len(ws.messages)
        t, out = in_thread(agent.call, "bash", {"command": "echo held"})
        state = wait_for(lambda: ws.snapshots[-1]["pending"] and ws.snapshots[-1], 60)
        [p] = state["pending"]
        assert p["tool"] == "bash" and p["client"] == "agent"
        [session] = state["sessions"]
        assert session["pending"] == 1 and session["calls"] == 1
        assert len(ws.messages) == seen + 1  # one message: the window's changes came with it
        approve = {"decision": "approve"}
        assert ctl.api.call("POST", f"/api/pending/{p['id']}", approve).status == 200
        t.join(60)
        assert out[0].result["isError"] is False
    finally:
        ws.close()


def test_a_socket_that_connects_mid_stream_gets_a_full_snapshot(ctl):
    first = WsApprover(ctl.info, diffs=True)
    try:
        wait_for(lambda: first.snapshots)
        burst(ctl, sessions=4, pings=2)
        wait_for(lambda: len(first.messages) > 1)
        late = WsApprover(ctl.info, diffs=True)
        try:
            wait_for(lambda: late.messages)
            assert "diff" not in late.messages[0]  # whole, with its version
            assert isinstance(late.messages[0]["version"], int)
            wait_for(lambda: client_state(late) == bridge_state(ctl) == client_state(first), 60)
            assert late.snapshots[-1]["approvers"] == ["pytest page", "pytest page"]
            # Asked for, the whole state comes again (a client that lost track).
            seen = len(late.messages)
            late.send("full")
            wait_for(lambda: len(late.messages) > seen)
            again = late.messages[seen]
            assert "diff" not in again and again["version"] == late.snapshots[-2]["version"]
        finally:
            late.close()
    finally:
        first.close()
