"""A tray icon over D-Bus: StatusNotifierItem for the icon, DBusMenu for the menu (Linux).

Why: pystray's full-menu Linux backends need PyGObject, which has no wheels; its xorg fallback
has no menu and ignores clicks. KDE, Xfce, Cinnamon, MATE, GNOME (AppIndicator extension),
waybar... host tray icons through the StatusNotifierItem protocol, with menus over DBusMenu.
Both are plain D-Bus, so ``dbus-fast`` (pure Python, asyncio; the library desktop-notifier
already uses) gives the whole tray from ``pip install``.

:class:`SniIcon` has the small part of pystray's ``Icon`` interface :class:`~tray.app.TrayApp`
uses (``icon``/``title`` setters, ``update_menu``, ``notify``, ``run``/``stop``, ``visible``)
plus ``attention``; it takes the pure menu model (:mod:`tray.menu`) instead of pystray menus.
Threads: the D-Bus connection lives on its own asyncio loop in a daemon thread; every setter
hops onto it with ``call_soon_threadsafe``. Menu actions leave the loop for one worker thread
(in order, like pystray's callbacks on its UI thread), so a slow action never stalls D-Bus.
The D-Bus interfaces themselves and the watcher probe are :mod:`tray.sni_dbus`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from dbus_fast import BusType, Message, MessageType
from dbus_fast.aio import MessageBus
from dbus_fast.errors import DBusError
from PIL import Image

from .dbusmenu import Change, IdTable, Layout, build, diff
from .menu import Action, Item
from .notifier import body_text, server_reads_markup
from .sni_dbus import (
    CONNECT_TIMEOUT_S,
    ITEM_PATH,
    MENU_PATH,
    WATCHER,
    WATCHER_OWNER_RULE,
    WATCHER_PATH,
    DBusMenu,
    SniUnavailable,
    StatusNotifierItem,
    bus_call,
    watcher_arrived,
    watcher_reason,
)

__all__ = ["SniIcon", "SniUnavailable", "pixmaps", "watcher_reason"]

log = logging.getLogger(__name__)

PIXMAP_SIZES = (16, 22, 24, 32, 48, 64)


def pixmaps(image: Image.Image, sizes: Sequence[int] = PIXMAP_SIZES) -> list[list[Any]]:
    """``a(iiay)``: the image at several sizes, ARGB32 in network byte order (the SNI spec)."""
    rgba = image.convert("RGBA")
    out: list[list[Any]] = []
    for size in sizes:
        img = (
            rgba
            if rgba.size == (size, size)
            else rgba.resize((size, size), Image.Resampling.LANCZOS)
        )
        r, g, b, a = img.split()  # Pillow has no ARGB packer: reorder the bands
        out.append([size, size, Image.merge("RGBA", (a, r, g, b)).tobytes()])
    return out


class SniIcon:
    """The tray icon as a StatusNotifierItem; see the module docstring for the threads."""

    HAS_MENU = True
    HAS_NOTIFICATION = True
    HAS_DEFAULT_ACTION = True
    MODEL_MENU = True  # takes the pure menu model, not pystray menus
    HAS_ATTENTION = True

    def __init__(
        self,
        name: str,
        icon: Image.Image | None = None,
        title: str = "",
        menu: Callable[[], Sequence[Item]] | None = None,
        perform: Callable[[Action], None] | None = None,
    ) -> None:
        self.name = name
        self._icon = icon
        self._title = title
        self._menu = menu or (lambda: ())
        self._perform = perform or (lambda action: None)
        self.attention_state = False
        # What the panel is told: set on the loop just before NewStatus goes out, so a panel's
        # Get of Status never answers ahead of the signal (the setter runs on another thread).
        self.shown_attention = False
        self.shown_title = title  # the same for the tooltip's text
        self.visible = False
        self.revision = 1
        self.ids = IdTable()
        self.layout: Layout = build(self._menu(), self.ids)
        self.pixmap_data: list[list[Any]] = pixmaps(icon) if icon is not None else []
        self.pending_change = Change(relayout=False)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.bus: MessageBus | None = None
        self.item = StatusNotifierItem(self)
        self.dbus_menu = DBusMenu(self)
        self.service = f"org.kde.StatusNotifierItem-{os.getpid()}-1"
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._stop_event: asyncio.Event | None = None
        self._menu_dirty = False
        self._actions = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sni-action")
        self._tasks: set[asyncio.Future[None]] = set()
        self._lock = threading.Lock()
        self._early: list[tuple[str, str]] = []  # notifications asked for before the bus was up
        self._markup: bool | None = None  # the notification server reads body markup

    # -- the pystray-like surface TrayApp uses --------------------------------------------------

    @property
    def icon(self) -> Image.Image | None:
        return self._icon

    @icon.setter
    def icon(self, image: Image.Image) -> None:
        self._icon = image
        data = pixmaps(image)
        if self.loop is None:
            self.pixmap_data = data  # not on the bus yet: nobody to tell
        self._on_loop(lambda: self._set_pixmaps(data))

    @property
    def title(self) -> str:
        return self._title

    @title.setter
    def title(self, text: str) -> None:
        self._title = text
        self._on_loop(self._emit_title)

    @property
    def attention(self) -> bool:
        return self.attention_state

    @attention.setter
    def attention(self, value: bool) -> None:
        if value != self.attention_state:
            self.attention_state = value
            self._on_loop(self._emit_status)

    def update_menu(self) -> None:
        self._menu_dirty = True
        self._on_loop(self._refresh_menu)

    def notify(self, message: str, title: str | None = None) -> None:
        """A plain notification through ``org.freedesktop.Notifications`` (no actions).

        Before the connection is up they wait and go out once it is.
        """
        with self._lock:
            if self.bus is None or self.loop is None:
                self._early.append((message, title or ""))
                return
        asyncio.run_coroutine_threadsafe(self._notify(message, title or ""), self.loop)

    def remove_notification(self) -> None:
        pass

    def __call__(self) -> None:
        """A click on the icon (what ``Activate`` does)."""
        self.activate()

    def run(self, setup: Callable[[SniIcon], None] | None = None) -> None:
        """Connect, register with the watcher, run ``setup`` in a thread; block until stop."""
        self._thread = threading.Thread(target=self._thread_main, name="sni", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        threading.Thread(
            target=setup or (lambda icon: setattr(icon, "visible", True)),
            args=(self,),
            name="sni-setup",
            daemon=True,
        ).start()
        self._stopped.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self.loop is not None and self._stop_event is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._stop_event.set)
        else:
            self._stopped.set()
        self._actions.shutdown(wait=False, cancel_futures=True)

    # -- D-Bus side (the loop thread) -----------------------------------------------------------

    def _on_loop(self, fn: Callable[[], None]) -> None:
        loop = self.loop
        if loop is None or self._stopped.is_set():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed under us: we are stopping
            loop.call_soon_threadsafe(fn)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:
            self._error = e
        finally:
            self._ready.set()
            self._stopped.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        # Changes made before the loop existed were not published (nobody to tell yet).
        self.shown_attention, self.shown_title = self.attention_state, self._title
        self._stop_event = asyncio.Event()
        try:
            bus = await asyncio.wait_for(
                MessageBus(bus_type=BusType.SESSION).connect(), CONNECT_TIMEOUT_S
            )
        except Exception as e:
            raise SniUnavailable(f"no D-Bus session bus ({type(e).__name__}: {e})") from None
        # Whatever changed before the loop ran (updates then had nobody to reach) is read now.
        self.pixmap_data = pixmaps(self._icon) if self._icon is not None else []
        self.layout = build(self._menu(), self.ids)
        with self._lock:
            self.bus = bus
            early, self._early = self._early, []
        for message, title in early:
            self._tasks.add(task := asyncio.ensure_future(self._notify(message, title)))
            task.add_done_callback(self._tasks.discard)
        try:
            bus.export(ITEM_PATH, self.item)
            bus.export(MENU_PATH, self.dbus_menu)
            await bus.request_name(self.service)
            await self._match_watcher_restarts()
            await self._register()
            self._ready.set()
            disconnected = asyncio.ensure_future(bus.wait_for_disconnect())
            stopping = asyncio.ensure_future(self._stop_event.wait())
            done, _ = await asyncio.wait(
                {disconnected, stopping}, return_when=asyncio.FIRST_COMPLETED
            )
            for f in (disconnected, stopping):
                f.cancel()
            if stopping not in done:
                raise SniUnavailable("the D-Bus session bus went away")
        finally:
            if bus.connected:
                bus.disconnect()

    async def _register(self) -> None:
        assert self.bus is not None
        reply = await asyncio.wait_for(
            self.bus.call(
                Message(
                    destination=WATCHER,
                    path=WATCHER_PATH,
                    interface=WATCHER,
                    member="RegisterStatusNotifierItem",
                    signature="s",
                    body=[self.service],
                )
            ),
            CONNECT_TIMEOUT_S,
        )
        if reply is None or reply.message_type == MessageType.ERROR:
            why = reply.body[0] if reply is not None and reply.body else "no answer"
            raise SniUnavailable(f"{WATCHER} refused the icon: {why}")
        log.info("tray icon registered with %s as %s", WATCHER, self.service)

    async def _match_watcher_restarts(self) -> None:
        """A new watcher (panel restarted, user switched panels) gets the icon again."""
        assert self.bus is not None
        await self.bus.call(bus_call("AddMatch", WATCHER_OWNER_RULE))

        def handler(msg: Message) -> None:
            if watcher_arrived(msg):
                self._tasks.add(task := asyncio.ensure_future(self._reregister()))
                task.add_done_callback(self._tasks.discard)

        self.bus.add_message_handler(handler)

    async def _reregister(self) -> None:
        try:
            await self._register()
        except Exception as e:
            log.warning("tray icon not registered with the new watcher: %s", e)

    def _set_pixmaps(self, data: list[list[Any]]) -> None:
        self.pixmap_data = data
        self.item.NewIcon()
        self.item.NewAttentionIcon()
        self.item.emit_properties_changed({"IconPixmap": data, "AttentionIconPixmap": data})

    def _emit_title(self) -> None:
        self.shown_title = self._title
        self.item.NewTitle()
        self.item.NewToolTip()

    def _emit_status(self) -> None:
        self.shown_attention = self.attention_state
        self.item.NewStatus()
        self.item.emit_properties_changed({"Status": self.item.Status})

    def _refresh_menu(self) -> None:
        if not self._menu_dirty:
            return  # coalesced: a burst of update_menu() calls rebuilds once
        self._menu_dirty = False
        new = build(self._menu(), self.ids)
        # The tooltip and status set with (or before) the snapshot this menu was just built
        # from (the app sets them first) may still be queued behind it: they go out first, so
        # a panel that shows the new menu never reads an older tooltip or status. Read after
        # the build, or a snapshot taken in between would slip past. (Their own turn on the
        # loop sends the same values again.)
        if self.shown_title != self._title:
            self._emit_title()
        if self.shown_attention != self.attention_state:
            self._emit_status()
        change = diff(self.layout, new)
        self.layout = new
        if change.relayout:
            self.revision += 1
            self.dbus_menu.LayoutUpdated()
        elif not change.empty:
            self.pending_change = change
            self.dbus_menu.ItemsPropertiesUpdated()

    def menu_event(self, node_id: int, event_id: str) -> bool:
        """A host event; ``clicked`` on an enabled item with an action performs it."""
        node = self.layout.nodes.get(node_id)
        if node is None:
            return False  # an id from a menu that no longer exists: nothing to do
        if event_id == "clicked" and node.action is not None and node.enabled:
            self._submit(node.action)
        return True

    def activate(self) -> None:
        """Left click on the icon: the model's default action (open the approval page)."""
        if self.layout.default is not None:
            self._submit(self.layout.default)

    def _submit(self, action: Action) -> None:
        def run() -> None:
            try:
                self._perform(action)
            finally:
                self.update_menu()  # as pystray does after a menu callback

        with contextlib.suppress(RuntimeError):  # stopping: the executor is shut down
            self._actions.submit(run)

    async def _notifications(self, member: str, signature: str = "", body: Any = ()) -> Any:
        """One call to the desktop's notification server (``org.freedesktop.Notifications``)."""
        assert self.bus is not None
        message = Message(
            destination="org.freedesktop.Notifications",
            path="/org/freedesktop/Notifications",
            interface="org.freedesktop.Notifications",
            member=member,
            signature=signature,
            body=list(body),
        )
        return await asyncio.wait_for(self.bus.call(message), CONNECT_TIMEOUT_S)

    async def _notification_caps(self) -> Any:
        reply = await self._notifications("GetCapabilities")
        if reply is None or reply.message_type == MessageType.ERROR:
            raise DBusError("org.freedesktop.DBus.Error.Failed", "no notification server")
        return reply.body[0]

    async def _notify(self, message: str, title: str) -> None:
        assert self.bus is not None
        if self._markup is None:
            self._markup = await server_reads_markup(self._notification_caps)
        body = body_text(message, self._markup)
        try:
            reply = await self._notifications(
                "Notify", "susssasa{sv}i", ["omp A2A bridge", 0, "", title, body, [], {}, -1]
            )
        except Exception as e:
            log.info("notification not shown (%s): %s", e, message)
            return
        if reply is None or reply.message_type == MessageType.ERROR:
            log.info("notification not shown (no notification server): %s", message)
