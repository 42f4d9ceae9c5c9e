"""The events sockets' one subscription: each published snapshot is turned into JSON once,
diffed once and serialised once, whatever the number of sockets.

Why: every socket used to render and serialise the whole snapshot itself (~30 KB with 64
sessions and 32 waiting calls, on every loop turn). Now the bridge coalesces publications
(:meth:`server.core.bridge.Bridge._changed`) and this feed hands each socket the same text:

- a **diff client** (``/api/events?diff=1``: the page, ``watch``) gets one full snapshot with
  its ``version``, then only diffs (:mod:`server.present.delta`), each naming its ``base``; it
  gets a full snapshot again whenever it asks (``full`` on the socket);
- a **full client** (no ``diff``: what the API always sent) gets the whole snapshot, with each
  waiting call's clock (``waiting_s``, ``remaining_s``), on every publication that changed
  something.

A publication that changed nothing a client can see sends nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..present import delta
from ..present.views import ViewMemo, snapshot_state, with_clock
from ..types import Snapshot

if TYPE_CHECKING:
    from ..api import BridgeApi


@dataclass(eq=False)
class FeedClient:
    """One events socket: where its text goes, which form it asked for, what it has seen."""

    send: Callable[[str], None]
    diffs: bool
    version: int = -1  # the last version it was sent; -1: it needs a full snapshot


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


class EventFeed:
    """Every events socket of one control API, behind a single snapshot subscription (taken
    while at least one socket is open)."""

    def __init__(self, api: BridgeApi) -> None:
        self.api = api
        self.clients: list[FeedClient] = []
        self.memo = ViewMemo()
        self.state: dict[str, Any] | None = None
        self.version = 0
        self._full: str | None = None  # the current state for diff clients, serialised once
        self._unsubscribe: Callable[[], None] | None = None

    def add(self, send: Callable[[str], None], diffs: bool) -> FeedClient:
        """A new socket: it gets a full snapshot with the next publication (attaching an
        approver publishes one at once) or when it asks (:meth:`resend`)."""
        client = FeedClient(send, diffs)
        self.clients.append(client)
        if self._unsubscribe is None:
            self._unsubscribe = self.api.subscribe(self.publish)
        return client

    def remove(self, client: FeedClient) -> None:
        if client in self.clients:
            self.clients.remove(client)
        if not self.clients and self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
            self.state, self._full = None, None  # the next first socket starts afresh
            self.memo = ViewMemo()

    def resend(self, client: FeedClient) -> None:
        """A diff client asked for the whole state (it missed a version, or it just wants it)."""
        if self.state is not None and client in self.clients:
            client.version = self.version
            client.send(self._full_text())

    def _full_text(self) -> str:
        if self._full is None:
            assert self.state is not None
            self._full = _dumps({**self.state, "version": self.version})
        return self._full

    def publish(self, snap: Snapshot) -> None:
        """On the bridge loop, for each published snapshot: one state, one diff, one text."""
        new = snapshot_state(snap, self.memo)
        old, base = self.state, self.version
        change = None if old is None else delta.diff(old, new)
        if change == {}:
            self.state = new  # the same content; its dicts are the memo's current ones
        else:
            self.state, self.version, self._full = new, base + 1, None
        version = self.version
        diff_text = full_text = None
        for client in list(self.clients):
            if self.state is None:
                return  # a send closed the last socket (the feed let go of the bridge)
            if client.version == version or client not in self.clients:
                continue  # it has this state already, or it is gone
            if not client.diffs:
                if full_text is None:
                    full_text = _dumps({**with_clock(new, time.time()), "version": version})
                client.send(full_text)
            elif change and client.version == base:
                if diff_text is None:
                    diff_text = _dumps({"version": version, "base": base, "diff": change})
                client.send(diff_text)
            else:
                client.send(self._full_text())
            client.version = version
