"""A private D-Bus session bus and the desktop's side of the protocols, written with dbus-fast.

``PrivateBus`` runs a real ``dbus-daemon`` (session type, no service activation, so nothing on
the machine can answer in place of the fakes). ``FakeWatcher`` is the panel: it owns
``org.kde.StatusNotifierWatcher``, lets items register, and as the host reads their properties
and menu layout and sends the clicks a host sends. ``FakeNotifications`` is a notification
server: it records ``Notify``/``CloseNotification`` and emits ``ActionInvoked`` and KDE's
``NotificationReplied``. Each runs its own asyncio loop in a thread; tests call plain methods.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from typing import Annotated, Any

from dbus_fast import Message, MessageType, PropertyAccess, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.annotations import DBusSignature
from dbus_fast.service import ServiceInterface, dbus_method, dbus_property, dbus_signal

from .helpers import WAIT_S, wait_for

Str = Annotated[str, DBusSignature("s")]
UInt = Annotated[int, DBusSignature("u")]
Int = Annotated[int, DBusSignature("i")]
Bool = Annotated[bool, DBusSignature("b")]
StrList = Annotated[list[str], DBusSignature("as")]
Hints = Annotated[dict[str, Variant], DBusSignature("a{sv}")]
ServerInfo = Annotated[list[str], DBusSignature("ssss")]
TwoU = Annotated[list[int], DBusSignature("uu")]
US = Annotated[list[Any], DBusSignature("us")]

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={path}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


class PrivateBus:
    """``dbus-daemon`` on a socket in a temp dir; ``address`` goes in DBUS_SESSION_BUS_ADDRESS."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="a2a-dbus-")
        path = os.path.join(self.dir, "bus")
        conf = os.path.join(self.dir, "session.conf")
        with open(conf, "w") as f:
            f.write(BUS_CONFIG.format(path=path))
        self.proc = subprocess.Popen(
            ["dbus-daemon", f"--config-file={conf}", "--nofork", "--nopidfile", "--print-address"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            raise RuntimeError("dbus-daemon did not start")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class LoopThread:
    """An asyncio loop in a daemon thread; ``run(coro)`` from the test thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], Any]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


async def _connect(address: str) -> MessageBus:
    return await MessageBus(bus_address=address).connect()


async def _call(bus: MessageBus, **kw: Any) -> Any:
    reply = await bus.call(Message(**kw))
    assert reply is not None
    if reply.message_type == MessageType.ERROR:
        raise RuntimeError(f"{reply.error_name}: {reply.body}")
    return reply.body


# -- the panel: StatusNotifierWatcher + host ---------------------------------------------------


class _Watcher(ServiceInterface):
    def __init__(self, owner: FakeWatcher) -> None:
        super().__init__("org.kde.StatusNotifierWatcher")
        self.owner = owner

    @dbus_method()
    def RegisterStatusNotifierItem(self, service: Str):
        if self.owner.refuse:
            from dbus_fast.errors import DBusError

            raise DBusError("org.freedesktop.DBus.Error.Failed", "this panel refuses icons")
        self.owner.items.append(service)
        self.StatusNotifierItemRegistered(service)

    @dbus_method()
    def RegisterStatusNotifierHost(self, service: Str):
        pass

    @dbus_property(access=PropertyAccess.READ)
    def RegisteredStatusNotifierItems(self) -> StrList:
        return list(self.owner.items)

    @dbus_property(access=PropertyAccess.READ)
    def IsStatusNotifierHostRegistered(self) -> Bool:
        return True

    @dbus_property(access=PropertyAccess.READ)
    def ProtocolVersion(self) -> Int:
        return 0

    @dbus_signal()
    def StatusNotifierItemRegistered(self, service: str) -> Str:
        return service


class FakeWatcher:
    """The panel side of StatusNotifierItem + DBusMenu, as a desktop would speak it."""

    ITEM = "org.kde.StatusNotifierItem"
    MENU = "com.canonical.dbusmenu"

    def __init__(self, address: str, refuse: bool = False) -> None:
        self.address = address
        self.refuse = refuse
        self.items: list[str] = []
        self.signals: list[tuple[str, str, list[Any]]] = []  # (interface, member, body)
        self.replied: dict[int, int] = {}  # a reply's serial -> how many signals came before it
        self.t = LoopThread()
        self.bus: MessageBus = self.t.run(self._start())

    async def _start(self) -> MessageBus:
        bus = await _connect(self.address)
        bus.export("/StatusNotifierWatcher", _Watcher(self))
        await bus.request_name("org.kde.StatusNotifierWatcher")
        for iface in (self.ITEM, self.MENU):
            await _call(
                bus,
                destination="org.freedesktop.DBus",
                path="/org/freedesktop/DBus",
                interface="org.freedesktop.DBus",
                member="AddMatch",
                signature="s",
                body=[f"type='signal',interface='{iface}'"],
            )

        def on_message(msg: Message) -> None:
            if msg.message_type == MessageType.SIGNAL and msg.interface in (self.ITEM, self.MENU):
                self.signals.append((msg.interface, msg.member, list(msg.body)))
            elif msg.message_type == MessageType.METHOD_RETURN:
                self.replied[msg.reply_serial] = len(self.signals)

        bus.add_message_handler(on_message)
        return bus

    def close(self) -> None:
        try:
            self.bus.disconnect()
        finally:
            self.t.close()

    # -- what a host does ------------------------------------------------------------------------

    def wait_item(self, timeout: float = WAIT_S) -> str:
        return wait_for(lambda: self.items and self.items[-1], timeout)

    def _get(self, iface: str, path: str, name: str) -> Any:
        service = self.wait_item()
        body = self.t.run(
            _call(
                self.bus,
                destination=service,
                path=path,
                interface="org.freedesktop.DBus.Properties",
                member="Get",
                signature="ss",
                body=[iface, name],
            )
        )
        return body[0].value

    def prop_as_told(self, name: str) -> tuple[Any, list[list[Any]]]:
        """An item property, with the ``New<name>`` signals that arrived before its answer (the
        order on the wire, not when this thread looks)."""
        get = Message(
            destination=self.wait_item(),
            path="/StatusNotifierItem",
            interface="org.freedesktop.DBus.Properties",
            member="Get",
            signature="ss",
            body=[self.ITEM, name],
        )
        reply = self.t.run(self.bus.call(get))
        assert reply is not None and reply.message_type == MessageType.METHOD_RETURN
        before = self.signals[: self.replied.pop(get.serial)]
        return reply.body[0].value, [b for _, m, b in before if m == f"New{name}"]

    def prop(self, name: str) -> Any:
        return self._get(self.ITEM, "/StatusNotifierItem", name)

    def item_call(self, member: str, signature: str = "", body: list[Any] | None = None) -> Any:
        return self.t.run(
            _call(
                self.bus,
                destination=self.wait_item(),
                path="/StatusNotifierItem",
                interface=self.ITEM,
                member=member,
                signature=signature,
                body=body or [],
            )
        )

    def menu_call(self, member: str, signature: str = "", body: list[Any] | None = None) -> Any:
        return self.t.run(
            _call(
                self.bus,
                destination=self.wait_item(),
                path=self.prop("Menu"),
                interface=self.MENU,
                member=member,
                signature=signature,
                body=body or [],
            )
        )

    def layout(self) -> tuple[int, dict[str, Any]]:
        """``GetLayout(0, -1, [])`` as a tree of dicts: ``{"id", "props", "children"}``."""
        revision, root = self.menu_call("GetLayout", "iias", [0, -1, []])

        def tree(node: list[Any]) -> dict[str, Any]:
            node_id, props, children = node
            return {
                "id": node_id,
                "props": {k: v.value for k, v in props.items()},
                "children": [tree(c.value) for c in children],
            }

        return revision, tree(root)

    def find(self, *labels: str) -> dict[str, Any] | None:
        """The item reached by label prefixes, e.g. ``find("Approve: bash", "Approve")``."""
        _, node = self.layout()
        for label in labels:
            node = next(
                (
                    c
                    for c in node["children"]
                    if c["props"].get("label", "").replace("__", "_").startswith(label)
                ),
                None,
            )
            if node is None:
                return None
        return node

    def click(self, *labels: str) -> int:
        node = wait_for(lambda: self.find(*labels), 60)
        self.menu_call("Event", "isvu", [node["id"], "clicked", Variant("s", ""), 0])
        return node["id"]

    def names(self, member: str) -> list[list[Any]]:
        return [body for _, m, body in list(self.signals) if m == member]


# -- the notification server -------------------------------------------------------------------


class _Notifications(ServiceInterface):
    def __init__(self, owner: FakeNotifications) -> None:
        super().__init__("org.freedesktop.Notifications")
        self.owner = owner

    @dbus_method()
    def Notify(
        self,
        app_name: Str,
        replaces_id: UInt,
        app_icon: Str,
        summary: Str,
        body: Str,
        actions: StrList,
        hints: Hints,
        expire_timeout: Int,
    ) -> UInt:
        self.owner.next_id += 1
        nid = self.owner.next_id
        self.owner.shown.append(
            {
                "id": nid,
                "app": app_name,
                "summary": summary,
                "body": body,
                "actions": dict(zip(actions[1::2], actions[0::2], strict=True)),  # title -> key
                "hints": {k: v.value for k, v in hints.items()},
            }
        )
        return nid

    @dbus_method()
    def CloseNotification(self, id: UInt):
        self.owner.closed.append(id)
        self.NotificationClosed(id, 3)

    @dbus_method()
    def GetCapabilities(self) -> StrList:
        return list(self.owner.caps)

    @dbus_method()
    def GetServerInformation(self) -> ServerInfo:
        return ["fake-notifications", "a2a-tests", "1.0", "1.2"]

    @dbus_signal()
    def NotificationClosed(self, id: int, reason: int) -> TwoU:
        return [id, reason]

    @dbus_signal()
    def ActionInvoked(self, id: int, key: str) -> US:
        return [id, key]

    @dbus_signal()
    def NotificationReplied(self, id: int, text: str) -> US:
        return [id, text]


class FakeNotifications:
    """``org.freedesktop.Notifications`` with actions (and KDE's inline reply by default)."""

    def __init__(self, address: str, caps: tuple[str, ...] = ("body", "actions", "inline-reply")):
        self.address = address
        self.caps = caps
        self.next_id = 0
        self.shown: list[dict[str, Any]] = []
        self.closed: list[int] = []
        self.t = LoopThread()
        self.iface = _Notifications(self)
        self.bus: MessageBus = self.t.run(self._start())

    async def _start(self) -> MessageBus:
        bus = await _connect(self.address)
        bus.export("/org/freedesktop/Notifications", self.iface)
        await bus.request_name("org.freedesktop.Notifications")
        return bus

    def press(self, nid: int, key: str) -> None:
        self.t.call(lambda: self.iface.ActionInvoked(nid, key))

    def reply(self, nid: int, text: str) -> None:
        self.t.call(lambda: self.iface.NotificationReplied(nid, text))

    def close(self) -> None:
        try:
            self.bus.disconnect()
        finally:
            self.t.close()
