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

# ruff: noqa: SIM105 - try/except/pass instead of contextlib.suppress: one import less to start

from __future__ import annotations

import os
import sys
import time

# POSIX only (Windows shells run without it); also tells mypy to check the rest as POSIX code.
assert sys.platform != "win32"

# Numeric on purpose: importing ``signal`` (and ``threading``, ``contextlib``) is a noticeable
# share of this process's start-up, which every bash call pays. Same numbers on Linux and macOS.
SIGTERM = 15
SIGKILL = 9
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 0.3


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _children(me: int) -> list[int]:
    """Our direct children (orphans re-parented to us included), from /proc."""
    out: list[int] = []
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


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill(pid: int, sig: int, group: bool = False) -> bool:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except OSError:
        return False
    return True


class Supervisor:
    """One bash call's shell and every process it leaves behind: start, report the exit, end all.

    Why a separate supervisor process: only a subreaper that outlives the shell can still find
    (and kill) what the shell daemonised, so no process outlives its call.
    """

    def __init__(self, status_fd: int, argv: list[str]) -> None:
        self.status_fd = status_fd
        self.argv = argv
        self.me = os.getpid()
        self.subreaper = _become_subreaper()
        self.shell = 0
        self.ended = False

    def start(self) -> None:
        os.set_inheritable(self.status_fd, False)
        pid = os.fork()
        if pid == 0:  # the shell
            try:
                os.setpgid(0, 0)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(1, 2)
                os.execv(self.argv[0], self.argv)  # noqa: S606 - the bash tool's own shell
            except BaseException:
                os._exit(127)
        self.shell = pid
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first (or already exec'd)
        # Let go of the output pipe: it then closes as soon as the shell and whatever it left
        # behind are done with it, without waiting for this process to exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)

    def _signal_all(self, sig: int) -> None:
        _kill(self.shell, sig, group=True)
        if self.subreaper:
            for pid in _children(self.me):
                _kill(pid, sig)

    def _alive(self) -> bool:
        if self.subreaper:
            return bool(_children(self.me))
        return _kill(self.shell, 0, group=True)

    def end_all(self) -> None:
        """TERM, a short grace, then KILL until nothing is left; once."""
        if self.ended:
            return
        self.ended = True
        self._signal_all(SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            _reap()
            if not self._alive():
                return
            time.sleep(0.01)
        for _ in range(10000):
            self._signal_all(SIGKILL)
            time.sleep(0.005)
            _reap()
            if not self._alive():
                return

    def _report(self, text: str) -> None:
        try:
            os.write(self.status_fd, text.encode() + b"\n")
        except OSError:
            pass

    def _report_status(self, status: int) -> None:
        if os.WIFSIGNALED(status):
            self._report(f"signal {os.WTERMSIG(status)}")
        else:
            self._report(f"exit {os.WEXITSTATUS(status)}")

    def _wait_shell(self) -> int:
        while True:
            try:
                pid, status = os.waitpid(self.shell, 0)
            except ChildProcessError:
                return 0
            except InterruptedError:
                continue
            if pid == self.shell:
                return status

    def _on_bridge(self) -> None:
        """Any byte on stdin, or EOF (the bridge went away): end everything now."""
        self.end_all()
        self._report("killed")
        os._exit(0)

    def run(self) -> int:
        self.start()
        pidfd = -1
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(self.shell)
            except OSError:
                pidfd = -1
        if pidfd >= 0:  # Linux 5.3+: one poll on both, no thread
            import select

            poller = select.poll()
            poller.register(0, select.POLLIN | select.POLLHUP | select.POLLERR)
            poller.register(pidfd, select.POLLIN)
            while True:
                fds = [fd for fd, _ in poller.poll()]
                if 0 in fds and pidfd not in fds:
                    self._on_bridge()
                if pidfd in fds:
                    break
        else:
            import threading

            def watch() -> None:
                try:
                    os.read(0, 1)
                except OSError:
                    pass
                self._on_bridge()

            threading.Thread(target=watch, daemon=True).start()
        self._report_status(self._wait_shell())
        # The shell is done: whatever it left running in the background goes with the call.
        self.end_all()
        return 0


def main() -> int:
    status_fd = int(sys.argv[1])
    return Supervisor(status_fd, sys.argv[2:]).run()


if __name__ == "__main__":
    code = main()
    os._exit(code)  # no interpreter teardown: the bridge waits for this exit
