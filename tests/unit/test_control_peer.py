"""The peer check's chain walk (server/control/peer.py): a process gone mid-walk."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from omp_a2a_bridge.server.control.peer import tool_on_chain

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")


def test_a_holder_gone_before_its_walk_counts_as_a_tool() -> None:
    """attack9: a tool's process found holding the socket, then exited and reaped before the
    walk read it, ended the walk as if at init (allowed). For a found holder it is refused;
    for an unreadable bystander (a root daemon that exits) it still says nothing."""
    gone = _gone_pid()
    assert tool_on_chain(gone, os.getpid(), gone_is_tool=True) == gone
    assert tool_on_chain(gone, os.getpid()) is None


def test_a_live_child_in_the_bridge_session_is_not_a_tool() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        assert tool_on_chain(child.pid, os.getpid(), gone_is_tool=True) is None
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(60)


def _gone_pid() -> int:
    """A pid that names no process now (a child started and reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(60)
    assert not os.path.exists(f"/proc/{child.pid}")
    return child.pid
