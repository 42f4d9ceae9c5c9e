"""Outside review of "a boxed call cancelled while its start is on its way ends its shell and
sweeps what it planted": the cancel that lands in the start's window, then a second cancel
(the bridge's stop cancels every running tool, whatever the client did before)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest

from omp_a2a_bridge.server.tools import supervisor

from ..support.helpers import in_thread, sleep_n, sleeping_pids, wait_for


@pytest.fixture
def slow_start(monkeypatch):
    """The supervisor's answer comes back late (a loaded machine): the shell already runs,
    and plants, before the start returns."""
    real = supervisor.start_shell

    def slow_answer(*args, **kwargs):
        started = real(*args, **kwargs)
        time.sleep(4)
        return started

    monkeypatch.setattr(supervisor, "start_shell", slow_answer)


def _kill(tag: str) -> None:
    for pid in sleeping_pids(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _cancelled_while_planting(start_bridge, env, tag: str, req_id: int):
    """A boxed call that plants ``.vscode/settings.json`` and sleeps, cancelled by its client
    while its start is still on its way: (the bridge, the call's thread, the planted file)."""
    running = start_bridge({"approval": {"tiers": {"bash": "allow"}}})
    project = os.path.join(env["root"], "proj")
    os.makedirs(project)
    settings = os.path.join(project, ".vscode", "settings.json")
    c = running.client()
    other = running.client(init=False)
    other.sid = c.sid  # the held POST keeps the first connection busy
    plant = f"mkdir -p .vscode && echo '{{}}' > .vscode/settings.json; sleep {sleep_n(tag)}"
    t, _ = in_thread(c.call, "bash", {"command": plant, "cwd": project}, req_id)
    wait_for(lambda: sleeping_pids(tag) and os.path.exists(settings), timeout=30)
    assert other.rpc("notifications/cancelled", {"requestId": req_id}, req_id=None).status == 202
    return running, t, settings


def test_a_call_cancelled_while_its_shell_starts_is_swept(start_bridge, env, slow_start):
    """The cancel ends the shell and sweeps what it planted, as a cancel of a running call
    does. It used to do neither: ``.vscode/settings.json`` stayed in the project."""
    tag = "7322"
    try:
        _, t, settings = _cancelled_while_planting(start_bridge, env, tag, 77)
        t.join(60)
        wait_for(lambda: not sleeping_pids(tag), timeout=30)
        wait_for(lambda: not os.path.exists(settings), timeout=30)
    finally:
        _kill(tag)


def test_a_cancel_then_the_bridges_stop_during_the_start_still_sweeps(
    start_bridge, env, slow_start
):
    """The client cancels while the start is on its way, then the bridge stops (its grace
    period over, it cancels every running tool: this one a second time). The second cancel
    used to land while the call waited for its shell to end and skip the sweep:
    ``.vscode/settings.json`` stayed in the project, and the shell outlived the stop."""
    tag = "7411"
    try:
        running, t, settings = _cancelled_while_planting(start_bridge, env, tag, 91)
        stopping = threading.Thread(target=running.runner.stop, args=(30.0,))
        stopping.start()
        stopping.join(60)
        t.join(60)
        wait_for(lambda: not sleeping_pids(tag), timeout=30)
        wait_for(lambda: not os.path.exists(settings), timeout=30)
    finally:
        _kill(tag)
