"""The box in every UI, as pure functions: where a bash call runs (server/present/boxview.py),
the terminal's text (watchtext), the tray's menu and tooltip, and the broker's verdict for
"Run outside the box"."""

from __future__ import annotations

import asyncio

import pytest

from omp_a2a_bridge.server.box.plan import BoxStatus, Mechanism
from omp_a2a_bridge.server.core.approvals import ApprovalBroker, Decision, Ending
from omp_a2a_bridge.server.present.boxview import (
    placement,
    placement_json,
    status_json,
    status_text,
)
from omp_a2a_bridge.server.present.watchtext import describe
from omp_a2a_bridge.server.types import BoxPlacement, HumanDecision, PendingCall, Snapshot
from omp_a2a_bridge.tray.menu import menu_model, notification_for, pending_label, title

BWRAP = BoxStatus(True, Mechanism.BWRAP, "0.8.0 (/usr/bin/bwrap)")
NONE = BoxStatus(False, Mechanism.NONE, "bubblewrap (bwrap) is not installed")
NOW = 1_000_000.0


def test_placement_of_a_bash_call():
    assert placement("bash", {"command": "ls"}, BWRAP) == BoxPlacement(True)
    assert placement("read", {"path": "x"}, BWRAP) is None
    asked = placement("bash", {"command": "curl x", "box": False, "reason": " needs net "}, BWRAP)
    assert asked == BoxPlacement(False, "needs net", by_agent=True)
    assert placement("bash", {"command": "ls", "box": "false"}, BWRAP) == BoxPlacement(True)
    nobox = placement("bash", {"command": "ls"}, NONE)
    assert nobox is not None and not nobox.inside and "not installed" in nobox.why
    unknown = placement("bash", {"command": "ls"}, None)
    assert unknown is not None and not unknown.inside  # never "in the box" before it is known


def test_placement_json_is_safe_and_says_outside():
    inside = placement_json(BoxPlacement(True))
    assert inside == {
        "inside": True,
        "text": "runs in the box",
        "reason": "",
        "hidden": False,
        "by_agent": False,
        "can_run_outside": True,
    }
    hostile = placement_json(BoxPlacement(False, "net\u202e\x1b[2J" + "y" * 900, by_agent=True))
    assert hostile is not None
    assert hostile["text"].startswith("outside the box: the agent asks because net")
    assert "\u202e" not in hostile["text"] and "\x1b" not in hostile["text"]
    assert hostile["hidden"] and not hostile["can_run_outside"]
    assert len(hostile["reason"]) < 400
    assert placement_json(BoxPlacement(False, "", by_agent=True))["text"] == (
        "outside the box: the agent asks"
    )
    assert placement_json(None) is None


def test_status_views():
    on = status_json(BWRAP)
    assert on["available"] and on["mechanism"] == "bubblewrap" and "no network" in on["allows"]
    off = status_json(NONE)
    assert not off["available"] and off["allows"] == "" and "bash asks" in off["text"]
    assert status_json(None)["text"] == "box: being checked"
    assert status_text(BWRAP).startswith("box: bubblewrap, 0.8.0 (/usr/bin/bwrap); reads")


def _json(box: BoxPlacement | None) -> dict:
    return {
        "id": "a1",
        "tool": "bash",
        "client": "agent",
        "session": "abc",
        "arrived": NOW,
        "preview": {"command": "ls", "cwd": "/p"},
        "proposed_rule": "bash(ls)",
        "box": placement_json(box),
    }


def test_watch_text_says_where_it_runs():
    text = describe(_json(BoxPlacement(True)), now=NOW)
    assert "runs in the box ([o] runs it outside the box instead)" in text
    out = describe(_json(BoxPlacement(False, "needs \x1b[31mnet", by_agent=True)), now=NOW)
    assert "⚠ runs outside the box: the agent asks because needs" in out
    assert "\x1b" not in out and "[o]" not in out
    assert "box" not in describe(_json(None), now=NOW)


def _pending(box: BoxPlacement | None, tool: str = "bash") -> PendingCall:
    return PendingCall(
        "a1", "s1", "agent", tool, {"command": "ls"}, f"{tool}: ls", NOW - 1, box=box
    )


def _snap(pending: tuple[PendingCall, ...] = (), box: BoxStatus | None = None) -> Snapshot:
    return Snapshot(
        seq=1,
        url="http://127.0.0.1:53917/",
        control_url="http://127.0.0.1:9/",
        host="127.0.0.1",
        port=53917,
        paused=False,
        running=True,
        sessions=(),
        pending=pending,
        approvers=("tray",),
        token_source="keyring",
        warnings=(),
        calls_total=0,
        box=box,
    )


def _decisions(items) -> list[tuple[str, tuple]]:
    sub = next(i for i in items if i.text.startswith("Approve: ")).submenu
    return [(i.text, i.action) for i in sub if i.action and i.action[0] == "decide"]


def test_tray_offers_run_outside_on_a_boxed_call_only():
    boxed = menu_model(_snap((_pending(BoxPlacement(True)),), BWRAP), now=NOW)
    assert ("Run outside the box", ("decide", "a1", "run_outside_box")) in _decisions(boxed)
    sub = next(i for i in boxed if i.text.startswith("Approve: ")).submenu
    assert "Box: runs in the box" in [i.text for i in sub]
    outside = _pending(BoxPlacement(False, "needs network", by_agent=True))
    items = menu_model(_snap((outside,), BWRAP), now=NOW)
    assert "run_outside_box" not in [a[2] for _, a in _decisions(items)]
    sub = next(i for i in items if i.text.startswith("Approve: ")).submenu
    assert "⚠ Runs outside the box: the agent asks because needs network" in [i.text for i in sub]
    assert pending_label(outside, NOW).endswith("· ⚠ outside the box")
    note = notification_for([outside], 1, now=NOW)
    assert note is not None and "⚠ outside the box" in note
    assert "outside" not in (notification_for([_pending(BoxPlacement(True))], 1, now=NOW) or "")
    write = menu_model(_snap((_pending(None, "write"),), BWRAP), now=NOW)
    assert "run_outside_box" not in [a[2] for _, a in _decisions(write)]


def test_tray_tooltip_and_menu_show_the_box():
    assert title(_snap(box=BWRAP)).endswith("· box: bubblewrap")
    assert title(_snap(box=NONE)).endswith("· no box")
    assert "box" not in title(_snap())
    texts = [i.text for i in menu_model(_snap(box=NONE), now=NOW)]
    assert any(t.startswith("box: none (bubblewrap (bwrap) is not installed)") for t in texts)


@pytest.mark.parametrize("status", [BWRAP, NONE])
def test_the_broker_records_run_outside_the_box_on_the_verdict(status):
    async def scenario():
        broker = ApprovalBroker(box_status=lambda: status)
        broker.attach("test")
        task = asyncio.ensure_future(
            broker.wait(sid="s", client="c", tool="bash", arguments={"command": "ls"}, timeout_s=0)
        )
        while not broker.pending():
            await asyncio.sleep(0)
        [p] = broker.pending()
        assert p.box == placement("bash", {"command": "ls"}, status)
        assert broker.decide(HumanDecision(p.id, Decision.RUN_OUTSIDE_BOX)) is True
        return await task

    verdict = asyncio.run(scenario())
    # The pipeline reads exactly this: approved, and the decision says "outside the box".
    assert verdict.ending is Ending.APPROVED and verdict.decision is Decision.RUN_OUTSIDE_BOX
