"""Outside review (attack5): a process an approved bash call started outlives its call and then
approves calls over the control API.

"Run outside the box" is one human decision for one call: the human lets ``npm install`` reach
the network. The command (or a script it runs) kills its own supervisor (``kill -9 $PPID``:
the same user, no box) after starting a ``setsid`` child that drops ``OMP_A2A_TOOL`` from its
environment on ``exec``. With the supervisor gone, nothing ends the child (it left the
supervisor's session, and the supervisor was the subreaper that kept it in reach); it is
re-parented to init, so no process on its chain carries the tool marker, and the control API's
peer check lets it approve, save rules, rotate the token.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from omp_a2a_bridge.server.vocab import Decision

from ..support.helpers import in_thread, pids_where, read_text, sleep_n, sleeping_pids, wait_for
from .test_self_approval import ATTACK

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")


def _reported(report: str) -> bool:
    return os.path.exists(report) and "RESULT" in read_text(report)


def _alive(*names: str) -> bool:
    """The escaped child still runs (its ``sh -c`` names the ``go`` file), or the attack it
    became (python running the script) still does."""
    marks = [n.encode() for n in names]
    return bool(pids_where(lambda argv: any(m in a for a in argv for m in marks)))


def approved_nothing(report: str, target: str, waiting: Any, *marks: str) -> None:
    """The escaped child either ended with its call (it never reports: nothing to approve) or
    reported a 403 from every control endpoint, and the waiting write never ran."""
    wait_for(lambda: _reported(report) or not _alive(*marks), 60, 0.1)
    if not _reported(report):
        assert not os.path.exists(target)
        return
    line = next(x for x in read_text(report).splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    allowed = {name: status for name, (status, _) in result.items() if status != 403}
    waiting.join(30)
    assert allowed == {}, allowed
    assert not os.path.exists(target)


def plant_escape(folder: str, runtime: str) -> tuple[str, str, str, str]:
    """(the attack script, its report file, the ``go`` file, the bash command): the command
    starts a ``setsid`` child and kills its own supervisor. The child waits for ``go`` (made by
    the test once a call it wants approved is waiting), then drops the tool marker from its
    environment and runs the attack with the waiting id; ``stop`` in ``go`` ends it."""
    script = os.path.join(folder, "attack.py")
    with open(script, "w") as f:
        f.write(ATTACK)
    control_json = os.path.join(runtime, "control.json").encode().hex()
    report = os.path.join(folder, "report.txt")
    go = os.path.join(folder, "go")
    later = (
        f"while [ ! -s {go} ]; do sleep 0.1; done; "
        f'[ "$(cat {go})" = stop ] && exit 0; '
        f'exec env -u OMP_A2A_TOOL {sys.executable} {script} {control_json} "$(cat {go})" '
        f"> {report} 2>&1"
    )
    command = f"setsid sh -c '{later}' < /dev/null > /dev/null 2>&1 & sleep 0.5; kill -9 $PPID"
    return script, report, go, command


def test_a_child_that_kills_its_supervisor_cannot_approve_later(ctl, env):
    script, report, go, command = plant_escape(env["root"], env["runtime"])
    agent = ctl.client("agent")
    human = ctl.runner.attach_approver("test human")
    try:
        args = {"command": command, "box": False, "reason": "npm install needs the network"}
        thread, out = in_thread(agent.call, "bash", args)
        mine = wait_for(lambda: [p for p in ctl.runner.snapshot().pending if p.tool == "bash"])
        assert ctl.runner.decide(mine[0].id, Decision.APPROVE)  # the human's one decision
        thread.join(60)
        assert out, "the approved call did not end"
        # The call is over. Now the agent asks for a write the human has not seen yet.
        target = os.path.join(env["root"], "planted.txt")
        waiting = ctl.client("agent-2")
        wthread, _ = in_thread(waiting.call, "write", {"path": target, "content": "x"})
        pending = wait_for(
            lambda: [p for p in ctl.runner.snapshot().pending if p.tool == "write"], 30
        )
        with open(go, "w") as f:
            f.write(pending[0].id)
        approved_nothing(report, target, wthread, go, script)
    finally:
        ctl.runner.detach_approver(human)
        if not os.path.exists(go):  # a child still waiting ends
            with open(go, "w") as f:
                f.write("stop")


def test_nothing_an_outside_call_starts_outlives_it(ctl):
    """Outside the box the call has a PID namespace of its own: it cannot see or signal its
    supervisor (``kill -9 $PPID`` reaches the namespace's first process, which ignores it), and
    when the shell ends the kernel ends every process it left, ``setsid`` or not."""
    agent = ctl.client("agent")
    human = ctl.runner.attach_approver("test human")
    marker = sleep_n("300.74")
    command = (
        f"(setsid nohup sleep {marker} > /dev/null 2>&1 &); sleep 0.3; kill -9 $PPID; echo survived"
    )
    try:
        args = {"command": command, "box": False, "reason": "needs the network"}
        thread, out = in_thread(agent.call, "bash", args)
        mine = wait_for(lambda: [p for p in ctl.runner.snapshot().pending if p.tool == "bash"])
        assert ctl.runner.decide(mine[0].id, Decision.APPROVE)
        thread.join(60)
        assert out, "the approved call did not end"
        from omp_a2a_bridge.server.box import probe

        try:
            wait_for(lambda: not sleeping_pids("300.74"), 30)
        except AssertionError:
            raise AssertionError(f"outlived its call: {out[0].text!r}, {probe.status()}") from None
        assert ctl.runner.snapshot() is not None  # the bridge (outside the namespace) lives
    finally:
        ctl.runner.detach_approver(human)
