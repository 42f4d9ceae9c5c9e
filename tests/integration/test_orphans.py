"""The bridge's process as a child subreaper (``server/infra/orphans.py``), with real processes:
it adopts an orphan that left every ancestor, reaps it when it exits, and never reaps a child
that its own starter waits for (that starter would lose the exit status).

The test process plays the bridge (the in-process bridges of this suite make it a subreaper
too). Linux only: other systems have no subreaper.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from omp_a2a_bridge.server.infra import orphans

from ..support.helpers import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux subreaper")


@pytest.fixture(autouse=True)
def subreaper() -> None:
    assert orphans.enable(), "prctl(PR_SET_CHILD_SUBREAPER) failed"


def _state(pid: int) -> str:
    found = orphans.stat_of(pid)
    return "" if found is None else found[0]


def _orphan(seconds: str) -> int:
    """A ``setsid`` grandchild whose parent exits at once: our orphan now. Its pid."""
    shell = subprocess.run(
        ["sh", "-c", f"setsid sleep {seconds} < /dev/null > /dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(shell.stdout.strip())


def test_an_orphan_in_a_session_of_its_own_is_adopted_and_reaped() -> None:
    pid = _orphan("0.3")
    found = orphans.stat_of(pid)
    assert found is None or found[1] == os.getpid(), found  # ours, not init's
    # Exited, it is a zombie of ours until reaped: by the reaping thread, or here.
    wait_for(lambda: orphans.reap_orphans() >= 0 and _state(pid) == "", 30, 0.05)


def test_many_orphans_leave_no_zombie() -> None:
    pids = [_orphan("0.05") for _ in range(20)]
    wait_for(lambda: not [p for p in pids if _state(p)], 60, 0.1)
    assert not [p for p in orphans.children() if _state(p) == "Z" and p in pids]


def test_a_child_its_starter_waits_for_keeps_its_exit_status() -> None:
    """A child in a session of its own, recorded as owned (an upstream server, ssh): never
    reaped here, so its starter reads its real exit code (a stolen one reads 0)."""
    with orphans.starting() as own:
        proc = subprocess.Popen(["sh", "-c", "exit 3"], start_new_session=True)
        own(proc.pid)
    wait_for(lambda: _state(proc.pid) == "Z", 30)
    orphans.reap_orphans()
    assert proc.wait(30) == 3


def test_a_child_in_the_bridges_own_session_keeps_its_exit_status() -> None:
    """``git``, ``rg``, the box probe, what the tray opens: the bridge's session, their starter's
    to reap."""
    proc = subprocess.Popen(["sh", "-c", "exit 4"])
    wait_for(lambda: _state(proc.pid) == "Z", 30)
    orphans.reap_orphans()
    assert proc.wait(30) == 4


def test_nothing_is_reaped_while_a_start_is_under_way() -> None:
    """Between a child's start and the moment its pid is recorded, it may already have exited:
    no zombie is reaped until the start is over."""
    with orphans.starting():
        proc = subprocess.Popen(["sh", "-c", "exit 5"], start_new_session=True)
        wait_for(lambda: _state(proc.pid) == "Z", 30)
        assert orphans.reap_orphans() == 0
        assert _state(proc.pid) == "Z"
        orphans.own(proc.pid)
    assert proc.wait(30) == 5


def test_the_tray_opens_the_page_in_the_bridges_own_session(tmp_path) -> None:
    """The human's browser, started by the tray, stays in the bridge's session (so, adopted by
    the bridge when ``xdg-open`` leaves it behind, the control API does not count it as a
    tool's), in a process group of its own (a Ctrl-C in the app's terminal is not for it).
    The browser is ``$BROWSER`` here; the opener runs in a fresh process, as the tray does
    (``webbrowser`` reads the environment once per process)."""
    out = tmp_path / "seen"
    fake = tmp_path / "browser.sh"
    fake.write_text(f"#!/bin/sh\ncut -d' ' -f5,6 /proc/$$/stat > {out}.tmp && mv {out}.tmp {out}\n")
    fake.chmod(0o755)
    env = {**os.environ, "BROWSER": f"{fake} %s"}
    code = "import sys; from omp_a2a_bridge.tray.app import open_url; print(open_url(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "http://127.0.0.1:1/page"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "True", done.stderr
    wait_for(out.exists, 30)
    group, session = (int(x) for x in out.read_text().split())
    assert session == os.getsid(0)  # the opener's session: this test's
    assert group != os.getpgid(0)
