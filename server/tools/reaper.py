"""The small supervisor every ``bash`` call runs under (POSIX), so no process outlives its call.

Run as a script (``python -I -S reaper.py STATUS_FD SHELL ARGS...``), never imported by the
bridge: it must start fast and depend on nothing. It

- makes itself a *child subreaper* on Linux (``PR_SET_CHILD_SUBREAPER``), so every orphaned
  descendant of the shell — ``setsid``, double-forked, daemonised — is re-parented to it instead
  of to init, where it can still be found and killed;
- starts the shell in its own process group with stdin on ``/dev/null`` and stdout/stderr on the
  output pipe it inherited, and writes ``exit N`` (or ``signal N``) to ``STATUS_FD`` the moment
  the shell itself exits — so the bridge answers when the shell is done, not when the last
  background child closes the pipe;
- then ends everything left (the call is over), and exits;
- ends everything at once when the bridge writes to its stdin or the bridge goes away (EOF):
  timeout, cancel, output limit, shutdown or a crashed bridge.

"Ends" is SIGTERM to every descendant and the shell's group, a short grace, then SIGKILL in a loop
until no child is left (a killed process cannot fork again, and whatever it orphaned is
re-parented to us, so the loop converges). On other POSIX systems there is no subreaper: the
shell's process group is what gets killed, so a ``setsid`` child can escape there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 0.3


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children(me: int) -> list[int]:
    """Our direct children (orphans re-parented to us included), from /proc."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may hold spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(name))
    return out


def _reap() -> int:
    n = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        if pid == 0:
            return n
        n += 1


class Supervisor:
    def __init__(self, status_fd: int, argv: list[str]) -> None:
        self.status_fd = status_fd
        self.argv = argv
        self.me = os.getpid()
        self.subreaper = _become_subreaper()
        self.shell = 0
        self.lock = threading.Lock()

    def start(self) -> None:
        os.set_inheritable(self.status_fd, False)
        pid = os.fork()
        if pid == 0:  # the shell
            try:
                os.setpgid(0, 0)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(1, 2)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.execv(self.argv[0], self.argv)  # noqa: S606 - the bash tool's own shell
            except BaseException:
                os._exit(127)
        self.shell = pid
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)

    def _signal_all(self, sig: int) -> int:
        n = 0
        with contextlib.suppress(OSError):
            os.killpg(self.shell, sig)
            n += 1
        if self.subreaper:
            for pid in _children(self.me):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
                    n += 1
        return n

    def end_all(self) -> None:
        """TERM, a short grace, then KILL until nothing is left; idempotent."""
        with self.lock:
            self._signal_all(signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline:
                _reap()
                if not self._alive():
                    return
                time.sleep(0.01)
            for _ in range(10000):
                if not self._signal_all(signal.SIGKILL) and not self._alive():
                    break
                time.sleep(0.005)
                _reap()
                if not self._alive():
                    break

    def _alive(self) -> bool:
        if self.subreaper:
            return bool(_children(self.me))
        try:
            os.killpg(self.shell, 0)
        except OSError:
            return False
        return True

    def watch_bridge(self) -> None:
        """Any byte on stdin, or EOF (the bridge went away), means: end everything now."""
        with contextlib.suppress(OSError):
            os.read(0, 1)
        self.end_all()
        self._report("killed")
        os._exit(0)

    def _report(self, text: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.status_fd, text.encode() + b"\n")

    def run(self) -> int:
        self.start()
        threading.Thread(target=self.watch_bridge, daemon=True).start()
        while True:
            try:
                pid, status = os.waitpid(self.shell, 0)
            except ChildProcessError:
                status = 0
                break
            except InterruptedError:
                continue
            if pid == self.shell:
                break
        if os.WIFSIGNALED(status):
            self._report(f"signal {os.WTERMSIG(status)}")
        else:
            self._report(f"exit {os.WEXITSTATUS(status)}")
        # The shell is done: whatever it left running in the background goes with the call.
        self.end_all()
        return 0


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: None)  # the bridge asks through stdin
    status_fd = int(sys.argv[1])
    return Supervisor(status_fd, sys.argv[2:]).run()


if __name__ == "__main__":
    sys.exit(main())
