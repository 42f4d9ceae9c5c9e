"""Bounded worker pools per kind of work, so a flood of one kind never starves another.

Before, every blocking tool shared asyncio's default executor (6 threads here): six long greps
made an ``ls`` of a three-entry directory wait 73 s. Now each kind has its own small pool:

* ``Pool.FILE`` — quick file operations (``ls``, ``read`` of a large file, ``write``, ``edit``);
* ``Pool.SEARCH`` — walks and searches (``grep``, ``find``); also bounds how many ``rg``
  processes run at once, since each one already uses every core;
* ``Pool.PROCESS`` — work that waits on child processes.

Work beyond a pool's size queues. The queue is visible: the time a call waited for a worker is
added to a per-call meter (:func:`queue_meter`), which the bridge writes into the audit's
``done`` record as ``queue_ms``. Cancelling the awaiting task while the work still waits in the
queue removes it from the queue (``concurrent.futures.Future.cancel`` succeeds for work that has
not started), so a cancelled call never runs later.

The pools are module-wide and thread-safe, shared by every bridge in the process (the tests run
several); their threads start lazily and are daemon-like executor threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class Pool(enum.StrEnum):
    FILE = "file"
    SEARCH = "search"
    PROCESS = "process"


def _default_sizes() -> dict[Pool, int]:
    cpus = os.cpu_count() or 2
    return {
        Pool.FILE: max(4, min(8, cpus * 2)),
        Pool.SEARCH: max(2, min(8, cpus)),
        Pool.PROCESS: max(4, min(16, cpus * 2)),
    }


SIZES: dict[Pool, int] = _default_sizes()

_executors: dict[Pool, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def executor(kind: Pool) -> ThreadPoolExecutor:
    ex = _executors.get(kind)
    if ex is None:
        with _lock:
            ex = _executors.get(kind)
            if ex is None:
                ex = _executors[kind] = ThreadPoolExecutor(
                    max_workers=SIZES[kind], thread_name_prefix=f"a2a-{kind.value}"
                )
    return ex


@dataclass(slots=True)
class QueueMeter:
    """Milliseconds one call spent waiting for a pool worker or slot (summed)."""

    ms: float = 0.0

    @property
    def queue_ms(self) -> int:
        return int(self.ms)


_meter: contextvars.ContextVar[QueueMeter | None] = contextvars.ContextVar(
    "a2a_queue_meter", default=None
)


@contextlib.contextmanager
def queue_meter() -> Iterator[QueueMeter]:
    """Measure queue waits of the pool work awaited inside this block (same task)."""
    meter = QueueMeter()
    token = _meter.set(meter)
    try:
        yield meter
    finally:
        _meter.reset(token)


def _add_wait(ms: float) -> None:
    meter = _meter.get()
    if meter is not None:
        meter.ms += ms


def _timed(submitted: float, fn: Callable[[], T]) -> tuple[float, T]:
    started = time.monotonic()
    return (started - submitted) * 1000, fn()


async def run(kind: Pool, fn: Callable[..., T], *args: Any) -> T:
    """Run blocking ``fn(*args)`` in the pool of this kind; queue when all its workers are busy.

    Cancelling the caller while the work is still queued drops it; once it runs, the caller's
    cancel returns at once and the work finishes in its thread (give it a way to stop early, as
    ``grep`` does by killing ``rg``).
    """
    loop = asyncio.get_running_loop()
    call = functools.partial(fn, *args)
    fut = loop.run_in_executor(executor(kind), _timed, time.monotonic(), call)
    waited, result = await fut
    _add_wait(waited)
    return result
