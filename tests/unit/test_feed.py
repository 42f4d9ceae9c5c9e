"""server/control/feed.py: every events socket ends at the bridge's last state, whatever it
joined, whichever form it asked for; one serialisation per publication."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.control.feed import EventFeed
from omp_a2a_bridge.server.present import delta
from omp_a2a_bridge.server.present.views import snapshot_json, snapshot_state
from omp_a2a_bridge.server.types import PendingCall, SessionView, Snapshot


class FakeApi:
    """Only what the feed uses of the API: a subscription (the bridge's own is real in
    tests/integration/test_control_events.py)."""

    def __init__(self) -> None:
        self.subscribers: list[Any] = []

    def subscribe(self, callback: Any) -> Any:
        self.subscribers.append(callback)
        return lambda: self.subscribers.remove(callback)

    def publish(self, snap: Snapshot) -> None:
        for cb in list(self.subscribers):
            cb(snap)


def session(i: int, calls: int) -> SessionView:
    return SessionView(f"sid{i:02d}", f"client{i}", "1", 1000.0 + i, 2000.0 + calls, calls, 0)


def pending(i: int) -> PendingCall:
    return PendingCall(f"c{i}", "sid00", "client0", "ls", {"path": f"/p/{i}"}, f"ls {i}", 5.0 + i)


def snapshot(sessions: list[tuple[int, int]], calls: list[int], paused: bool) -> Snapshot:
    return Snapshot(
        seq=0,
        url="http://127.0.0.1:1/",
        control_url="",
        host="127.0.0.1",
        port=1,
        paused=paused,
        running=True,
        sessions=tuple(session(i, n) for i, n in sessions),
        pending=tuple(pending(i) for i in calls),
        approvers=("page",),
        token_source="env",
        warnings=(),
        calls_total=sum(n for _, n in sessions),
    )


SNAPSHOTS = st.builds(
    snapshot,
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3)), max_size=8, unique_by=lambda x: x[0]),
    st.lists(st.integers(0, 9), max_size=5, unique=True),
    st.booleans(),
)


class Socket:
    def __init__(self, feed: EventFeed, diffs: bool) -> None:
        self.diffs = diffs
        self.texts: list[str] = []
        self.state: dict[str, Any] | None = None
        self.client = feed.add(self.receive, diffs)

    def receive(self, text: str) -> None:
        self.texts.append(text)
        message = json.loads(text)
        self.state = delta.apply_event(self.state, message) if self.diffs else message
        assert self.state is not None, "a diff that does not follow"


def without_clock(state: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in state.items() if k != "version"}
    out["pending"] = [
        {k: v for k, v in p.items() if k not in ("waiting_s", "remaining_s")}
        for p in out["pending"]
    ]
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(SNAPSHOTS, st.sampled_from(["none", "diff", "full", "ask"])), min_size=1))
def test_every_socket_ends_at_the_last_state(steps):
    api, feed = FakeApi(), None
    feed = EventFeed(api)  # type: ignore[arg-type]
    sockets: list[Socket] = []
    for snap, event in steps:
        if event in ("diff", "full"):
            sockets.append(Socket(feed, event == "diff"))
        elif event == "ask" and sockets:
            feed.resend(sockets[-1].client)
        api.publish(snap)
    last = json.loads(json.dumps(snapshot_state(steps[-1][0])))
    for s in sockets:
        assert s.state is not None
        assert without_clock(s.state) == last
        if not s.diffs:  # the full form is what GET /api/status answers (and its clocks)
            clockless = without_clock(json.loads(json.dumps(snapshot_json(steps[-1][0]))))
            assert without_clock(s.state) == clockless


def test_one_text_for_every_socket_and_diffs_after_the_first():
    api = FakeApi()
    feed = EventFeed(api)  # type: ignore[arg-type]
    a, b, full = Socket(feed, True), Socket(feed, True), Socket(feed, False)
    sessions = [(i, 0) for i in range(64)]
    api.publish(snapshot(sessions, list(range(9)), False))
    assert a.texts == b.texts and a.texts[0] is b.texts[0]  # serialised once
    assert '"diff"' not in a.texts[0] and '"waiting_s"' not in a.texts[0]
    assert '"waiting_s"' in full.texts[0]  # the full form keeps the clocks
    sessions[5] = (5, 1)
    api.publish(snapshot(sessions, list(range(9)), False))
    diff = json.loads(a.texts[1])
    assert diff["base"] == 1 and diff["version"] == 2
    assert diff["diff"]["lists"]["sessions"]["upsert"][0]["sid"] == "sid05"
    assert len(a.texts[1]) < len(a.texts[0]) / 20
    assert a.texts[1] is b.texts[1]


def test_nothing_changed_sends_nothing_but_a_newcomer_gets_the_state():
    api = FakeApi()
    feed = EventFeed(api)  # type: ignore[arg-type]
    a = Socket(feed, True)
    snap = snapshot([(1, 1)], [2], False)
    api.publish(snap)
    api.publish(snap)
    assert len(a.texts) == 1
    b = Socket(feed, True)
    api.publish(snap)
    assert len(a.texts) == 1 and len(b.texts) == 1 and b.state == a.state


def test_the_subscription_is_held_only_while_a_socket_is_open():
    api = FakeApi()
    feed = EventFeed(api)  # type: ignore[arg-type]
    a = Socket(feed, True)
    b = Socket(feed, False)
    assert len(api.subscribers) == 1
    feed.remove(a.client)
    feed.remove(b.client)
    assert api.subscribers == []
    c = Socket(feed, True)
    api.publish(snapshot([], [], True))
    assert c.state is not None and c.state["paused"] is True
