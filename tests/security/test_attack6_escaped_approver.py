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

Fixed (the class, not the one spelling): every process between a shell and the bridge is a child
subreaper — the supervisor, the supervisors' helper, the bridge — so whatever a tool's process
kills, its orphans are re-parented inside the bridge's tree, never to init. The helper ends what
it adopts (the call is over); the bridge keeps what it adopts, and the control API counts a
child of the bridge in a session other than the bridge's own as a tool's
(``server/control/peer.py``, ``server/infra/orphans.py``). The tests below kill the supervisor,
then the helper too, and count the zombies left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.control.controlfile import read_control

from ..support.boxworld import World, make_world, require_bwrap, serve, stop
from ..support.control_client import Api, WsApprover
from ..support.helpers import (
    Mcp,
    in_thread,
    pids_where,
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


def _bridge_pid(world: World) -> int:
    """The bridge's pid: the outer ``bwrap`` (whose argv holds the bridge's too) runs it as a
    child."""
    assert world.proc is not None
    todo = [world.proc.pid]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read()
        except OSError:
            continue
        if b"omp_a2a_bridge.server" in argv and not argv.split(b"\0")[0].endswith(b"bwrap"):
            return pid
        todo += _children(pid)
    raise AssertionError("the bridge process was not found")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _stat(int(entry))[1] == pid:
            out.append(int(entry))
    return out


def _stat(pid: int) -> tuple[str, int]:
    """(state, parent) of ``pid``; ("", 0) when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return "", 0
    return fields[0].decode(), int(fields[1])


def _helper_pids(bridge: int) -> list[int]:
    """The supervisors' helpers (``reaper.py``) this bridge runs."""
    mine = pids_where(lambda argv: any(a.endswith(b"reaper.py") for a in argv))
    return [pid for pid in mine if _stat(pid)[1] == bridge]


def _zombies(*parents: int) -> list[int]:
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and _stat(int(e))[0] == "Z" and _stat(int(e))[1] in parents
    ]


def _approved_outside(api: Api, agent: Mcp, world: World, command: str) -> str:
    """One bash call outside the box, approved by the human over the control API; its text."""
    args = {"command": command, "box": False, "reason": "needs the network", "cwd": world.project}
    thread, out = in_thread(agent.call, "bash", args)
    [mine] = wait_for(lambda: api.call("GET", "/api/pending").json["pending"] or None, 60)
    r = api.call("POST", f"/api/pending/{mine['id']}", {"decision": "approve"})
    assert r.status == 200, r
    thread.join(60)
    assert out, "the approved call did not end"
    return str(out[0].text)


# Kill the helper (the supervisor's parent) first, then the supervisor: the orphans then go to
# the bridge, the last subreaper on their way up.
KILL_BOTH = "kill -9 $(awk '{print $4}' /proc/$PPID/stat); sleep 0.2; kill -9 $PPID"


def test_an_escape_that_kills_the_helper_too_cannot_approve(world: World) -> None:
    """The escape kills the supervisors' helper (found in ``/proc``: its supervisor's parent),
    then its supervisor. Its ``setsid`` child is adopted by the bridge itself, outlives the
    call, reads the control secret and tries every control endpoint: 403 each time (a child of
    the bridge in a session of its own), and the write it wanted approved never runs. When it
    exits, the bridge reaps it."""
    info = read_control(os.path.join(world.runtime, "control.json"), verify=False)
    assert info is not None, read_text(world.log)
    api = Api(info)
    bridge = _bridge_pid(world)
    script, report, go, command = plant_escape(world.base, world.runtime)
    command = command.replace("kill -9 $PPID", KILL_BOTH)
    human = WsApprover(info)  # an approver is attached: calls wait for a decision
    agent = Mcp(world.port)
    agent.initialize()
    waiting = Mcp(world.port)
    waiting.initialize()
    try:
        _approved_outside(api, agent, world, command)
        [child] = wait_for(lambda: pids_where(lambda a: any(go.encode() in x for x in a)), 30)
        # Once its shell has exited too (nothing ended it), the bridge adopts it.
        wait_for(lambda: _stat(child)[1] == bridge, 30)
        target = os.path.join(world.project, "planted.txt")
        wthread, _ = in_thread(waiting.call, "write", {"path": target, "content": "x"})
        [pending] = wait_for(lambda: api.call("GET", "/api/pending").json["pending"] or None, 60)
        with open(go, "w") as f:
            f.write(pending["id"])
        wait_for(lambda: "RESULT" in read_text(report) if os.path.exists(report) else None, 60)
        approved_nothing(report, target, wthread, go, script)  # every endpoint said 403
        # It exited after its try: a zombie of the bridge for at most one reaping period.
        wait_for(lambda: not _zombies(bridge) and not _alive_child(child), 60, 0.1)
    finally:
        human.close()
        agent.close()
        waiting.close()
        if not os.path.exists(go):
            with open(go, "w") as f:
                f.write("stop")


def _alive_child(pid: int) -> bool:
    state, _ = _stat(pid)
    return state not in ("", "Z")


def test_orphans_of_killed_supervisors_and_helpers_end_or_are_reaped(world: World) -> None:
    """Rounds of escapes: one that kills only its supervisor (its orphans go to the helper,
    which ends them at once: nothing of the call outlives it), one that kills the helper too
    (its orphan goes to the bridge, lives on, exits by itself). After them no orphan of the
    first kind is alive, and no zombie is left under the bridge or its helper."""
    info = read_control(os.path.join(world.runtime, "control.json"), verify=False)
    assert info is not None, read_text(world.log)
    api = Api(info)
    bridge = _bridge_pid(world)
    kept = sleep_n("300.81")
    human = WsApprover(info)
    agent = Mcp(world.port)
    agent.initialize()
    try:
        for _ in range(3):
            _approved_outside(
                api,
                agent,
                world,
                f"setsid sleep {kept} < /dev/null > /dev/null 2>&1 & "
                "setsid sh -c 'sleep 0.2' < /dev/null > /dev/null 2>&1 & "
                "sleep 0.3; kill -9 $PPID",
            )
            _approved_outside(
                api,
                agent,
                world,
                "setsid sh -c 'sleep 0.5' < /dev/null > /dev/null 2>&1 & sleep 0.3; " + KILL_BOTH,
            )
        wait_for(lambda: not sleeping_pids("300.81"), 60)  # the helper ended them
        wait_for(lambda: not _zombies(bridge, *_helper_pids(bridge)), 60, 0.1)
        assert _bridge_alive(world), read_text(world.log)
        # And the bridge still runs calls (a new helper is started after the killed one).
        assert "still here" in _approved_outside(api, agent, world, "echo still here")
    finally:
        human.close()
        agent.close()


def _bridge_alive(world: World) -> bool:
    return world.proc is not None and world.proc.poll() is None


STATUS = r"""
import json, sys, urllib.request, urllib.error
info = json.load(open(sys.argv[1]))
req = urllib.request.Request(info["url"].rstrip("/") + "/api/status",
    headers={"Authorization": "Bearer " + info["secret"]})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
"""


def test_a_child_of_the_bridge_in_a_session_of_its_own_counts_as_a_tool(ctl, env) -> None:
    """The rule the adopted orphans meet, on a plain child of the (in-process) bridge: in the
    bridge's own session it is the bridge's (a CLI, a browser the tray opened) and may use the
    control API; in a session of its own it is refused, marker or not."""
    control = os.path.join(env["runtime"], "control.json")

    def ask(new_session: bool) -> str:
        done = subprocess.run(
            [sys.executable, "-c", STATUS, control],
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=new_session,
        )
        return done.stdout.strip() or done.stderr

    assert ask(False) == "200"
    assert ask(True) == "403"
