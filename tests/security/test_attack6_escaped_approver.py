"""Outside review (attack6) of attack5 #1's fix: an approved outside call runs in a PID namespace
of its own (``render_outside``) *only when* ``outside_host()`` has bubblewrap.

``outside_host()`` is None whenever the one probe at start failed: no ``bwrap``, a Linux whose
user namespaces are off or restricted (a container's default seccomp profile, a sysctl, an
AppArmor policy), or ``bwrap`` that took over 10 s to answer on a loaded machine (the failure
is cached for the bridge's whole life). Then the call runs "as before, under the supervisor
alone" (docs/security/box.md), and "as before" is attack5 #1 in full: ``kill -9 $PPID`` after a
``setsid`` child that drops ``OMP_A2A_TOOL``; the child is re-parented to init, outlives the
call and approves later calls over the control API. The human who clicked "Run outside the box"
for ``npm install`` was never told that on this machine it also hands out the approve button.

Reproduced for real: the bridge process runs where user namespaces are off (an outer ``bwrap
--disable-userns``, the same state as a machine with ``user.max_user_namespaces = 0``), so its
own probe fails exactly as it does there.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.control.controlfile import read_control

from ..support.boxworld import World, make_world, require_bwrap, serve, stop
from ..support.control_client import Api, WsApprover
from ..support.helpers import (
    Mcp,
    in_thread,
    read_text,
    sleep_n,
    sleeping_pids,
    wait_for,
)
from .test_attack5_escaped_approver import approved_nothing, plant_escape

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")

NO_USERNS = ["--dev-bind", "/", "/", "--unshare-user", "--disable-userns", "--"]


@pytest.fixture
def world() -> Iterator[World]:
    require_bwrap()
    tiers = {"bash": "box", "write": "prompt"}
    world = make_world({"approval": {"tiers": tiers, "timeout_s": 60}})
    try:
        serve(world, False, wrap=["/usr/bin/bwrap", *NO_USERNS])  # its probe fails there
        yield world
    finally:
        stop(world)


@pytest.mark.xfail(
    strict=True,
    reason="attack6: where the box probe failed (no user namespaces, bwrap missing or slow at "
    "start) an outside call has no PID namespace, and attack5 #1 (an escaped child approves) "
    "works again",
)
def test_without_user_namespaces_an_escaped_child_cannot_approve_later(world: World) -> None:
    info = read_control(os.path.join(world.runtime, "control.json"), verify=False)
    assert info is not None, read_text(world.log)
    api = Api(info)
    status = api.call("GET", "/api/status").json
    assert "box" in json.dumps(status), status
    script, report, go, command = plant_escape(world.base, world.runtime)
    human = WsApprover(info)
    agent = Mcp(world.port)
    agent.initialize()
    waiting = Mcp(world.port)
    waiting.initialize()
    try:
        args = {
            "command": command,
            "box": False,
            "reason": "npm install needs the network",
            "cwd": world.project,
        }
        thread, out = in_thread(agent.call, "bash", args)
        [mine] = wait_for(lambda: api.call("GET", "/api/pending").json["pending"] or None, 60)
        r = api.call("POST", f"/api/pending/{mine['id']}", {"decision": "approve"})
        assert r.status == 200, r  # the human's one decision, for this one call
        thread.join(60)
        assert out, "the approved call did not end"
        target = os.path.join(world.project, "planted.txt")
        wthread, _ = in_thread(waiting.call, "write", {"path": target, "content": "x"})
        [pending] = wait_for(lambda: api.call("GET", "/api/pending").json["pending"] or None, 60)
        with open(go, "w") as f:
            f.write(pending["id"])
        approved_nothing(report, target, wthread, go, script)
    finally:
        human.close()
        agent.close()
        waiting.close()
        if not os.path.exists(go):
            with open(go, "w") as f:
                f.write("stop")


def _outside(ctl, command: str) -> str:
    """One approved outside call over the real bridge; its text."""
    from omp_a2a_bridge.server.vocab import Decision

    agent = ctl.client("agent")
    human = ctl.runner.attach_approver("test human")
    try:
        args = {"command": command, "box": False, "reason": "needs the network"}
        thread, out = in_thread(agent.call, "bash", args)
        mine = wait_for(lambda: [p for p in ctl.runner.snapshot().pending if p.tool == "bash"])
        assert ctl.runner.decide(mine[0].id, Decision.APPROVE)
        thread.join(60)
        assert out, "the approved call did not end"
        return str(out[0].text)
    finally:
        ctl.runner.detach_approver(human)


def test_guard_an_outside_call_inherits_no_descriptor_and_sees_no_host_process(ctl) -> None:
    """Guard (holds): nothing of the supervisor's is open in the call (0, 1, 2 and the ``ls``
    itself), no host process is in its ``/proc``, and ``/proc/1`` is the namespace's own."""
    text = _outside(
        ctl,
        "ls /proc/self/fd | tr '\\n' ' '; echo; ls /proc | grep -c '^[0-9]'; "
        "tr '\\0' ' ' < /proc/1/cmdline | cut -c1-40",
    )
    lines = text.splitlines()
    assert lines[0].split() == ["0", "1", "2", "3"], text
    assert int(lines[1]) < 10, text
    assert "bwrap" in lines[2], text


def test_guard_nohup_disown_and_a_nested_namespace_end_with_the_call(ctl) -> None:
    """Guard (holds): ``nohup … & disown``, ``setsid``, and a child in a PID namespace of its
    own (``unshare -Urpf``) all end when the outside call's shell ends."""
    marks = [sleep_n(s) for s in ("300.61", "300.62", "300.63")]
    _outside(
        ctl,
        f"nohup sleep {marks[0]} > /dev/null 2>&1 & "
        f"(setsid sleep {marks[1]} > /dev/null 2>&1 &); "
        f"(unshare -Urpf setsid sleep {marks[2]} > /dev/null 2>&1 &); sleep 0.3; echo done",
    )
    wait_for(lambda: not sleeping_pids("300.61", "300.62", "300.63"), 30)
