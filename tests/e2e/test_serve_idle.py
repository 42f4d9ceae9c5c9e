"""An idle ``serve`` sleeps (issue 26): no thread polls, yet a signal still stops it at once.

Counted, not timed: the threads' voluntary context switches (each is a wake-up from a blocking
wait) over a window. The 0.1 s stop poll this replaced woke the main thread 10 times a second
and the MCP listener's body sweep once a second, in every window.
"""

from __future__ import annotations

import os
import signal
import time

from ..conftest import write_config
from ..support.helpers import Mcp

WINDOW_S = 2.0
POLL_WOULD_GIVE = int(WINDOW_S / 0.1)  # wake-ups a 0.1 s poll alone adds to each window


def wakeups(pid: int) -> int:
    """Voluntary context switches of every thread of the process so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            continue  # a thread that just ended
    return total


def quietest_window(pid: int, windows: int = 8) -> int:
    """The fewest wake-ups in any of a few windows: start-up work (the box probe, the
    protected-file index) and a loaded machine may fill some, an idle bridge leaves one empty;
    a poll fills every one."""
    counts = []
    for _ in range(windows):
        before = wakeups(pid)
        time.sleep(WINDOW_S)
        counts.append(wakeups(pid) - before)
        if counts[-1] < POLL_WOULD_GIVE // 4:
            break
    return min(counts)


def test_an_idle_serve_does_not_poll_and_still_stops_on_a_signal(env, serve_process):
    write_config(env["config"], {"roots": [env["root"]]})
    served = serve_process()
    pid = served.proc.pid
    assert quietest_window(pid) < POLL_WOULD_GIVE // 4
    # Traffic arms the listener's body sweep; idle again, it stops.
    c = Mcp(served.port)
    c.initialize()
    assert c.rpc("ping").status == 200
    c.close()
    assert quietest_window(pid) < POLL_WOULD_GIVE // 4
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(10) == 0
