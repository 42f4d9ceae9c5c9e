"""The D-Bus side of the SNI tray: the watcher probe and the two interfaces the icon exports,
``org.kde.StatusNotifierItem`` (icon, tooltip, status, clicks) and ``com.canonical.dbusmenu``
(the menu).

Why apart from :mod:`tray.sni`: these classes are the protocol — method and property names and
signatures fixed by the specs, which dbus-fast reads from the annotations — while
:class:`~tray.sni.SniIcon` is the icon's behaviour (threads, the pystray-like surface the app
uses). Both interfaces only read their owner icon's state and hand events back to it; they run
on its D-Bus loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Protocol

from dbus_fast import BusType, Message, MessageType, PropertyAccess, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.annotations import DBusSignature
from dbus_fast.errors import DBusError
from dbus_fast.service import ServiceInterface, dbus_method, dbus_property, dbus_signal

from .dbusmenu import ROOT, Change, Layout, Props

WATCHER = "org.kde.StatusNotifierWatcher"
WATCHER_PATH = "/StatusNotifierWatcher"
ITEM_PATH = "/StatusNotifierItem"
MENU_PATH = "/MenuBar"
PIXMAP_SIZES = (16, 22, 24, 32, 48, 64)
log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 3.0


# The watcher's arrival: the bus daemon's NameOwnerChanged for it, with a new owner.
WATCHER_OWNER_RULE = (
    "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
    f"member='NameOwnerChanged',arg0='{WATCHER}'"
)


def bus_call(member: str, arg: str) -> Message:
    """A call to the bus daemon itself (``AddMatch``, ``NameHasOwner``) with one string."""
    return Message(
        destination="org.freedesktop.DBus",
        path="/org/freedesktop/DBus",
        interface="org.freedesktop.DBus",
        member=member,
        signature="s",
        body=[arg],
    )


def watcher_arrived(msg: Message) -> bool:
    """``msg`` says a (new) watcher took its name: the panel started or restarted."""
    return (
        msg.message_type == MessageType.SIGNAL
        and msg.member == "NameOwnerChanged"
        and bool(msg.body)
        and msg.body[0] == WATCHER
        and bool(msg.body[2])
    )


# D-Bus types (dbus-fast reads these annotations to build the introspection data).
Str = Annotated[str, DBusSignature("s")]
Int = Annotated[int, DBusSignature("i")]
UInt = Annotated[int, DBusSignature("u")]
Bool = Annotated[bool, DBusSignature("b")]
ObjPath = Annotated[str, DBusSignature("o")]
StrList = Annotated[list[str], DBusSignature("as")]
IntList = Annotated[list[int], DBusSignature("ai")]
Pixmaps = Annotated[list[list[Any]], DBusSignature("a(iiay)")]
ToolTip = Annotated[list[Any], DBusSignature("(sa(iiay)ss)")]
AnyValue = Annotated[Variant, DBusSignature("v")]
LayoutReply = Annotated[list[Any], DBusSignature("u(ia{sv}av)")]
GroupProps = Annotated[list[list[Any]], DBusSignature("a(ia{sv})")]
EventList = Annotated[list[list[Any]], DBusSignature("a(isvu)")]
UpdatedProps = Annotated[list[list[Any]], DBusSignature("a(ia{sv})")]
RemovedProps = Annotated[list[list[Any]], DBusSignature("a(ias)")]
ShowGroupReply = Annotated[list[Any], DBusSignature("aiai")]


class SniUnavailable(Exception):
    """No session bus, or no StatusNotifierWatcher on it; the message says which."""


class NoWatcherYet(SniUnavailable):
    """The session bus answers but no StatusNotifierWatcher is on it (yet).

    Why its own class: at login the tray often starts before the panel; this case, unlike a
    missing bus, can heal, so the app keeps watching the bus (:class:`PanelWatch`).
    """


def _variant_props(props: Props, names: Sequence[str] = ()) -> dict[str, Variant]:
    out: dict[str, Variant] = {}
    for key, value in props.items():
        if names and key not in names:
            continue
        if isinstance(value, bool):
            out[key] = Variant("b", value)
        elif isinstance(value, int):
            out[key] = Variant("i", value)
        else:
            out[key] = Variant("s", str(value))
    return out


async def find_watcher(timeout: float = CONNECT_TIMEOUT_S) -> str:
    """Why the SNI backend can be used (a sentence), or :class:`SniUnavailable`."""

    async def probe() -> str:
        try:
            bus = await MessageBus(bus_type=BusType.SESSION).connect()
        except Exception as e:
            raise SniUnavailable(f"no D-Bus session bus ({type(e).__name__}: {e})") from None
        try:
            reply = await bus.call(bus_call("NameHasOwner", WATCHER))
            if reply is None or reply.message_type != MessageType.METHOD_RETURN:
                raise SniUnavailable("the session bus did not answer NameHasOwner")
            if not reply.body[0]:
                raise NoWatcherYet(f"no {WATCHER} on the session bus")
            host = await bus.call(
                Message(
                    destination=WATCHER,
                    path=WATCHER_PATH,
                    interface="org.freedesktop.DBus.Properties",
                    member="Get",
                    signature="ss",
                    body=[WATCHER, "IsStatusNotifierHostRegistered"],
                )
            )
            hosted = (
                host is not None
                and host.message_type == MessageType.METHOD_RETURN
                and bool(host.body[0].value)
            )
            return f"{WATCHER} on the session bus" + (
                "" if hosted else " (no tray host registered yet: the icon shows when one does)"
            )
        finally:
            bus.disconnect()

    try:
        return await asyncio.wait_for(probe(), timeout)
    except TimeoutError:
        raise SniUnavailable("the D-Bus session bus did not answer in time") from None


def watcher_reason(timeout: float = CONNECT_TIMEOUT_S) -> str:
    """:func:`find_watcher` from synchronous code (a private loop, bounded by ``timeout``)."""
    return asyncio.run(find_watcher(timeout))


class PanelWatch:
    """Calls ``appeared`` once, from its own thread, when a StatusNotifierWatcher is on the bus.

    Why: a tray started at login before the panel would otherwise stay on a backend without a
    menu for the whole session. Event-driven (``NameOwnerChanged``, matched before the first
    ``NameHasOwner`` so no appearance falls between the two), so waiting costs no wake-ups.
    """

    def __init__(self, appeared: Callable[[], None]) -> None:
        self.appeared = appeared
        self.error: str | None = None  # why the watch ended without a panel, if it did
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()  # bound to the loop on first use, on its thread
        self._thread = threading.Thread(target=self._main, name="tray-panel-watch", daemon=True)

    def start(self) -> PanelWatch:
        self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop watching (idempotent); returns once the thread has ended or ``timeout``."""
        if self._loop.is_closed():
            return
        if self._thread.ident is None:  # never started
            self._loop.close()
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            self._loop.call_soon_threadsafe(self._stop)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _stop(self) -> None:
        self._stopped.set()

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._watch())
        except Exception as e:  # the bus went away: say so, the fallback stays
            self.error = f"{type(e).__name__}: {e}"
            log.info("stopped waiting for the panel: %s", self.error)
        finally:
            self._loop.close()

    async def _watch(self) -> None:
        bus = await MessageBus(bus_type=BusType.SESSION).connect()
        try:
            arrived = asyncio.Event()

            def handler(msg: Message) -> None:
                if (
                    msg.message_type == MessageType.SIGNAL
                    and msg.member == "NameOwnerChanged"
                    and msg.body
                    and msg.body[0] == WATCHER
                    and msg.body[2]
                ):
                    arrived.set()

            bus.add_message_handler(handler)
            await bus.call(
                Message(
                    destination="org.freedesktop.DBus",
                    path="/org/freedesktop/DBus",
                    interface="org.freedesktop.DBus",
                    member="AddMatch",
                    signature="s",
                    body=[
                        "type='signal',sender='org.freedesktop.DBus',"
                        "interface='org.freedesktop.DBus',member='NameOwnerChanged',"
                        f"arg0='{WATCHER}'"
                    ],
                )
            )
            reply = await bus.call(bus_call("NameHasOwner", WATCHER))
            if (
                reply is not None
                and reply.message_type == MessageType.METHOD_RETURN
                and reply.body[0]
            ):
                arrived.set()
            waits = [
                asyncio.ensure_future(arrived.wait()),
                asyncio.ensure_future(self._stopped.wait()),
            ]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
            if arrived.is_set() and not self._stopped.is_set():
                log.info("%s appeared on the session bus", WATCHER)
                self.appeared()
        finally:
            bus.disconnect()


class ExportedIcon(Protocol):
    """What the two interfaces read of their owner icon, and the two events they hand back.

    Why a Protocol: :class:`~tray.sni.SniIcon` (the one implementation) builds both interfaces
    from this module; naming its class here would make the two modules import each other.
    """

    @property
    def name(self) -> str: ...

    @property
    def shown_title(self) -> str:
        """The title as last announced (NewToolTip), set on the bus loop."""

    @property
    def shown_attention(self) -> bool:
        """Attention as last announced (NewStatus), set on the bus loop."""

    @property
    def pixmap_data(self) -> list[list[Any]]: ...

    @property
    def layout(self) -> Layout: ...

    @property
    def revision(self) -> int: ...

    @property
    def pending_change(self) -> Change: ...

    def activate(self) -> None: ...

    def menu_event(self, node_id: int, event_id: str) -> bool: ...


class StatusNotifierItem(ServiceInterface):
    """``org.kde.StatusNotifierItem``: icon, tooltip, status; a left click activates."""

    def __init__(self, owner: ExportedIcon) -> None:
        super().__init__("org.kde.StatusNotifierItem")
        self.owner = owner

    @dbus_property(access=PropertyAccess.READ)
    def Category(self) -> Str:
        return "ApplicationStatus"

    @dbus_property(access=PropertyAccess.READ)
    def Id(self) -> Str:
        return self.owner.name

    @dbus_property(access=PropertyAccess.READ)
    def Title(self) -> Str:
        return "omp A2A bridge"

    @dbus_property(access=PropertyAccess.READ)
    def Status(self) -> Str:
        return "NeedsAttention" if self.owner.shown_attention else "Active"

    @dbus_property(access=PropertyAccess.READ)
    def WindowId(self) -> Int:
        return 0

    @dbus_property(access=PropertyAccess.READ)
    def IconName(self) -> Str:
        return ""

    @dbus_property(access=PropertyAccess.READ)
    def IconPixmap(self) -> Pixmaps:
        return self.owner.pixmap_data

    @dbus_property(access=PropertyAccess.READ)
    def AttentionIconName(self) -> Str:
        return ""

    @dbus_property(access=PropertyAccess.READ)
    def AttentionIconPixmap(self) -> Pixmaps:
        return self.owner.pixmap_data  # the icon itself already shows the attention state

    @dbus_property(access=PropertyAccess.READ)
    def OverlayIconName(self) -> Str:
        return ""

    @dbus_property(access=PropertyAccess.READ)
    def ToolTip(self) -> ToolTip:
        return ["", [], "omp A2A bridge", self.owner.shown_title]

    @dbus_property(access=PropertyAccess.READ)
    def ItemIsMenu(self) -> Bool:
        return False  # a left click is Activate (open the page); the menu is on right click

    @dbus_property(access=PropertyAccess.READ)
    def Menu(self) -> ObjPath:
        return MENU_PATH

    @dbus_method()
    def Activate(self, x: Int, y: Int):
        self.owner.activate()

    @dbus_method()
    def SecondaryActivate(self, x: Int, y: Int):
        self.owner.activate()

    @dbus_method()
    def ContextMenu(self, x: Int, y: Int):
        pass  # hosts show the DBusMenu themselves

    @dbus_method()
    def Scroll(self, delta: Int, orientation: Str):
        pass

    @dbus_signal()
    def NewTitle(self):
        pass

    @dbus_signal()
    def NewIcon(self):
        return None

    @dbus_signal()
    def NewAttentionIcon(self):
        return None

    @dbus_signal()
    def NewToolTip(self):
        return None

    @dbus_signal()
    def NewStatus(self) -> Str:
        return "NeedsAttention" if self.owner.shown_attention else "Active"


class DBusMenu(ServiceInterface):
    """``com.canonical.dbusmenu``: the menu model as a layout the host renders."""

    def __init__(self, owner: ExportedIcon) -> None:
        super().__init__("com.canonical.dbusmenu")
        self.owner = owner

    @dbus_property(access=PropertyAccess.READ)
    def Version(self) -> UInt:
        return 3

    @dbus_property(access=PropertyAccess.READ)
    def TextDirection(self) -> Str:
        return "ltr"

    @dbus_property(access=PropertyAccess.READ)
    def Status(self) -> Str:
        return "notice" if self.owner.shown_attention else "normal"

    @dbus_property(access=PropertyAccess.READ)
    def IconThemePath(self) -> StrList:
        return []

    def _node(self, node_id: int, depth: int, names: Sequence[str]) -> list[Any]:
        layout = self.owner.layout
        node = layout.nodes[node_id]
        children = []
        if depth != 0:
            for child in node.children:
                sub = self._node(child, depth - 1, names)
                children.append(Variant("(ia{sv}av)", sub))
        return [node_id, _variant_props(node.props, names), children]

    @dbus_method()
    def GetLayout(self, parent_id: Int, depth: Int, property_names: StrList) -> LayoutReply:
        if parent_id not in self.owner.layout.nodes:
            raise DBusError("org.freedesktop.DBus.Error.InvalidArgs", f"no menu item {parent_id}")
        return [self.owner.revision, self._node(parent_id, depth, property_names)]

    @dbus_method()
    def GetGroupProperties(self, ids: IntList, property_names: StrList) -> GroupProps:
        nodes = self.owner.layout.nodes
        wanted = ids or list(nodes)
        return [[i, _variant_props(nodes[i].props, property_names)] for i in wanted if i in nodes]

    @dbus_method()
    def GetProperty(self, id: Int, name: Str) -> AnyValue:
        node = self.owner.layout.nodes.get(id)
        if node is None or name not in node.props:
            raise DBusError("org.freedesktop.DBus.Error.InvalidArgs", f"no property {name}")
        return _variant_props(node.props, (name,))[name]

    @dbus_method()
    def Event(self, id: Int, event_id: Str, data: AnyValue, timestamp: UInt):
        if not self.owner.menu_event(id, event_id):
            raise DBusError("org.freedesktop.DBus.Error.InvalidArgs", f"no menu item {id}")

    @dbus_method()
    def EventGroup(self, events: EventList) -> IntList:
        return [e[0] for e in events if not self.owner.menu_event(e[0], e[1])]

    @dbus_method()
    def AboutToShow(self, id: Int) -> Bool:
        return False  # the menu is always current: changes are pushed as they happen

    @dbus_method()
    def AboutToShowGroup(self, ids: IntList) -> ShowGroupReply:
        return [[], [i for i in ids if i not in self.owner.layout.nodes]]

    @dbus_signal()
    def ItemsPropertiesUpdated(self) -> Annotated[list[Any], DBusSignature("a(ia{sv})a(ias)")]:
        change = self.owner.pending_change
        return [
            [[i, _variant_props(p)] for i, p in change.updated],
            [[i, list(names)] for i, names in change.removed],
        ]

    @dbus_signal()
    def LayoutUpdated(self) -> Annotated[list[Any], DBusSignature("ui")]:
        return [self.owner.revision, ROOT]

    @dbus_signal()
    def ItemActivationRequested(self) -> Annotated[list[Any], DBusSignature("iu")]:
        return [ROOT, 0]
