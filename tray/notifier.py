"""Notifications you can approve from: one per waiting call, with Approve and Deny.

Built on ``desktop-notifier``: on Linux ``org.freedesktop.Notifications`` over dbus-fast
(buttons where the server advertises ``actions``; a reply field where it advertises
``inline-reply``, KDE's, which becomes the deny reason); on Windows WinRT toasts. Where the
platform cannot (macOS without a signed app bundle, no notification server, a server without
actions) :meth:`ActionableNotifier.start` says why and the tray keeps its plain notification.

desktop-notifier needs a running asyncio loop for its callbacks, so the notifier owns one in a
daemon thread; the tray calls :meth:`show` / :meth:`withdraw` from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omp_a2a_bridge.server.vocab import Decision

if TYPE_CHECKING:  # imported lazily at run time: its backends load on first use
    from desktop_notifier import DesktopNotifier

log = logging.getLogger(__name__)

START_TIMEOUT_S = 3.0
MAX_LIVE = 5  # more waiting calls than this share the tray's plain "N calls waiting" text

Decide = Callable[[str, Decision, "str | None"], None]  # (call id, decision, reason)


@dataclass(frozen=True, slots=True)
class CallNotice:
    call_id: str
    title: str
    message: str


def body_text(text: str, markup: bool) -> str:
    """A notification body as the server will show it. A server that advertises
    ``body-markup`` (GNOME, KDE, dunst, mako, ...) reads ``<b>``, ``<a href=…>``, ``<img>`` and
    ``<span size=…>``: agent text there could hide the risky half of a command or add a link,
    so ``&``, ``<`` and ``>`` are escaped and the text shows exactly as written."""
    return html.escape(text, quote=False) if markup else text


async def server_reads_markup(call_capabilities: Callable[[], Any]) -> bool:
    """Whether ``GetCapabilities`` lists ``body-markup``; when it cannot be asked, assume so
    (an escaped ``&lt;`` reads oddly; unescaped markup can deceive)."""
    try:
        caps = await call_capabilities()
    except Exception:
        return True
    return not isinstance(caps, list | tuple) or "body-markup" in caps


class NotifierUnavailable(Exception):
    """This platform (or session) cannot show notifications with buttons; says why."""


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """What ``asyncio.run`` does at its end: cancel what is still pending (a notification
    being shown when the tray stops), let it unwind briefly, then close. A task left pending
    is destroyed later by the garbage collector, which logs an error wherever that happens
    (it failed an unrelated test's "no error in the log" once, 1 CI run in 3)."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    with contextlib.suppress(Exception):
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


class ActionableNotifier:
    """Notifications with Approve and Deny, one per waiting call, on a loop thread of their own.

    Why its own loop: desktop-notifier needs a running asyncio loop for its callbacks, and the
    tray's UI toolkit owns the main thread.
    """

    def __init__(
        self,
        decide: Decide,
        open_call: Callable[[str], None],
        app_name: str = "omp A2A bridge",
    ) -> None:
        self.decide = decide
        self.open_call = open_call
        self.app_name = app_name
        self.reply = False  # the server has a reply field: Deny can carry a reason
        self.markup = False  # the server reads markup in bodies: agent text is escaped
        self.loop: asyncio.AbstractEventLoop | None = None
        self._notifier: DesktopNotifier | None = None
        self._live: dict[str, str] = {}  # call id -> notification identifier (loop thread)
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._icon_path: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start the loop and ask the platform; a sentence saying what works, or raise."""
        started = threading.Event()
        outcome: list[BaseException | str] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            asyncio.set_event_loop(loop)

            async def probe() -> None:
                try:
                    outcome.append(await asyncio.wait_for(self._probe(), timeout))
                except TimeoutError:
                    outcome.append(NotifierUnavailable("the notification server did not answer"))
                except BaseException as e:
                    outcome.append(e)
                finally:
                    started.set()

            probing = loop.create_task(probe())
            try:
                loop.run_forever()
            finally:
                _finish(loop)
                del probing

        self._thread = threading.Thread(target=main, name="notifier", daemon=True)
        self._thread.start()
        if not started.wait(timeout + 1.0) or not outcome:
            self.close()
            raise NotifierUnavailable("the notification service did not answer in time")
        result = outcome[0]
        if isinstance(result, BaseException):
            self.close()
            if isinstance(result, NotifierUnavailable):
                raise result
            raise NotifierUnavailable(f"{type(result).__name__}: {result}") from None
        return result

    async def _probe(self) -> str:
        from desktop_notifier import Capability, DesktopNotifier
        from desktop_notifier.backends.dummy import DummyNotificationCenter

        notifier = DesktopNotifier(app_name=self.app_name, app_icon=self._icon())
        # desktop-notifier says which backend it chose only in this attribute
        if isinstance(notifier._backend, DummyNotificationCenter):  # noqa: SLF001
            raise NotifierUnavailable(
                "no notification center for this process (macOS needs a signed app bundle)"
            )
        try:
            caps = await notifier.get_capabilities()
        except Exception as e:
            raise NotifierUnavailable(
                f"no notification server ({type(e).__name__}: {e})".replace("\n", " ")
            ) from None
        if Capability.BUTTONS not in caps:
            raise NotifierUnavailable("the notification server shows no buttons")
        self.reply = Capability.REPLY_FIELD in caps
        # desktop-notifier does not report body-markup: ask its D-Bus proxy (Linux) directly.
        interface = getattr(getattr(notifier, "_backend", None), "interface", None)
        ask = getattr(interface, "call_get_capabilities", None)
        self.markup = ask is not None and await server_reads_markup(ask)
        self._notifier = notifier
        reply = ", a reply field for the deny reason" if self.reply else ""
        return f"Approve/Deny buttons{reply}"

    def _icon(self) -> Any:
        """The app's own icon for the notifications (a private temp file, removed at close)."""
        from desktop_notifier import Icon

        from .icons import IconState, render_icon

        try:
            fd, path = tempfile.mkstemp(prefix="omp-a2a-bridge-", suffix=".png")
            with os.fdopen(fd, "wb") as f:
                render_icon(IconState.ATTENTION, 0, 64).save(f, "PNG")
        except OSError:
            return None
        self._icon_path = path
        return Icon(path=Path(path))

    def close(self) -> None:
        """Withdraw what is still shown (briefly bounded), then stop the loop."""
        if self._icon_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._icon_path)
            self._icon_path = None
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if self._notifier is not None and self._live:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._clear_all(), loop).result(1.0)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)

    # -- from the tray (any thread) --------------------------------------------------------------

    @property
    def live(self) -> int:
        return len(self._live)

    def show(self, notice: CallNotice) -> None:
        self._submit(lambda: self._show(notice))

    def withdraw(self, call_id: str) -> None:
        self._submit(lambda: self._withdraw(call_id))

    def _submit(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``make()`` on the loop; the coroutine is created there, so a loop that stops
        first leaves nothing un-awaited behind."""
        loop = self.loop
        if loop is None or loop.is_closed() or self._notifier is None:
            return

        def start() -> None:
            task = loop.create_task(make())
            self._tasks.add(task)
            task.add_done_callback(self._done)

        with contextlib.suppress(RuntimeError):  # the loop closed: we are stopping
            loop.call_soon_threadsafe(start)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("notification not shown: %s", task.exception())

    # -- on the loop -----------------------------------------------------------------------------

    async def _show(self, notice: CallNotice) -> None:
        from desktop_notifier import Button, ReplyField, Urgency

        call_id = notice.call_id
        if call_id in self._live:
            return

        def decided(decision: Decision, reason: str | None = None) -> Callable[..., None]:
            def run(*_: object) -> None:
                self._live.pop(call_id, None)
                # The decision goes to the bridge off this loop (it waits for the bridge).
                threading.Thread(
                    target=self._decide_safely, args=(call_id, decision, reason), daemon=True
                ).start()

            return run

        def replied(text: str) -> None:
            self._live.pop(call_id, None)
            threading.Thread(
                target=self._decide_safely,
                args=(call_id, Decision.DENY, text.strip() or None),
                daemon=True,
            ).start()

        def clicked() -> None:
            self._live.pop(call_id, None)
            threading.Thread(target=self.open_call, args=(call_id,), daemon=True).start()

        notifier = self._notifier
        assert notifier is not None
        identifier = await notifier.send(
            body_text(notice.title, self.markup),
            body_text(notice.message, self.markup),
            urgency=Urgency.Critical,  # stays until answered or withdrawn
            buttons=(
                Button("Approve", decided(Decision.APPROVE), identifier="approve"),
                Button("Deny", decided(Decision.DENY), identifier="deny"),
            ),
            reply_field=ReplyField("Deny with a reason", "Deny", replied) if self.reply else None,
            on_clicked=clicked,
            on_dismissed=lambda: self._live.pop(call_id, None),
        )
        self._live[call_id] = identifier

    def _decide_safely(self, call_id: str, decision: Decision, reason: str | None) -> None:
        try:
            self.decide(call_id, decision, reason)
        except Exception as e:
            log.warning("the decision from the notification did not reach the bridge: %s", e)

    async def _withdraw(self, call_id: str) -> None:
        identifier = self._live.pop(call_id, None)
        if identifier is None or self._notifier is None:
            return
        with contextlib.suppress(Exception):  # already closed by the user or the server
            await self._notifier.clear(identifier)

    async def _clear_all(self) -> None:
        for call_id in list(self._live):
            await self._withdraw(call_id)
