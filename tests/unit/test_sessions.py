"""server/mcp/sessions.py: which session a full table gives up."""

from __future__ import annotations

from omp_a2a_bridge.server.mcp.sessions import SessionTable

from ..support.helpers import Clock


def test_a_full_table_evicts_from_the_machine_holding_the_most():
    clock = Clock()
    t = SessionTable(max_sessions=4, clock=clock)
    desk, _ = t.create(None, machine="desk")
    mine = [t.create(None)[0] for _ in range(3)]  # default: 3 of 4
    for _ in range(10):  # laptop opens sessions in a loop
        clock.now += 1
        _, evicted = t.create(None, machine="laptop")
        assert evicted is not None and evicted.machine != "desk"
    # default held the most (3): its least recently seen went; then laptop, tied or ahead,
    # gave up its own each time. desk's one session was never touched.
    assert sorted(s.machine for s in t.all()) == ["default", "default", "desk", "laptop"]
    assert t.touch(desk.sid) is desk
    assert t.touch(mine[0].sid) is None and all(t.touch(m.sid) is m for m in mine[1:])


def test_a_lone_machine_evicts_its_least_recently_seen():
    clock = Clock()
    t = SessionTable(max_sessions=2, clock=clock)
    a, _ = t.create(None)
    b, _ = t.create(None)
    clock.now += 1
    t.touch(a.sid)
    c, evicted = t.create(None)
    assert evicted is b and t.touch(a.sid) is a and t.touch(c.sid) is c
