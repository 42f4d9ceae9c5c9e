"""Two-phase JSON Lines audit log, written by one thread so records never interleave or vanish.

Callers only enqueue (no I/O on the IOLoop). The writer thread serialises, redacts, rotates
(``keep`` generations of ``max_bytes``) and appends each record with a single ``os.write`` on an
``O_APPEND`` descriptor, so a crash leaves at most the last line partial. A failed write never
fails a call: it is counted and warned about on the first and every 100th failure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("a2a-bridge")

REDACT_OVER = 120
ARGS_CAP = 1024
MAX_DEPTH = 32


def redact(value: Any, depth: int = 0) -> Any:
    """Long strings become ``<len:N,sha256:xxxxxxxx>`` at any depth; deep nesting is cut."""
    if depth > MAX_DEPTH:
        return "<max-depth>"
    if isinstance(value, str):
        if len(value) > REDACT_OVER:
            digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
            return f"<len:{len(value)},sha256:{digest}>"
        return value
    if isinstance(value, dict):
        return {str(k): redact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, depth + 1) for v in value]
    return value


def args_text(args: Any) -> str:
    """The audit form of a call's arguments: a redacted JSON string of at most 1 KiB."""
    try:
        text = json.dumps(redact(args), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = str(args)
    if len(text) > ARGS_CAP:
        text = text[:ARGS_CAP] + "…"
    return text


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    def __init__(
        self,
        path: str,
        max_bytes: int = 10 * 1024 * 1024,
        keep: int = 5,
        secret: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.secret = secret
        self.failures = 0
        self.written = 0
        # Called on the writer thread at the first failure and every 100th (e.g. to tell a UI).
        self.on_failure: Callable[[], None] = lambda: None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._fd: int | None = None
        self._size = 0
        self._thread = threading.Thread(target=self._run, name="a2a-audit", daemon=True)
        self._thread.start()

    # -- producer side (any thread) ---------------------------------------------------------

    def record(self, rec: dict[str, Any]) -> None:
        """Enqueue a record; ``args`` (if any) is redacted by the writer thread."""
        self._queue.put(rec)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything enqueued so far is written (or has failed)."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    # -- writer thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                break
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self._write(self._line(item))
            except Exception as e:
                self._failed(e)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _line(self, rec: dict[str, Any]) -> bytes:
        if "args" in rec:
            rec = dict(rec, args=args_text(rec["args"]))
        line = json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
        secret = self.secret()
        if secret and secret in line:
            line = line.replace(secret, "<token>")
        return (line + "\n").encode("utf-8", "replace")

    def _open(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), mode=0o700, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        st = os.fstat(self._fd)
        if st.st_mode & 0o077 and hasattr(os, "fchmod"):
            os.fchmod(self._fd, 0o600)
        self._size = st.st_size

    def _rotate(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for n in range(self.keep - 1, 0, -1):
            src = f"{self.path}.{n}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{n + 1}")
        if os.path.exists(self.path):
            os.replace(self.path, f"{self.path}.1")
        self._open()

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            self._open()
        if self._size > 0 and self._size + len(data) > self.max_bytes:
            self._rotate()
        assert self._fd is not None
        n = os.write(self._fd, data)
        self._size += n
        if n != len(data):
            raise OSError(f"short write ({n} of {len(data)} bytes)")
        self.written += 1

    def _failed(self, e: Exception) -> None:
        self.failures += 1
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None  # reopen on the next record: the disk may have recovered
        if self.failures == 1 or self.failures % 100 == 0:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            log.warning(
                "audit record not written to %s (%s); %d failure(s) so far",
                self.path,
                reason,
                self.failures,
            )
            try:
                self.on_failure()
            except Exception:
                log.exception("audit failure hook failed")


def read_records(path: str, keep: int = 100) -> list[dict[str, Any]]:
    """All records, oldest generation first; unparseable lines (a crash's tail) are skipped."""
    files = [f"{path}.{n}" for n in range(keep, 0, -1)] + [path]
    out: list[dict[str, Any]] = []
    for f in files:
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    with contextlib.suppress(ValueError):
                        rec = json.loads(line)
                        if isinstance(rec, dict):
                            out.append(rec)
        except FileNotFoundError:
            continue
    return out


def pair_calls(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join start/done records by id: one entry per call, oldest first; hung calls have no done."""
    calls: dict[str, dict[str, Any]] = {}
    for rec in records:
        cid = rec.get("id")
        if not isinstance(cid, str):
            continue
        entry = calls.setdefault(cid, {"id": cid, "start": None, "done": None})
        if rec.get("phase") in ("start", "done"):
            entry[rec["phase"]] = rec
    return list(calls.values())
