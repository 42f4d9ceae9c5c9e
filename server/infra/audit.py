"""Two-phase JSON Lines audit log, written by one thread so records never interleave or vanish.

Callers only append to a buffer (no I/O on the IOLoop). The writer thread wakes when the buffer
stops being empty, lingers a few milliseconds so a burst becomes one batch (one wake-up per
batch instead of two per call), then serialises, redacts, rotates (``keep`` generations of
``max_bytes``) and appends whole lines with ``os.write`` on an ``O_APPEND`` descriptor, so a
crash leaves at most the last line partial. While records keep coming it stays awake, looking
again every linger, so a caller wakes it only when it sleeps idle (not once per batch). A failed
write never fails a call: it is counted and warned about on the first and every 100th failed
record.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

from ..present.secrets import absent_from_json, remember, scrub_value
from .auditread import pair_calls, read_records, recent_calls  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

REDACT_OVER = 120
ARGS_CAP = 1024
MAX_DEPTH = 32
# A whole record (one line, newline included) never exceeds this, whatever a client sends, so
# no client can rotate the history away with a few huge calls.
RECORD_CAP = 4096
FIELD_CAP = 200  # characters of any other client-controlled string field (tool, client, ...)
# Arguments recorded verbatim (up to the record cap) rather than hashed: what a human must be
# able to read afterwards to know what ran. Content fields (write.content, edit strings) are not.
VERBATIM_ARGS: dict[str, tuple[str, ...]] = {"bash": ("command",)}


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def redact(value: Any, depth: int = 0) -> Any:
    """Long strings become ``<len:N,sha256:xxxxxxxx>`` at any depth; deep nesting is cut."""
    if depth > MAX_DEPTH:
        return "<max-depth>"
    if isinstance(value, str):
        if len(value) > REDACT_OVER:
            return f"<len:{len(value)},sha256:{_digest(value)}>"
        return value
    if isinstance(value, dict):
        return {redact(str(k), depth): redact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, depth + 1) for v in value]
    return value


# ``json.dumps`` with options builds a new encoder per call; two records per call make that
# hot. The same options, built once: the very same text.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _plain_encoder() -> Callable[[Any], str]:
    """``_ENCODE`` for values :func:`_plain` vetted, without its per-call set-up: the C
    encoder ``JSONEncoder.encode`` builds for every value, built once with the same options.
    It keeps no circular-reference memo (``markers``), which a vetted value needs none of:
    only JSON types, at most ``MAX_DEPTH`` deep, so no cycle. Without the C encoder (another
    Python), ``_ENCODE`` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is not None:
        sample = {"a": [1, 2.5, None, True, 'é\n"\\'], "b": {}}
        with contextlib.suppress(Exception):  # another signature in another Python: skip it
            basestring = json.encoder.encode_basestring
            encode = make(None, None, basestring, None, ":", ",", False, False, True)
            if "".join(encode(sample, 0)) == _ENCODE(sample):
                return lambda value: "".join(encode(value, 0))
    return _ENCODE


_ENCODE_PLAIN = _plain_encoder()


def _dumps(value: Any) -> str:
    try:
        return _ENCODE(value)
    except (TypeError, ValueError):
        return str(value)


def _encoded_len(text: str) -> int:
    """Bytes ``text`` takes inside a JSON line (escapes included), as the writer encodes it."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "replace")) - 2


def _longest_head(text: str, fits: Callable[[str], bool], limit: int) -> str:
    """The longest ``text[:n]`` (n <= limit) for which ``fits`` holds (binary search)."""
    lo, hi = 0, min(len(text), max(limit, 0))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(text[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def fit_text(text: str, budget: int, marker: str = "…") -> str:
    """``text``, or its longest head that fits ``budget`` JSON-line bytes followed by ``marker``."""
    if _encoded_len(text) <= budget:
        return text
    head = _longest_head(text, lambda h: _encoded_len(h + marker) <= budget, budget)
    return head + marker


def args_text(args: Any, tool: str = "", budget: int = ARGS_CAP) -> str:
    """The audit form of a call's arguments: redacted JSON text of at most 1 KiB.

    The tool's verbatim fields (``bash``'s ``command``) are kept in full up to ``budget``
    JSON-line bytes; a longer one keeps its head and ends with its length and hash.
    """
    verbatim = VERBATIM_ARGS.get(tool, ())
    if not (verbatim and isinstance(args, dict)):
        text = _dumps(redact(args))
        return text[:ARGS_CAP] + "…" if len(text) > ARGS_CAP else text
    red: dict[str, Any] = {}
    for k, v in args.items():
        if k in verbatim and isinstance(v, str):
            red[k] = v  # placeholder, sized below
        else:
            red[redact(str(k))] = redact(v, 1)
    for k in verbatim:
        v = args.get(k)
        if not isinstance(v, str):
            continue
        if _encoded_len(_dumps(red)) <= budget:
            break
        marker = f"…<len:{len(v)},sha256:{_digest(v)}>"

        def fits(head: str, k: str = k, marker: str = marker) -> bool:
            return _encoded_len(_dumps({**red, k: head + marker})) <= budget

        red[k] = _longest_head(v, fits, budget) + marker
    return _dumps(red)


_SCALARS = (int, float, bool, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    """:func:`redact` would leave ``value`` as it is (its JSON the same text): no string
    longer than ``REDACT_OVER`` (keys included), nothing deeper than ``MAX_DEPTH``, only JSON
    types and string keys."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, str):
        return len(value) <= REDACT_OVER
    if isinstance(value, dict):
        for k, v in value.items():
            if not (isinstance(k, str) and len(k) <= REDACT_OVER and _plain(v, depth + 1)):
                return False
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v, depth + 1) for v in value)
    return isinstance(value, _SCALARS)


def plain_line(rec: dict[str, Any], cap: int = RECORD_CAP) -> str | None:
    """:func:`cap_record`'s line for a record capping leaves as it is, else None.

    Why: nearly every record is such a record (short fields, short arguments); the writer
    serialises it once here and checks it for secrets with :func:`absent_from_json`, instead
    of rebuilding it string by string (``scrub_value``), redacting its arguments and walking
    it again in :func:`cap_record`: the same line at a third of the cost.
    """
    for k, v in rec.items():
        if k == "args":
            continue
        if isinstance(v, str):
            if len(v) > FIELD_CAP:
                return None
        elif not isinstance(v, _SCALARS):
            return None
    fast = rec
    if "args" in rec:
        args = rec["args"]
        if str(rec.get("tool", "")) in VERBATIM_ARGS or not _plain(args):
            return None
        text = _ENCODE_PLAIN(args)
        if len(text) > ARGS_CAP:
            return None
        fast = dict(rec, args=text)
    line = _ENCODE_PLAIN(fast)
    if len(line) * 4 < cap or len(line.encode("utf-8", "replace")) < cap:
        return line
    return None


def cap_record(rec: dict[str, Any], cap: int = RECORD_CAP) -> str:
    """One JSON line (no newline) of at most ``cap - 1`` bytes: every field capped."""
    # Fast path (nearly every record): short fields and a line that already fits.
    if all(
        k == "args" or isinstance(v, _SCALARS) or (isinstance(v, str) and len(v) <= FIELD_CAP)
        for k, v in rec.items()
    ):
        fast = rec
        if "args" in rec:
            fast = dict(rec, args=args_text(rec["args"], str(rec.get("tool", "")), cap))
        line = _dumps(fast)
        if len(line) * 4 < cap or len(line.encode("utf-8", "replace")) < cap:
            return line
    out: dict[str, Any] = {}
    for k, v in rec.items():
        if k != "args" and isinstance(v, str) and len(v) > FIELD_CAP:
            v = v[: FIELD_CAP - 1] + "…"
        elif k != "args" and not isinstance(v, str | int | float | bool | type(None)):
            v = fit_text(_dumps(v), FIELD_CAP)
        out[k] = v
    if "args" not in rec:
        return _dumps(out)
    out["args"] = ""
    budget = cap - 1 - len(_dumps(out).encode("utf-8", "replace"))
    out["args"] = fit_text(args_text(rec["args"], str(rec.get("tool", "")), budget), budget)
    return _dumps(out)


# Refusals that cost the agent nothing: nothing ran and no human was asked or decided. Past
# FULL_PER_WINDOW of them from one machine in WINDOW_S, the rest of the window's are counted
# into one "repeated" record per (machine, outcome, decided_by) instead of a start/done pair
# each, so a flood of them cannot rotate the record of what ran out of the log.
FOLDABLE = frozenset(["no_approver", "not_exposed", "limit", "paused", "denied"])
FULL_PER_WINDOW = 32
WINDOW_S = 60.0
HOLD_MAX = 1024  # starts held back one batch at most (more: written at once)
REPEAT_TOOLS = 16  # tool names one "repeated" record counts by name (the rest: "other")


class RefusalCounter:
    """The writer thread's count of cheap refusals (see :data:`FOLDABLE`), per machine.

    Only a start and its done found in the same batch are folded: a done alone would leave
    its start looking like a call that never ended. A call that ran (``ok``, ``error``),
    waited for a human (``timeout``, ``cancelled``) or was decided by one (``decided_by``
    ``user``) is never folded.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._windows: dict[str, tuple[float, int]] = {}  # machine -> (window start, full)
        self._repeats: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._held: list[dict[str, Any]] = []  # starts held back one batch (see fold)

    @staticmethod
    def foldable(done: dict[str, Any]) -> bool:
        return (
            done.get("phase") == "done"
            and done.get("outcome") in FOLDABLE
            and done.get("decided_by") in ("policy", "rule")
            and done.get("isError") is True
        )

    def fold(self, batch: list[dict[str, Any]], final: bool = False) -> list[dict[str, Any]]:
        """The batch less the refusals counted; the repeats of closed windows appended.

        A start whose done is not in the batch is held back for one batch (the writer may
        take a batch between a refusal's two records: ~6% of a flood's calls, measured, would
        escape counting). Held once only, and never at a flush or the end (``final``), which
        also writes every count so far.
        """
        now = self.clock()
        closed = self.due(now)  # before this batch opens a new window on the same key
        held, self._held = self._held, []
        if held:
            batch = held + batch
        starts = {r.get("id") for r in batch if r.get("phase") == "start"}
        folded: set[Any] = set()
        for rec in batch:
            if not (self.foldable(rec) and rec.get("id") in starts):
                continue
            machine = str(rec.get("machine", ""))
            began, full = self._windows.get(machine, (now, 0))
            if now - began >= WINDOW_S:
                began, full = now, 0
            if full < FULL_PER_WINDOW:
                self._windows[machine] = (began, full + 1)
                continue
            self._windows[machine] = (began, full)
            folded.add(rec.get("id"))
            self._count(machine, rec)
        kept = [r for r in batch if r.get("id") not in folded] if folded else batch
        if final:
            return kept + closed + self.due(now, everything=True)
        ended = {r.get("id") for r in kept if r.get("phase") != "start"}
        was_held = {id(r) for r in held}
        hold = [
            r
            for r in kept
            if r.get("phase") == "start" and r.get("id") not in ended and id(r) not in was_held
        ]
        if hold and len(hold) <= HOLD_MAX:
            holding = {id(r) for r in hold}
            kept = [r for r in kept if id(r) not in holding]
            self._held = hold
        return kept + closed

    def _count(self, machine: str, rec: dict[str, Any]) -> None:
        key = (machine, str(rec.get("outcome")), str(rec.get("decided_by")))
        rep = self._repeats.get(key)
        if rep is None:
            rep = self._repeats[key] = {
                "ts": "",
                "phase": "repeated",
                "machine": machine,
                "outcome": key[1],
                "decided_by": key[2],
                "count": 0,
                "first": rec.get("ts"),
                "last": rec.get("ts"),
                "tools": {},
                "sessions": 0,
                "_sids": set(),
            }
        rep["count"] += 1
        rep["last"] = rec.get("ts")
        tool, tools = str(rec.get("tool", ""))[:40], rep["tools"]
        if tool not in tools and len(tools) >= REPEAT_TOOLS:
            tool = "other"
        tools[tool] = tools.get(tool, 0) + 1
        sids = rep["_sids"]
        if len(sids) < 1024:
            sids.add(rec.get("sid"))
        rep["sessions"] = len(sids)

    def due(self, now: float | None = None, everything: bool = False) -> list[dict[str, Any]]:
        """The "repeated" records whose machine's window closed (all of them: ``everything``)."""
        now = self.clock() if now is None else now
        out: list[dict[str, Any]] = []
        for key in list(self._repeats):
            began, _ = self._windows.get(key[0], (now, 0))
            if everything or now - began >= WINDOW_S:
                rep = self._repeats.pop(key)
                rep.pop("_sids")
                rep["ts"] = utc_now()
                tools = sorted(rep["tools"].items(), key=lambda kv: (-kv[1], kv[0]))
                rep["tools"] = ", ".join(f"{name} {n}" for name, n in tools)
                out.append(rep)
        return out

    def next_due(self) -> float | None:
        """Seconds until the first open window closes (0: a start is held back), or None when
        nothing is counted."""
        if self._held:
            return 0.0
        if not self._repeats:
            return None
        now = self.clock()
        return max(
            0.0,
            min(self._windows.get(k[0], (now, 0))[0] + WINDOW_S - now for k in self._repeats),
        )


_second: list[Any] = [None, ""]  # [whole second, its "YYYY-MM-DDTHH:MM:SS" text]


def utc_now() -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2026-12-03T01:02:03.456Z``.

    Two records per call make this hot; the date part is formatted once per second.
    """
    now = time.time()
    sec = int(now)
    if _second[0] != sec:
        _second[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _second[0] = sec
    return f"{_second[1]}.{int((now - sec) * 1000):03d}Z"


class AuditLog:
    """The two-phase JSONL audit log: callers append, one writer thread writes.

    Why one writer: records never interleave or vanish, and no call waits on disk I/O on the
    loop; a failed write is counted and reported, never a failed call.
    """

    def __init__(
        self,
        path: str,
        max_bytes: int = 10 * 1024 * 1024,
        keep: int = 5,
        secret: Callable[[], str | None] = lambda: None,
        linger_s: float = 0.005,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.secret = secret
        self._registered: str | None = None
        self.linger_s = linger_s
        self.failures = 0
        self.written = 0
        # Called on the writer thread at the first failure and every 100th (e.g. to tell a UI).
        self.on_failure: Callable[[], None] = lambda: None
        self._cond = threading.Condition()
        self._buffer: list[dict[str, Any]] = []
        self._flush_waiters: list[threading.Event] = []
        self._closing = False
        # True while the writer waits with nothing to do (untimed): only then must a record
        # wake it. Read and written under ``_cond``.
        self._idle = False
        self._fd: int | None = None
        self._size = 0
        self._regular = True
        self._folder = RefusalCounter()  # the writer thread's alone
        self._thread = threading.Thread(target=self._run, name="a2a-audit", daemon=True)
        self._thread.start()

    # -- producer side (any thread) ---------------------------------------------------------

    def record(self, rec: dict[str, Any]) -> None:
        """Buffer a record; ``args`` (if any) is redacted by the writer thread."""
        with self._cond:
            self._buffer.append(rec)
            # Awake (lingering, writing, or looking again in a moment), the writer finds it
            # without a wake-up: the wake-up (a futex call, and the GIL handed to the writer)
            # was paid by the loop thread: 2-4 us per sequential call (docs/design/performance.md).
            if self._idle:
                self._idle = False
                self._cond.notify()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything recorded so far is written (or has failed)."""
        done = threading.Event()
        with self._cond:
            self._flush_waiters.append(done)
            self._cond.notify()
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)

    # -- writer thread --------------------------------------------------------------------

    def _run(self) -> None:
        awake = False  # the last batch wrote something: more is likely, look again soon
        while True:
            lingered = False
            with self._cond:
                if awake and not (self._buffer or self._flush_waiters or self._closing):
                    # Traffic: look again after a linger instead of asking callers to wake
                    # us (a flush or close still wakes us at once).
                    self._cond.wait(self.linger_s)
                    lingered = True
                while not (self._buffer or self._flush_waiters or self._closing):
                    self._idle = True  # nothing came: sleep until a record wakes us
                    due = self._folder.next_due()  # or until a counted window closes
                    if due is not None and due <= 0:
                        break
                    self._cond.wait(due)
                self._idle = False
                urgent = bool(self._flush_waiters) or self._closing
            if not urgent and self.linger_s > 0 and not lingered:
                time.sleep(self.linger_s)  # let a burst gather into one batch
            with self._cond:
                batch, self._buffer = self._buffer, []
                waiters, self._flush_waiters = self._flush_waiters, []
                done = self._closing and not batch
            # A flush or the end writes what was counted so far; otherwise a closed window.
            batch = self._folder.fold(batch, final=bool(waiters) or self._closing)
            if batch:
                self._write_batch(batch)
            awake = bool(batch) and self.linger_s > 0
            for w in waiters:
                w.set()
            if done:
                break
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _write_batch(self, batch: list[dict[str, Any]]) -> None:
        lines: list[bytes] = []
        for rec in batch:
            try:
                lines.append(self._line(rec))
            except Exception as e:  # an unserialisable record must not take the batch down
                self._failed(e, 1)
        written = 0
        chunk: list[bytes] = []
        pending = 0  # bytes in chunk
        try:
            if self._fd is None:
                self._open()
            for data in lines:
                if (
                    self._regular
                    and self._size + pending > 0
                    and self._size + pending + len(data) > self.max_bytes
                ):
                    written += self._write_chunk(chunk)
                    chunk, pending = [], 0
                    self._rotate()
                chunk.append(data)
                pending += len(data)
            written += self._write_chunk(chunk)
        except Exception as e:
            self._failed(e, len(lines) - written)
        self.written += written

    def _line(self, rec: dict[str, Any]) -> bytes:
        # Redact before cutting: a secret cut by a cap would leave its head in the line.
        secret = self.secret()
        if secret and secret != self._registered:
            remember(secret, "<token>")
            self._registered = secret
        line = plain_line(rec)
        if line is None or not absent_from_json(line):  # the whole way
            line = cap_record(scrub_value(rec))
        if secret and secret in line:
            line = line.replace(secret, "<token>")
        return (line + "\n").encode("utf-8", "replace")

    def _open(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), mode=0o700, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        st = os.fstat(self._fd)
        self._regular = stat.S_ISREG(st.st_mode)  # only a regular file is ever rotated
        # Tighten a loose existing log, but never touch a device (e.g. /dev/full in a test).
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077 and hasattr(os, "fchmod"):
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

    def _write_chunk(self, chunk: list[bytes]) -> int:
        """Append whole lines with one write; returns how many lines landed."""
        if not chunk:
            return 0
        assert self._fd is not None
        data = b"".join(chunk)
        n = os.write(self._fd, data)
        self._size += n
        if n != len(data):
            raise OSError(f"short write ({n} of {len(data)} bytes)")
        return len(chunk)

    def _failed(self, e: Exception, count: int) -> None:
        before = self.failures
        self.failures += count
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None  # reopen on the next batch: the disk may have recovered
        if before == 0 or before // 100 != self.failures // 100:
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
