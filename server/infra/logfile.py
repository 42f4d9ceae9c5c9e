"""The bridge's log file: every line the running bridge prints on stderr, kept, rotated, 0600.

Why: under autostart nobody reads stderr; a moved port, a failed upstream server or the reason
a start stopped were gone with it. So a process that runs the bridge (``serve``, the tray, plain
``a2a-bridge``) copies its stderr, line by line, into a rotated file
(:class:`logging.handlers.RotatingFileHandler`) under ``platformdirs.user_log_dir`` (or
``$A2A_BRIDGE_LOG``). Copying the stream rather than adding a logging handler means the file
holds exactly what the terminal showed: the log lines (already rendered safe by
:mod:`server.infra.logs`), the start text, the exit line, the tray's backend lines.

Nothing here blocks the caller for long: a line is queued, and one writer thread (a
:class:`logging.handlers.QueueListener`) appends and rotates, so the event loop never waits on
the disk. Secrets: the file gets what stderr gets, which never holds one (the suite checks
both). Files are created 0600 in a 0700 folder; a file that cannot be opened leaves the bridge
running, saying so once on stderr.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_KEEP = 3
FLUSH_TIMEOUT_S = 1.0


class _PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """Rotates like its base; every generation is created 0600, never through a symlink.

    A write that fails (disk full, the folder removed) stops the file for good, said once on
    the real stderr: logging's own error report goes to ``sys.stderr``, which is copied here,
    so reporting every failure would feed itself."""

    failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        self.failed = True
        with contextlib.suppress(Exception):
            print(
                f"a2a-bridge: the log file {self.baseFilename} stopped (cannot write it)",
                file=sys.__stderr__,
                flush=True,
            )

    def _open(self) -> Any:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.baseFilename, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        return open(fd, "a", encoding="utf-8", errors="replace")


class LogFile:
    """A rotated file fed by one writer thread; :meth:`line` queues one line."""

    def __init__(self, path: str, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP):
        self.path = path
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        self.handler = _PrivateRotatingFile(
            path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8"
        )
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        self.queue: queue.Queue[logging.LogRecord] = queue.Queue()
        self.listener = logging.handlers.QueueListener(self.queue, self.handler)
        self.listener.start()

    def set_rotation(self, max_bytes: int, keep: int) -> None:
        """The config's ``log.max_bytes`` and ``log.keep`` (read after the file is open)."""
        self.handler.maxBytes, self.handler.backupCount = max_bytes, keep

    def line(self, text: str) -> None:
        self.queue.put(logging.makeLogRecord({"msg": text, "args": None}))

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        """Wait (bounded) until the writer has written what was queued."""
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        with contextlib.suppress(Exception):  # a file that failed is already reported
            self.handler.flush()

    def close(self) -> None:
        self.flush()
        with contextlib.suppress(Exception):
            self.listener.stop()
        with contextlib.suppress(Exception):
            self.handler.close()


class StderrCopy:
    """``sys.stderr`` for a bridge process: writes go to the real stream and, a whole line at
    a time, to the log file."""

    def __init__(self, stream: TextIO, log: LogFile) -> None:
        self.stream = stream
        self.log = log
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        # A closed terminal (or none: pythonw) loses the text; the file still gets it.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.stream.write(text)
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self.log.line(line)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.stream.flush()
        self.log.flush()

    def finish(self) -> None:
        with self._lock:
            rest, self._partial = self._partial, ""
        if rest:
            self.log.line(rest)

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno...: the real stream's
        return getattr(self.stream, name)


TAIL_BYTES = 256 * 1024  # read at most this much of each file for a tail


def tail_lines(path: str, limit: int, keep: int = 100) -> list[str]:
    """The last ``limit`` lines of the log, across its rotated generations (``path.1`` is the
    newest old one), oldest first; raw text (the caller renders it safe)."""
    lines: list[str] = []
    for name in [path, *(f"{path}.{n}" for n in range(1, keep + 1))]:
        try:
            with open(name, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - TAIL_BYTES))
                data = f.read()
        except FileNotFoundError:
            if name != path:
                break  # generations are numbered without gaps
            continue
        except OSError:
            break
        chunk = data.decode("utf-8", errors="replace").splitlines()
        if size > TAIL_BYTES and chunk:
            chunk = chunk[1:]  # the first line read may be cut
        lines = chunk + lines
        if len(lines) >= limit:
            break
    return lines[-limit:] if limit > 0 else []


_current: LogFile | None = None


def current() -> LogFile | None:
    """The log file this process writes, if any."""
    return _current


def set_rotation(max_bytes: int, keep: int) -> None:
    """Apply the config's rotation settings to this process's log file (none: nothing)."""
    if _current is not None:
        _current.set_rotation(max_bytes, keep)


def _swap(handler: logging.StreamHandler[Any], stream: Any) -> Any:
    """Point ``handler`` at ``stream``; the one it had. (Not ``setStream``: it flushes the old
    stream first, which raises when that stream was closed, e.g. a finished capture.)"""
    handler.acquire()
    try:
        old, handler.stream = handler.stream, stream
    finally:
        handler.release()
    return old


@contextlib.contextmanager
def copying_stderr(path: str, streams: list[logging.Handler]) -> Iterator[str | None]:
    """While inside, stderr (and the given stream handlers) also write to the log file at
    ``path``. Yields the path, or None when the file cannot be opened (said once on stderr)."""
    global _current
    try:
        log = LogFile(path)
    except OSError as e:
        print(f"a2a-bridge: no log file ({path}: {e.strerror or e})", file=sys.stderr)
        yield None
        return
    original = sys.stderr
    copy = StderrCopy(original, log)
    handlers = [h for h in streams if isinstance(h, logging.StreamHandler)]
    previous = [(h, _swap(h, copy)) for h in handlers]
    sys.stderr = copy
    _current = log
    try:
        yield path
    finally:
        _current = None
        sys.stderr = original
        for h, before in previous:
            _swap(h, before)
        copy.finish()
        log.close()
