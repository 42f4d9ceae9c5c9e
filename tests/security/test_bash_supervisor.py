"""bash's supervisor, resident since issue 26: a helper keeps a pool of supervisors (child
subreapers) and hands each call to a waiting one. These attack what reuse and residence could
break: a call's leftovers meeting the next call, a dying bridge or helper, signals the shell
inherits. The per-call promises themselves (timeout, cancel, setsid, double fork, nohup,
output limit) are in ``test_limits_and_faults.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from omp_a2a_bridge.server.tools import supervisor
from omp_a2a_bridge.server.tools.shell import child_env
from omp_a2a_bridge.server.vocab import Decision
from tests.conftest import write_config
from tests.support.helpers import (
    Mcp,
    in_thread,
    process_gone,
    sleep_n,
    sleeping_pids,
    wait_for,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")

BASH = "/bin/bash"


def _read_all(fd: int) -> bytes:
    out = b""
    while chunk := os.read(fd, 65536):
        out += chunk
    return out


def _run(command: str, cwd: str) -> tuple[int, str, str]:
    """One call straight through the helper (unboxed): (its supervisor, output, status)."""
    started = supervisor.start_shell([BASH, "-c", command], cwd, child_env())
    assert started is not None
    try:
        output = _read_all(started.output).decode()
        status = _read_all(started.status).decode()  # EOF: this call's supervision is over
    finally:
        started.close()
    return started.pid, output, status


def test_a_supervisor_takes_the_next_call_only_after_the_last_ones_processes_are_gone(tmp_path):
    """A background child that ignores SIGTERM (so it needs the KILL loop) and left its
    session: gone before the same supervisor starts the next call, which then is its only
    child."""
    cwd = str(tmp_path)
    first, out, status = _run(
        f"(trap '' TERM; exec setsid sleep {sleep_n('311.71')}) & echo started", cwd
    )
    assert out == "started\n" and status == "exit 0\n"
    assert not sleeping_pids("311.71")  # ended before the status pipe closed
    second, out, status = _run('echo "$(cat /proc/$PPID/task/*/children)"; echo $$', cwd)
    assert second == first  # the pool handed it to the same, now idle, supervisor
    children, me = out.split("\n")[:2]
    assert children.split() == [me], out  # its one child: this call's shell


def test_concurrent_calls_each_get_their_own_supervisor_pipes_and_output(tmp_path):
    """Eight at once: the helper forks supervisors for the busy ones; no output, status or
    kill pipe goes to the wrong call; afterwards at most two wait idle."""
    cwd = str(tmp_path)
    results: dict[int, tuple[int, str, str]] = {}

    def one(i: int) -> None:
        results[i] = _run(f"sleep 0.2; echo call {i}; exit {i}", cwd)

    threads = [in_thread(one, i)[0] for i in range(8)]
    for t in threads:
        t.join(60)
    assert sorted(results) == list(range(8))
    for i, (_, out, status) in results.items():
        assert out == f"call {i}\n" and status == f"exit {i}\n", (i, out, status)
    assert len({pid for pid, _, _ in results.values()}) > 1  # they ran side by side
    helper = supervisor.helper_pid()
    assert helper is not None

    def idle() -> list[str]:
        with open(f"/proc/{helper}/task/{helper}/children") as f:
            return f.read().split()

    wait_for(lambda: len(idle()) <= 2, timeout=60)


def test_a_shell_that_cannot_start_is_said_and_the_supervisor_stays_usable(tmp_path):
    gone = str(tmp_path / "gone")
    started = supervisor.start_shell([BASH, "-c", "echo never"], gone, child_env())
    assert started is not None
    try:
        assert _read_all(started.output) == b""
        status = _read_all(started.status).decode()
    finally:
        started.close()
    assert status.startswith("error 2 "), status  # ENOENT, reported, not a crash
    pid, out, _ = _run("echo again", str(tmp_path))
    assert out == "again\n" and pid == started.pid


def test_a_killed_helper_is_started_again_and_the_running_call_goes_on(tmp_path):
    cwd = str(tmp_path)
    _run("true", cwd)
    helper = supervisor.helper_pid()
    assert helper is not None
    started = supervisor.start_shell([BASH, "-c", "sleep 0.5; echo done"], cwd, child_env())
    assert started is not None
    try:
        os.kill(helper, signal.SIGKILL)
        # The call's supervisor does not depend on the helper once it has the call.
        assert _read_all(started.output) == b"done\n"
        assert _read_all(started.status) == b"exit 0\n"
    finally:
        started.close()
    wait_for(lambda: supervisor.helper_pid() != helper or process_gone(helper))
    _, out, _ = _run("echo after", cwd)
    assert out == "after\n"
    assert supervisor.helper_pid() not in (None, helper)


# A stand-in for the bridge: it starts one call through the helper, says so, and then waits
# to be killed. Its kill pipe's write end dies with it.
_HOLDER = """
import os, sys
from omp_a2a_bridge.server.tools import supervisor
from omp_a2a_bridge.server.tools.shell import child_env
command = sys.argv[1]
started = supervisor.start_shell(["/bin/bash", "-c", command], sys.argv[2], child_env())
assert os.read(started.output, 100).startswith(b"ready")
print(supervisor.helper_pid(), started.pid, flush=True)
os.read(0, 1)
"""


def test_the_processes_of_a_running_call_end_when_the_bridge_is_killed(tmp_path):
    """SIGKILL, no clean-up code runs: the kernel closes the kill pipe, and the supervisor
    ends the shell, its setsid and double-forked children, and its nohup one."""
    pids = tmp_path / "pids"
    command = (
        f"setsid sleep {sleep_n('312.71')} & echo $! > {pids}; "
        f"(setsid sh -c 'sleep {sleep_n('313.71')} & echo $! >> {pids}' &); "
        f"nohup sleep {sleep_n('314.71')} > /dev/null 2>&1 & echo $! >> {pids}; "
        f"while [ $(wc -l < {pids}) -lt 3 ]; do sleep 0.01; done; echo ready; "
        f"sleep {sleep_n('315.71')}"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_HOLDER), command, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        helper, sup = (int(x) for x in line.split())
        wait_for(lambda: len(sleeping_pids("312.71", "313.71", "314.71", "315.71")) == 4)
        holder.kill()
        holder.wait(10)
        wait_for(lambda: not sleeping_pids("312.71", "313.71", "314.71", "315.71"), timeout=60)
        # The bridge's helper goes too (EOF on its socket), and the supervisors with it.
        wait_for(lambda: process_gone(helper) and process_gone(sup), timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)


@pytest.mark.parametrize("box", [True, False])
def test_the_shell_gets_sigpipe_and_sigxfsz_at_their_defaults(start_bridge, box):
    """Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec:
    the shell once inherited that, and ``yes | head -1`` printed 'Broken pipe'."""
    running = start_bridge()
    assert running.runner.bridge is not None
    c = running.client()
    command = "yes | head -1; grep SigIgn /proc/self/status"
    if box:
        r = c.call("bash", {"command": command})
    else:
        handle = running.runner.attach_approver("pytest")
        try:
            t, out = in_thread(c.call, "bash", {"command": command, "box": False, "reason": "test"})
            [p] = running.pending()
            running.runner.decide(p.id, Decision.APPROVE)
            t.join(30)
            r = out[0]
        finally:
            running.runner.detach_approver(handle)
    assert not r.result["isError"], r.text
    first, mask = r.text.split("\n")[:2]
    assert first == "y" and "Broken pipe" not in r.text, r.text
    ignored = int(mask.split()[1], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), (sig, mask)


def test_a_boxed_call_ends_with_the_bridge_process(serve_process, env, tmp_path):
    """The whole chain in the box: a real ``serve`` killed with SIGKILL mid-call; bwrap, the
    box's init and everything in it go."""
    write_config(env["config"], {"roots": [env["root"]]})
    served = serve_process()
    c = Mcp(served.port)
    c.initialize()
    t, _ = in_thread(
        c.call, "bash", {"command": f"setsid sleep {sleep_n('316.71')} & sleep {sleep_n('317.71')}"}
    )
    wait_for(lambda: len(sleeping_pids("316.71", "317.71")) == 2, timeout=30)
    boxed = sleeping_pids("316.71", "317.71")
    served.proc.kill()
    served.proc.wait(10)
    wait_for(lambda: all(process_gone(p) for p in boxed), timeout=60)
    t.join(60)
