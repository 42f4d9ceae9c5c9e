"""Stopping the tray process when asked, whatever the UI toolkit is doing.

A UI loop can ignore a stop: pystray's xorg loop waits on X replies, a setup thread left
waiting on pystray's internal queue keeps the interpreter alive, a tray that failed to start
may have left such threads behind. So the signal handler never relies on the UI loop: it starts
the graceful stop (bridge first: waiting calls are denied, running ones get their grace, the
audit is flushed, the control file goes) on a thread, and arms a watchdog. If the process has
not exited within the budget, the watchdog makes sure the bridge is stopped and the control
file removed, and ends the process with the exit code of a requested stop (0).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

BUDGET_S = 1.8  # SIGTERM to exit, graceful or forced (the promise is "under 2 s")
BRIDGE_SHARE_S = 1.6  # of which the bridge's own graceful stop may take this much
AFTER_BRIDGE_S = 0.5  # then the UI has this long to let the main thread return


class StopGuard:
    """Turns SIGTERM/SIGINT into a graceful stop with a watchdog, so the tray never hangs.

    Why: a UI loop can ignore a stop; the guard stops the bridge on a thread and, past the
    budget, cleans up and ends the process itself.
    """

    def __init__(
        self,
        graceful: Callable[[], None],
        bridge_stopped: Callable[[], bool],
        force_cleanup: Callable[[], None],
        budget: float = BUDGET_S,
    ) -> None:
        self.graceful = graceful
        self.bridge_stopped = bridge_stopped
        self.force_cleanup = force_cleanup
        self.budget = budget
        self.requested = threading.Event()
        self.finished = threading.Event()  # set when the main thread is about to exit
        self._lock = threading.Lock()

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.requested.is_set():
            # Asked twice: no more patience.
            threading.Thread(target=self._force, args=(0.0,), daemon=True).start()
            return
        self.request()

    def request(self) -> None:
        """A stop was asked for (signal or Quit): graceful now, forced at the budget."""
        with self._lock:
            if self.requested.is_set():
                return
            self.requested.set()
        t0 = time.monotonic()
        threading.Thread(target=self._graceful_safely, name="stop", daemon=True).start()
        threading.Thread(target=self._force, args=(t0,), name="stop-watchdog", daemon=True).start()

    def _graceful_safely(self) -> None:
        try:
            self.graceful()
        except Exception:
            log.exception("graceful stop failed")

    def _force(self, t0: float) -> None:
        if t0:
            deadline = t0 + self.budget
            # Let the bridge finish its own graceful stop first (its records must land).
            while not self.bridge_stopped() and time.monotonic() < t0 + BRIDGE_SHARE_S:
                time.sleep(0.02)
            patience = min(deadline, time.monotonic() + AFTER_BRIDGE_S) - time.monotonic()
            if self.finished.wait(max(0.0, patience)):
                return
        log.info("the tray did not stop in time; exiting anyway")
        cleaner = threading.Thread(target=self.force_cleanup, daemon=True)
        cleaner.start()
        cleaner.join(0.15)
        exit_now(0)


def exit_now(code: int) -> None:
    """End the process at once (no waiting for stray non-daemon threads), output flushed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # No logging.shutdown() here: it takes every handler's lock, and the watchdog calls this
    # while other threads may hold one (a stop then waited 5 s for a hung keyring worker).
    os._exit(code)
