"""The supervisors every ``bash`` call runs under (POSIX), so no process outlives its call.

Run once per bridge process as a script (``python -I -S reaper.py``) with a Unix stream socket
as its stdin, never imported by the bridge: it depends on nothing but the standard library.
This process is the *helper*. The bridge (:mod:`server.tools.supervisor`) sends it one request
per call: the call's ``cwd``, ``argv`` and environment, with three descriptors — the output
pipe, the status pipe and the kill pipe. The helper hands the request to an idle *supervisor*
(a fork of itself that finished an earlier call), or forks a new one when none is idle, and
answers ``ok PID``. No Python starts per call. A supervisor

- is a *child subreaper* on Linux (``PR_SET_CHILD_SUBREAPER``), so every orphaned descendant of
  the shell — ``setsid``, double-forked, daemonised — is re-parented to it instead of to init,
  where it can still be found and killed;
- leads a session of its own (the bridge's last resort is ``killpg`` of it), and starts the shell
  with ``posix_spawn`` in its own process group, stdin on ``/dev/null``, stdout and stderr on the
  output pipe, SIGPIPE and SIGXFSZ back at their defaults (Python ignores them, and an ignored
  signal stays ignored across ``exec``: ``yes | head -1`` said "Broken pipe"), and lets go of
  the output pipe;
- writes ``exit N`` (or ``signal N``) to the status pipe the moment the shell itself exits — so
  the bridge answers when the shell is done, not when the last background child closes the
  output pipe — then ends everything left (the call is over); for a boxed call whose request
  names bubblewrap's status descriptor (``argc:FD``), ``unstarted N`` when bubblewrap exited
  without saying it started the command (its setup failed: the bridge may plan it again);
- ends everything at once when the bridge writes to the kill pipe or the bridge goes away (EOF
  on the kill pipe: only the bridge holds its write end): timeout, cancel, output limit, shutdown
  or a crashed bridge;
- then closes the call's pipes (the status pipe's EOF is the bridge's "supervision over") and
  waits for the next call, only if ``waitpid`` says nothing of this one is left; else it exits.

"Ends" is SIGTERM to every descendant and the shell's group, a short grace, then SIGKILL in a loop
until ``waitpid`` says no child is left (a killed process cannot fork again, and whatever it
orphaned is re-parented to us, so the loop converges). On other POSIX systems there is no
subreaper: the shell's process group is what gets killed, so a ``setsid`` child can escape there.

The helper exits when its socket reaches EOF (the bridge closed it, or died), and so do the idle
supervisors (EOF on theirs); a supervisor busy with a call finishes it first.

The helper is a child subreaper too (Linux). A call run outside the box where there is no
bubblewrap (so no PID namespace of its own) can kill its supervisor (``kill -9 $PPID``, the same
user); what it started is then re-parented to the helper, not to init. Its supervisor's death is
the call's end (the bridge reads EOF on the status pipe), so the helper ends whatever it adopted
that is not one of its supervisors: SIGKILL, at once, again for whatever that orphans in turn,
and reaps it — nothing of the call outlives it, and no zombie is left. Until then the orphan's
chain reaches the helper, which carries the tool marker, so the control API refuses it. If the
call kills the helper as well, the bridge adopts the orphans (:mod:`server.infra.orphans`).
"""

# ruff: noqa: SIM105 - try/except/pass instead of contextlib.suppress: one import less to start

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import sys
import time

# POSIX only (Windows shells run without it); also tells mypy to check the rest as POSIX code.
assert sys.platform != "win32"

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 0.3
MAGIC = b"A2AS"  # each request: MAGIC, 4-byte big-endian payload length, payload; 3 descriptors
MAX_REQUEST = 64 * 1024 * 1024
FDS = 3  # output (write end), status (write end), kill (read end)
# Signals Python ignores at start (an ignored signal stays ignored across exec): the shell gets
# them back at their defaults, as ``subprocess``' ``restore_signals`` does.
RESTORED = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, n))


def _load_prctl() -> object | None:
    """libc's ``prctl``, loaded once in the helper (importing ``ctypes`` in every forked
    supervisor cost more than the fork itself)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return None


_prctl = None


def _become_subreaper() -> bool:
    if _prctl is None:
        return False
    try:
        return _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0  # type: ignore[operator]
    except (OSError, AttributeError):
        return False


def _scan_children(me: int) -> list[int]:
    """Direct children from every ``/proc/PID/stat`` (kernels without the ``children`` file)."""
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


def _children(me: int) -> list[int]:
    """Our direct children (orphans re-parented to us included): ``/proc/self/task/*/children``
    (one small read per thread instead of a scan of every process). The kernel lists them
    without freezing anything, so one read can miss a child that forks or exits meanwhile;
    :meth:`Supervisor.end_all` therefore loops until ``waitpid`` says none is left."""
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return _scan_children(me)
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{me}/task/{tid}/children", "rb") as f:
                out += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            return _scan_children(me)  # CONFIG_PROC_CHILDREN off
        except OSError:
            continue
    return out


def _reap() -> bool:
    """Reap what has exited; True while a child is still alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _kill(pid: int, sig: int, group: bool = False) -> bool:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except OSError:
        return False
    return True


class Supervisor:
    """One bash call's shell and every process it leaves behind: start, report the exit, end all.

    Why a supervisor process per call: only a subreaper that outlives the shell can still find
    (and kill) what the shell daemonised, so no process outlives its call. Why forked from a
    resident helper: a Python start per call was most of a boxed ``echo hi``'s CPU.
    """

    def __init__(
        self,
        fds: tuple[int, int, int],
        cwd: bytes,
        argv: list[bytes],
        env: list[bytes],
        subreaper: bool,
        box_fd: int = -1,
    ) -> None:
        self.output, self.status_fd, self.kill_fd = fds
        # The descriptor number bubblewrap reports on (``--json-status-fd``), or -1; the read
        # end of the pipe put there while the shell runs.
        self.box_fd = box_fd
        self.box_status = -1
        self.cwd = cwd
        self.argv = argv
        self.env: dict[bytes, bytes] = {}
        for entry in env:
            name, sep, value = entry.partition(b"=")
            if not sep or not name:
                raise ValueError("bad environment entry")
            self.env[name] = value
        self.me = os.getpid()
        self.subreaper = subreaper
        self.shell = 0
        self.ended = False

    def start(self) -> None:
        """Start the shell; raises OSError (reported as ``error``) when it cannot start."""
        os.chdir(self.cwd)
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, self.output, 1),
            (os.POSIX_SPAWN_DUP2, self.output, 2),
        ]
        write = -1
        if self.box_fd > 2:
            self.box_status, write = os.pipe()  # both close-on-exec; the dup2 is not
            if write == self.box_fd:  # dup2 onto itself would keep close-on-exec
                moved = fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, self.box_fd + 1)
                os.close(write)
                write = moved
            actions.append((os.POSIX_SPAWN_DUP2, write, self.box_fd))
        try:
            self.shell = os.posix_spawn(
                self.argv[0],
                self.argv,
                self.env,
                file_actions=actions,
                setpgroup=0,
                setsigdef=RESTORED,
            )
        finally:
            if write >= 0:
                os.close(write)  # bubblewrap holds it now: EOF once it has exited
        # Let go of the output pipe: it then closes as soon as the shell and whatever it left
        # behind are done with it, without waiting for this process to exit.
        os.close(self.output)
        self.output = -1

    def _signal_all(self, sig: int) -> None:
        _kill(self.shell, sig, group=True)
        if self.subreaper:
            for pid in _children(self.me):
                _kill(pid, sig)

    def _alive(self) -> bool:
        if self.subreaper:
            return _reap()
        _reap()
        return _kill(self.shell, 0, group=True)

    def end_all(self) -> None:
        """TERM, a short grace, then KILL until nothing is left; once. Nothing is signalled
        when nothing is left (the common case: the shell ran alone)."""
        if self.ended:
            return
        self.ended = True
        if not self._alive():
            return
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if not self._alive():
                return
            time.sleep(0.01)
        for _ in range(10000):
            self._signal_all(signal.SIGKILL)
            time.sleep(0.005)
            if not self._alive():
                return

    def _report(self, text: str) -> None:
        try:
            os.write(self.status_fd, text.encode("ascii", "replace") + b"\n")
        except OSError:
            pass

    def _box_said(self) -> bytes:
        """What bubblewrap wrote on its status pipe (it has exited: all of it is there)."""
        data = b""
        if self.box_status < 0:
            return data
        try:
            os.set_blocking(self.box_status, False)
            while len(data) < 65536:
                chunk = os.read(self.box_status, 4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        return data

    def close_box_status(self) -> None:
        if self.box_status >= 0:
            _close([self.box_status])
            self.box_status = -1

    def _report_status(self, status: int) -> None:
        if os.WIFSIGNALED(status):
            self._report(f"signal {os.WTERMSIG(status)}")
        elif self.box_status >= 0 and b'"exit-code"' not in self._box_said():
            # bubblewrap exited without saying the command ran: its own setup failed (or the
            # command could not be exec'd), so nothing of the command ever ran.
            self._report(f"unstarted {os.WEXITSTATUS(status)}")
        else:
            self._report(f"exit {os.WEXITSTATUS(status)}")
        self.close_box_status()

    def _wait_shell(self) -> int:
        while True:
            try:
                pid, status = os.waitpid(self.shell, 0)
            except ChildProcessError:
                return 0
            if pid == self.shell:
                return status

    def _on_bridge(self) -> None:
        """Any byte on the kill pipe, or EOF (the bridge went away): end everything now."""
        self.end_all()
        self._report("killed")

    def run(self) -> bool:
        """Run the call to its end; True when this process may take another call (Linux with
        pidfd: nothing of this call is left, no thread was started)."""
        try:
            self.start()
        except OSError as e:
            self.close_box_status()
            self._report(f"error {e.errno or 0} {e.strerror or e}")
            return True
        pidfd = -1
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(self.shell)
            except OSError:
                pidfd = -1
        if pidfd < 0:  # no pidfd (macOS, Linux < 5.3): a thread watches the bridge
            import threading

            def watch() -> None:
                try:
                    os.read(self.kill_fd, 1)
                except OSError:
                    pass
                self._on_bridge()
                os._exit(0)

            threading.Thread(target=watch, daemon=True).start()
            self._report_status(self._wait_shell())
            self.end_all()
            return False
        try:
            poller = select.poll()
            poller.register(self.kill_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            poller.register(pidfd, select.POLLIN)
            while True:
                fds = [fd for fd, _ in poller.poll()]
                if self.kill_fd in fds and pidfd not in fds:
                    self._on_bridge()
                    return self.subreaper
                if pidfd in fds:
                    break
        finally:
            os.close(pidfd)
        self._report_status(self._wait_shell())
        # The shell is done: whatever it left running in the background goes with the call.
        self.end_all()
        return self.subreaper


# -- the resident helper and its supervisors ---------------------------------------------------


def _recv_exact(sock: socket.socket, n: int, into: bytearray) -> bool:
    while len(into) < n:
        chunk = sock.recv(min(n - len(into), 1 << 20))
        if not chunk:
            return False
        into += chunk
    return True


def _receive(sock: socket.socket) -> tuple[tuple[int, int, int], bytes] | None:
    """One request: (output, status, kill) and its payload; None at EOF or on a garbled one.

    The descriptors ride on the request's first bytes (``SCM_RIGHTS``), close-on-exec."""
    flags = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
    head, anc, _, _ = sock.recvmsg(8, socket.CMSG_SPACE(FDS * 4), flags)
    fds: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(data) - len(data) % 4
            fds += [int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, n, 4)]
    for fd in fds:
        os.set_inheritable(fd, False)  # where MSG_CMSG_CLOEXEC is missing (macOS)
    buf = bytearray(head)
    ok = bool(head) and _recv_exact(sock, 8, buf) and buf[:4] == MAGIC and len(fds) == FDS
    size = int.from_bytes(buf[4:8], "big") if ok else 0
    if ok and size <= MAX_REQUEST:
        payload = bytearray()
        if _recv_exact(sock, size, payload):
            return (fds[0], fds[1], fds[2]), bytes(payload)
    _close(fds)
    return None


def _forward(sock: socket.socket, fds: tuple[int, int, int], payload: bytes) -> None:
    """One request to a supervisor, in the bridge's own framing."""
    data = MAGIC + len(payload).to_bytes(4, "big") + payload
    array = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    sent = sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array)])
    if sent < len(data):
        sock.sendall(data[sent:])


def _parse(payload: bytes) -> tuple[bytes, list[bytes], list[bytes]]:
    """``argc[:FD] NUL cwd NUL argv... NUL env...`` (the bridge refuses NUL inside any of
    them); ``FD``: see :func:`_box_fd`."""
    fields = payload.split(b"\0")
    argc = int(fields[0].partition(b":")[0])
    if argc < 1 or len(fields) < 2 + argc:
        raise ValueError("bad request")
    return fields[1], fields[2 : 2 + argc], fields[2 + argc :]


def _box_fd(payload: bytes) -> int:
    """The descriptor a boxed call's bubblewrap reports on (``argc:FD``), or -1: a pipe is
    put there, and the shell's end is reported ``unstarted N`` when bubblewrap exited without
    saying it started the command (its setup failed)."""
    head = payload[: payload.find(b"\0")]
    _, sep, fd = head.partition(b":")
    if not sep:
        return -1
    number = int(fd)
    if number < 3:
        raise ValueError("bad request")
    return number


def _close(fds: list[int] | tuple[int, ...]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _one_call(
    conn: socket.socket, fds: tuple[int, int, int], payload: bytes, subreaper: bool
) -> bool:
    """Run one request to its end; True when this supervisor took up waiting for another.

    Reusable only when the call ended clean — ``waitpid`` says no child is left, so nothing
    of one call meets the next. The helper hears "idle" before the status pipe closes (its
    EOF is what the bridge waits for), so the bridge's next call finds this one waiting."""
    reusable = True
    try:
        cwd, argv, env = _parse(payload)
        supervisor = Supervisor(fds, cwd, argv, env, subreaper, _box_fd(payload))
    except ValueError:
        os.write(fds[1], b"error 0 bad request\n")
        supervisor = None
    try:
        if supervisor is not None:
            reusable = supervisor.run() and not _reap()
        if reusable:
            os.chdir("/")  # an idle supervisor holds no call's folder
            conn.sendall(b"i")
        return reusable
    except OSError:
        return False
    finally:  # the status pipe's EOF tells the bridge this call's supervision is over
        if supervisor is not None:
            supervisor.close_box_status()
        output = fds[0] if supervisor is None else supervisor.output
        _close([fd for fd in (output, *fds[1:]) if fd >= 0])


def _supervise(conn: socket.socket, first: tuple[tuple[int, int, int], bytes]) -> None:
    """A supervisor's life (a fork of the helper): one call after another."""
    subreaper = _become_subreaper()
    request: tuple[tuple[int, int, int], bytes] | None = first
    while request is not None and _one_call(conn, *request, subreaper):
        request = _receive(conn)


class Helper:
    """The resident helper: keeps idle supervisors and hands each request to one (forking a
    new one when none is idle). Why a pool: forking a Python process costs more CPU than the
    shell it starts (page tables, copy-on-write faults), while handing a request to a waiting
    supervisor costs two socket messages."""

    MAX_IDLE = 2

    def __init__(self, bridge: socket.socket) -> None:
        self.bridge = bridge
        self.idle: list[tuple[int, socket.socket]] = []
        self.busy: dict[int, tuple[int, socket.socket]] = {}  # socket fd -> (pid, socket)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        self.poller = select.poll()
        self.poller.register(0, select.POLLIN | select.POLLHUP | select.POLLERR)
        self.poller.register(self.wake_r, select.POLLIN)
        self.subreaper = _become_subreaper()  # not inherited: each supervisor sets its own

    def _spawn(self, request: tuple[tuple[int, int, int], bytes]) -> int:
        """Fork a supervisor that starts with ``request``; its pid."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                # Nothing of the helper's: its socket to the bridge and to every other
                # supervisor (held here, they would hide the helper's end from them).
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)  # over the bridge's socket: 0, 1, 2 stay taken, so no
                os.close(devnull)  # descriptor a request brings can land on them
                _close([self.wake_r, self.wake_w, mine.detach()])
                _close([s.detach() for _, s in (*self.idle, *self.busy.values())])
                os.setsid()  # its own session: the bridge's last resort is killpg(this pid)
                _supervise(theirs, request)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        _close(request[0])
        self._busy(pid, mine)
        return pid

    def _end_orphans(self) -> None:
        """SIGKILL every child that is not one of our supervisors: what a call left behind
        after something killed its supervisor, re-parented to us (the call is over)."""
        ours = {pid for pid, _ in self.idle} | {pid for pid, _ in self.busy.values()}
        for pid in _children(os.getpid()):
            if pid not in ours:
                _kill(pid, signal.SIGKILL)

    def _busy(self, pid: int, sock: socket.socket) -> None:
        self.busy[sock.fileno()] = (pid, sock)
        self.poller.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)

    def _hand(self, request: tuple[tuple[int, int, int], bytes]) -> int:
        """The request to an idle supervisor (the newest), else to a new one; the pid."""
        while self.idle:
            pid, sock = self.idle.pop()
            try:
                _forward(sock, *request)
            except OSError:  # it died while idle
                sock.close()
                continue
            _close(request[0])
            self._busy(pid, sock)
            return pid
        return self._spawn(request)

    def _from_supervisor(self, fd: int) -> None:
        pid, sock = self.busy.pop(fd)
        self.poller.unregister(fd)
        try:
            word = sock.recv(1)
        except OSError:
            word = b""
        if word == b"i" and len(self.idle) < self.MAX_IDLE:
            self.idle.append((pid, sock))
        else:
            sock.close()  # it exited, or one idle too many: EOF makes it exit

    def serve(self) -> int:
        """One request at a time from the bridge, until EOF on stdin."""
        while True:
            # A supervisor's "idle" first: the bridge's next call then finds it idle.
            for fd, _ in sorted(self.poller.poll(), key=lambda e: e[0] == 0):
                if fd == self.wake_r:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except OSError:
                        pass
                    _reap()  # exited supervisors (their CPU then counts as the helper's)
                    if self.subreaper:
                        self._end_orphans()  # a supervisor killed: what it adopted, and so on
                elif fd in self.busy:
                    self._from_supervisor(fd)
                elif fd == 0:
                    request = _receive(self.bridge)
                    if request is None:
                        return 0
                    try:
                        pid = self._hand(request)
                    except OSError as e:
                        _close(request[0])
                        self.bridge.sendall(f"err cannot start a supervisor: {e}\n".encode())
                        continue
                    self.bridge.sendall(f"ok {pid}\n".encode())


if __name__ == "__main__":
    try:
        _prctl = _load_prctl()
        bridge = socket.socket(fileno=0)
        bridge.setblocking(True)
        code = Helper(bridge).serve()
    except (OSError, ValueError):
        code = 1
    os._exit(code)  # no interpreter teardown
