"""Getting bridge snapshots onto the UI thread, coalesced.

The bridge publishes a snapshot on its own thread after every change; bursts (ten calls in a
millisecond) must not become ten menu rebuilds, and on AppIndicator every rebuild closes an open
menu. :class:`Dispatcher` keeps only the latest snapshot and applies it at most once per
``interval`` (the first change after a quiet period goes out at once). How a function reaches
the UI thread depends on the backend, see :func:`ui_poster`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
Post = Callable[[Callable[[], None]], None]


def ui_poster(backend: str) -> Post:
    """A function that runs a callable where the backend wants UI calls made.

    GTK/AppIndicator: pystray already marshals icon/menu updates with ``GLib.idle_add``; xorg
    forwards them as X client messages. macOS: nothing is marshalled by pystray, so hop with
    ``AppHelper.callAfter``. Windows: ``update_menu`` races the message loop, so serialise.
    """
    if backend == "darwin" or (backend == "" and sys.platform == "darwin"):
        from PyObjCTools import AppHelper

        return AppHelper.callAfter
    if backend == "win32":
        lock = threading.Lock()

        def serialised(fn: Callable[[], None]) -> None:
            with lock:
                fn()

        return serialised
    return lambda fn: fn()


class Dispatcher(Generic[T]):
    """Keeps only the latest snapshot and applies it on the UI thread at most once per interval.

    Why: a burst of bridge changes must not become a burst of menu rebuilds (AppIndicator
    closes an open menu on every rebuild).
    """

    def __init__(
        self, apply: Callable[[T], None], interval: float = 0.15, post: Post = lambda fn: fn()
    ) -> None:
        self.apply = apply
        self.interval = interval
        self.post = post
        self.applied = 0
        self._lock = threading.Lock()
        # One apply at a time: each flush runs on a timer thread of its own, and one that the
        # machine left unscheduled past ``interval`` was overtaken by the next; it then finished
        # last, leaving the UI on the older snapshot (a panel kept "NeedsAttention" after the
        # call was decided). Taken before the latest is read, so the waiting flush applies
        # whatever is newest once the slow one is done.
        self._applying = threading.Lock()
        self._latest: T | None = None
        self._scheduled = False
        self._last = 0.0
        self._closed = False

    def submit(self, item: T) -> None:
        """Called from any thread (the bridge's); never blocks on the UI."""
        with self._lock:
            self._latest = item
            if self._scheduled or self._closed:
                return
            self._scheduled = True
            wait = max(0.0, self._last + self.interval - time.monotonic())
        timer = threading.Timer(wait, self._flush)
        timer.daemon = True
        timer.start()

    def _flush(self) -> None:
        with self._applying:
            with self._lock:
                item = self._latest
                self._scheduled = False
                self._last = time.monotonic()
                if self._closed or item is None:
                    return
            self.applied += 1
            self.post(lambda: self.apply(item))

    def close(self) -> None:
        with self._lock:
            self._closed = True
