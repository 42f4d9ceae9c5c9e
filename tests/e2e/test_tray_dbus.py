"""The StatusNotifierItem tray and actionable notifications, over a real private D-Bus.

Each test gets its own ``dbus-daemon``; the desktop's side (watcher + host, notification
server) is written here with dbus-fast and speaks the real protocols to the real tray code,
which drives a real bridge with real MCP calls waiting.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from PIL import Image

from omp_a2a_bridge.server.core.runner import BridgeRunner, RunnerOptions

from ..conftest import write_config
from ..support.control_client import login_page_text
from ..support.dbus_fakes import FakeNotifications, FakeWatcher
from ..support.helpers import Mcp, in_thread, wait_for


class SniTray:
    """A TrayApp with the SNI backend on a real bridge, its icon loop on a thread."""

    def __init__(self, env, notifier: bool = False, first_run: bool = False) -> None:
        from omp_a2a_bridge.tray.app import TrayApp
        from omp_a2a_bridge.tray.autostart import Autostart
        from omp_a2a_bridge.tray.sni import SniIcon

        self.opened: list[str] = []
        self.runner = BridgeRunner(RunnerOptions(port=0, control=True, discover_tools=False))
        self.app = TrayApp(
            None,
            "sni",
            api=self.runner,
            icon_cls=SniIcon,
            autostart=Autostart(
                "linux", home=env["root"] + "/home", command=["/x/a2a-bridge", "tray"]
            ),
            opener=self.opened.append,
            browser=self.opened.append,
            copier=lambda text: None,
            interval=0.02,
            first_run=first_run,
        )
        self.app.start_bridge()
        if notifier:
            self.app.start_notifier()
        self.icon = self.app.make_icon()
        self.failed: list[BaseException] = []
        self.loop = threading.Thread(target=self._run, daemon=True)
        self.loop.start()
        wait_for(lambda: self.icon.visible or self.failed)
        assert not self.failed, self.failed
        self.port = self.runner.bridge.port

    def _run(self) -> None:
        try:
            self.icon.run(setup=self.app.setup)
        except BaseException as e:
            self.failed.append(e)

    def client(self, name: str = "agent") -> Mcp:
        c = Mcp(self.port, client=name)
        c.initialize()
        return c

    def close(self) -> None:
        self.app.quit()
        self.loop.join(10)


@pytest.fixture
def tray(watcher, env):
    write_config(
        env["config"],
        {"roots": [env["root"]], "approval": {"timeout_s": 20, "tiers": {"bash": "prompt"}}},
    )
    t = SniTray(env)
    yield t
    t.close()


def labels(node) -> list[str]:
    return [c["props"].get("label", "-") for c in node["children"]]


# -- the icon and the menu as the desktop sees them ------------------------------------------


def test_item_registers_with_properties_pixmaps_and_menu(tray, watcher, env):
    service = watcher.wait_item()
    assert service == f"org.kde.StatusNotifierItem-{os.getpid()}-1"
    assert watcher.prop("Category") == "ApplicationStatus"
    assert watcher.prop("Status") == "Active"
    assert watcher.prop("ItemIsMenu") is False
    tooltip = watcher.prop("ToolTip")
    assert (
        tooltip[2] == "omp A2A bridge"
        and tray.runner.url.removeprefix("http://")[:-1] in (tooltip[3])
    )
    # What is exposed, as the panel shows it on hover: the roots, the tiers changed from the
    # defaults (the fixture asks for bash), the box, the machines (once the box is probed).
    text = wait_for(lambda: "\nbox: " in (t := watcher.prop("ToolTip")[3]) and t)
    root = os.path.realpath(env["root"])
    assert f"\nexposed: {root} · tiers changed: bash=prompt\n" in text, text
    assert text.endswith("\nmachines: default"), text
    # Pixmaps: several sizes, ARGB32 in network byte order (A first), matching Pillow's pixels.
    pix = watcher.prop("IconPixmap")
    assert [(w, h) for w, h, _ in pix] == [(s, s) for s in (16, 22, 24, 32, 48, 64)]
    w, h, data = pix[-1]
    assert len(data) == w * h * 4
    image = tray.icon.icon.convert("RGBA")
    r, g, b, a = image.getpixel((32, 32))
    offset = (32 * 64 + 32) * 4
    assert tuple(data[offset : offset + 4]) == (a, r, g, b)
    assert data[0] == 0  # a transparent corner: alpha first

    _revision, root = watcher.layout()
    assert root["id"] == 0 and root["props"]["children-display"] == "submenu"
    top = labels(root)
    assert top[0].startswith("omp A2A bridge — 127.0.0.1:")
    assert root["children"][0]["props"]["enabled"] is False  # the header is a label
    assert root["children"][1]["props"] == {"type": "separator"}
    assert "Sessions (0)" in top and "Open approval page" in top and top[-1] == "Quit"
    pause = watcher.find("Pause bridge")
    assert pause["props"]["toggle-type"] == "checkmark" and pause["props"]["toggle-state"] == 0
    sessions = watcher.find("Sessions (0)")
    assert sessions["props"]["children-display"] == "submenu"
    assert labels(sessions) == ["No live sessions"]


def test_a_status_read_never_runs_ahead_of_its_signal(tray, watcher):
    """A panel that reads Status has already had the NewStatus that announced it (the state is
    set on another thread; the read once answered before the signal went out, and CI caught it).
    The tooltip's text is published the same way."""
    watcher.prop("Status")  # registered and answering
    stop = threading.Event()

    def toggle() -> None:
        i = 0
        while not stop.is_set():
            tray.icon.attention = i % 2 == 0
            i += 1
            time.sleep(0.0005)

    th = threading.Thread(target=toggle, daemon=True)
    th.start()
    try:
        for _ in range(300):
            status, told = watcher.prop_as_told("Status")
            assert status == (told[-1][0] if told else "Active"), (status, told[-3:])
    finally:
        stop.set()
        th.join(60)


def test_a_menu_read_never_runs_ahead_of_the_tooltip(tray, watcher):
    """A panel that shows a menu reads a tooltip at least as new. The menu is built on the
    icon's loop from the app's latest snapshot, whoever asks for it (a click does, at any
    time); the tooltip and status of that snapshot go out before it. Once, a rebuild asked
    for by a click ran after the app took a new snapshot and before it set the tooltip: the
    menu said "Sessions (3)" while the tooltip still said 2."""
    stop = threading.Event()

    def clicks() -> None:  # each click's action ends with a menu rebuild (tray/sni.py)
        while not stop.is_set():
            tray.icon.update_menu()
            time.sleep(0.0005)

    def in_menu() -> int:
        node = watcher.find("Sessions (")
        return int(node["props"]["label"].split("(")[1].rstrip(")"))

    def in_tooltip() -> int:
        first = watcher.prop("ToolTip")[3].split("\n")[0]
        return int(first.split(" · ")[1].split(" session")[0])

    th = threading.Thread(target=clicks, daemon=True)
    th.start()
    clients = []
    try:
        for n in range(1, 13):
            clients.append(tray.client(f"agent{n}"))
            for _ in range(8):
                menu = in_menu()
                assert in_tooltip() >= menu, (menu, watcher.prop("ToolTip")[3])
        wait_for(lambda: in_menu() == 12 and in_tooltip() == 12)
    finally:
        stop.set()
        th.join(60)


def test_approve_from_the_menu_reaches_the_bridge(tray, watcher):
    c = tray.client("claude-code")
    th, out = in_thread(c.call, "bash", {"command": "echo via-sni"})
    wait_for(lambda: watcher.prop("Status") == "NeedsAttention")
    assert watcher.names("NewStatus")[-1] == ["NeedsAttention"]
    item = wait_for(lambda: watcher.find("Approve: bash — echo via-sni (claude-code,"))
    assert item["props"]["children-display"] == "submenu"
    assert labels(item)[-5:-3] == ["Approve", "Allow `echo via-sni …` for this session"]
    assert labels(item)[-3].startswith("Always allow: bash(") and labels(item)[-1] == "Deny"
    assert labels(item)[-2] == "Run outside the box"
    assert watcher.names("LayoutUpdated")  # the call arrived as a new layout revision
    watcher.click("Approve: bash — echo via-sni", "Approve")
    th.join(60)
    assert out[0].text == "via-sni"
    wait_for(lambda: watcher.prop("Status") == "Active")
    wait_for(lambda: watcher.find("Approve: bash") is None)


def test_deny_end_session_and_pause_from_the_menu(tray, watcher):
    c = tray.client("claude-code")
    th, out = in_thread(c.call, "write", {"path": "d.txt", "content": "x"})
    wait_for(lambda: watcher.find("Approve: write"))
    watcher.click("Approve: write", "Deny")
    th.join(60)
    assert out[0].text == "denied by the user"
    assert not os.path.exists(os.path.join(tray.runner.config.roots[0], "d.txt"))

    watcher.click("Pause bridge")
    wait_for(lambda: (p := watcher.find("Pause bridge")) and p["props"]["toggle-state"] == 1)
    assert c.call("ls", {}).text == "bridge paused by the user"
    watcher.click("Pause bridge")
    wait_for(lambda: watcher.find("Pause bridge")["props"]["toggle-state"] == 0)
    assert c.call("ls", {}).result["isError"] is False

    wait_for(lambda: watcher.find("Sessions (1)", "default · claude-code"))
    watcher.click("Sessions (1)", "default · claude-code", "End session")
    wait_for(lambda: c.rpc("ping").status == 404)
    wait_for(lambda: watcher.find("Sessions (0)"))


def test_label_changes_are_property_updates_and_stale_ids_do_nothing(tray, watcher):
    c = tray.client("agent")
    for _ in range(2):
        c.call("ls", {})
    entry = wait_for(lambda: watcher.find("Sessions (1)", "default · agent 1.0 · 2 calls"))
    # The box's line changes once, when its probe (a thread at start) answers: a new item,
    # so a new revision. Counted from after it, or a slow probe passes for a relayout.
    wait_for(lambda: watcher.find("box: ") and not watcher.find("box: being checked"))
    revision, _ = watcher.layout()
    c.call("ls", {})
    # Same tree, new label: ItemsPropertiesUpdated for that id, no new revision.
    wait_for(
        lambda: any(
            node_id == entry["id"] and "3 calls" in props["label"].value
            for updated, _ in watcher.names("ItemsPropertiesUpdated")
            for node_id, props in updated
        )
    )
    assert watcher.layout()[0] == revision

    # A click on the menu of a call that is gone must not land on the call that came next.
    th1, _out1 = in_thread(c.call, "bash", {"command": "echo first"})
    old = wait_for(lambda: watcher.find("Approve: bash — echo first", "Approve"))
    assert tray.runner.decide(tray.runner.snapshot().pending[0].id, "deny")
    th1.join(60)
    wait_for(lambda: watcher.find("Approve: bash") is None)
    th2, out2 = in_thread(c.call, "bash", {"command": "echo first"})
    new = wait_for(lambda: watcher.find("Approve: bash — echo first", "Approve"))
    assert new["id"] != old["id"]
    with pytest.raises(RuntimeError, match="InvalidArgs"):
        watcher.menu_call("Event", "isvu", [old["id"], "clicked", _variant(""), 0])
    assert len(tray.runner.snapshot().pending) == 1  # still waiting for a real decision
    watcher.click("Approve: bash — echo first", "Approve")
    th2.join(60)
    assert out2[0].text == "first"


def _variant(text: str):
    from dbus_fast import Variant

    return Variant("s", text)


def test_left_click_opens_the_approval_page(tray, watcher):
    watcher.item_call("Activate", "ii", [0, 0])
    wait_for(lambda: tray.opened)
    assert 'name="code"' in login_page_text(tray.opened[0])


def test_quit_from_the_menu_stops_the_bridge(watcher, env):
    write_config(env["config"], {"roots": [env["root"]], "approval": {"tiers": {"bash": "prompt"}}})
    t = SniTray(env)
    c = t.client()
    th, out = in_thread(c.call, "bash", {"command": "true"})
    wait_for(lambda: watcher.find("Approve: bash"))
    watcher.click("Quit")
    th.join(60)
    assert out[0].text == "bridge shutting down"
    t.loop.join(10)
    assert not t.loop.is_alive() and t.runner.running is False
    assert not t.failed


def test_pixmaps_are_argb_in_network_order():
    from omp_a2a_bridge.tray.sni import pixmaps

    img = Image.new("RGBA", (2, 2), (10, 20, 30, 40))
    [(w, h, data)] = pixmaps(img, (2,))
    assert (w, h) == (2, 2) and data == bytes([40, 10, 20, 30]) * 4


# -- machines and their tunnels (issue 25) -------------------------------------------------------

TUNNEL_S = 120  # ssh on a loaded machine


@pytest.fixture
def machines_tray(watcher, env, ssh_server, memory_keyring, monkeypatch, tmp_path):
    """A tray whose config keeps two tunnels: ``laptop`` to the real sshd (it comes up) and
    ``desk`` to a port where nothing listens (it stays down, with ssh's words)."""
    from ..support.sshd import free_port

    config = tmp_path / "ssh_config"
    config.write_text(
        ssh_server.client_config.read_text()
        + f"\nHost nowhere\n  HostName 127.0.0.1\n  Port {free_port()}\n  BatchMode yes\n"
    )
    monkeypatch.setenv("A2A_BRIDGE_SSH_CONFIG", str(config))
    rport = free_port()
    write_config(
        env["config"],
        {
            "roots": [env["root"]],
            "tunnels": [
                {"name": "laptop", "target": ssh_server.target, "remote_port": rport},
                {"name": "desk", "target": "nowhere", "remote_port": free_port()},
            ],
        },
    )
    t = SniTray(env)
    t.remote_port = rport
    yield t
    t.close()


def test_the_machines_menu_shows_each_tunnel_up_or_down_with_its_error(machines_tray, watcher):
    tray = machines_tray
    laptop = tray.runner.add_machine("laptop").token
    tray.runner.add_machine("desk")
    up = wait_for(lambda: watcher.find("Machines (3)", "laptop — 0 sessions · tunnel up"), TUNNEL_S)
    assert labels(up)[1:3] == [
        f"Tunnel up: testremote, remote port {tray.remote_port}",
        "Reconnect",
    ]
    down = wait_for(lambda: watcher.find("Machines (3)", "desk — 0 sessions · tunnel down"), 60)
    error = wait_for(lambda: watcher.find("Machines (3)", "desk — ", "Last error: "), TUNNEL_S)
    assert "Connection refused" in error["props"]["label"]
    assert "Reconnect" in labels(down)
    assert "desk (tunnel down)" in watcher.prop("ToolTip")[3]
    # An agent on the laptop, through the tunnel, with the laptop's token: its session is the
    # laptop's, in the Sessions menu, the Machines menu and the tooltip.
    c = Mcp(tray.remote_port, token=laptop, client="claude-code")
    assert c.initialize().status == 200
    wait_for(lambda: watcher.find("Sessions (1)", "laptop · claude-code 1.0"))
    wait_for(lambda: watcher.find("Machines (3)", "laptop — 1 session · tunnel up"))
    tip = watcher.prop("ToolTip")[3]
    assert "machines: default, desk (tunnel down), laptop (1 session, tunnel up)" in tip
    assert f"exposed: {tray.runner.config.roots[0]}" in tip

    # Reconnect: the down tunnel's ssh runs again at once (one more attempt).
    def desk_attempts() -> int:
        return next(t for t in tray.runner.tunnels() if t.name == "desk").attempts

    attempts = desk_attempts()
    watcher.click("Machines (3)", "desk — ", "Reconnect")
    wait_for(lambda: desk_attempts() > attempts, TUNNEL_S)


def click_exact(watcher, node, label: str) -> None:
    """Click the child labelled exactly ``label`` (``find`` matches prefixes, and the question
    "Revoke laptop: …" above the button starts like it)."""
    [child] = [c for c in node["children"] if c["props"].get("label") == label]
    watcher.menu_call("Event", "isvu", [child["id"], "clicked", _variant(""), 0])


def test_revoke_asks_first_then_cuts_exactly_that_machine(tray, watcher, memory_keyring):
    laptop = tray.runner.add_machine("laptop").token
    c = Mcp(tray.port, token=laptop, client="claude-code")
    assert c.initialize().status == 200
    other = tray.client("agent")  # machine default
    ask = wait_for(lambda: watcher.find("Machines (2)", "laptop — 1 session", "Revoke…"))
    assert labels(ask) == [
        "Revoke laptop: its 1 session ends and its token stops working for good",
        "-",
        "Revoke",
        "Cancel",
    ]
    default = watcher.find("Machines (2)", "default — ")
    assert not [x for x in labels(default) if x.startswith("Revoke")]
    # Opening the question (a click on its submenu item) and Cancel revoke nothing.
    watcher.click("Machines (2)", "laptop — ", "Revoke…")
    watcher.click("Machines (2)", "laptop — ", "Revoke…", "Cancel")
    assert c.rpc("ping").status == 200
    assert [m.name for m in tray.runner.machines()] == ["default", "laptop"]
    click_exact(watcher, watcher.find("Machines (2)", "laptop — ", "Revoke…"), "Revoke")
    wait_for(lambda: c.rpc("ping").status == 401, 30)
    with pytest.raises(AssertionError, match="401"):  # the token is dead, not only the session
        Mcp(tray.port, token=laptop, client="claude-code").initialize()
    assert other.rpc("ping").status == 200  # the other machine keeps working
    wait_for(lambda: watcher.find("Machines (1)", "default — "))
    wait_for(lambda: any("Revoked laptop" in n for n in tray.app.notifications))


def test_rotate_token_asks_first(tray, watcher):
    ask = watcher.find("Rotate token…")
    assert labels(ask)[0].startswith("Machine default has no session open; ")
    assert labels(ask)[-2:] == ["Rotate", "Cancel"]
    before = tray.runner.token
    click_exact(watcher, ask, "Cancel")
    watcher.click("Show logs")
    wait_for(lambda: tray.opened)
    assert tray.opened == [tray.runner.log_path] and tray.runner.token == before


def test_the_first_start_ever_says_what_is_exposed_once(watcher, notifications, env):
    write_config(env["config"], {"roots": [env["root"]]})
    first = SniTray(env, first_run=True)
    try:
        shown = wait_for(
            lambda: [n for n in notifications.shown if n["summary"] == "omp A2A bridge is running"]
        )
    finally:
        first.close()
    body = shown[0]["body"]
    assert f"exposed: {env['root']}" in body and "box: " in body
    assert "approve: from this icon's menu" in body
    assert f"log: {env['log']}" in body
    state = os.path.join(os.path.dirname(env["config"]), "tray-state.json")
    assert os.stat(state).st_mode & 0o777 == 0o600
    count = len(notifications.shown)
    again = SniTray(env, first_run=True)
    try:
        wait_for(lambda: again.app.snap is not None and again.app.snap.box is not None)
        again.client().call("ls", {})  # a snapshot after the box is known has come and gone
        wait_for(lambda: watcher.find("Sessions (1)"))
    finally:
        again.close()
    later = [n["summary"] for n in notifications.shown[count:]]
    assert "omp A2A bridge is running" not in later


# -- notifications with Approve / Deny -----------------------------------------------------------


@pytest.fixture
def notifications(dbus):
    n = FakeNotifications(dbus.address)
    yield n
    n.close()


@pytest.fixture
def noti_tray(watcher, notifications, env):
    write_config(
        env["config"],
        {"roots": [env["root"]], "approval": {"timeout_s": 20, "tiers": {"bash": "prompt"}}},
    )
    t = SniTray(env, notifier=True)
    assert t.app.actionable is not None
    yield t
    t.close()


def wait_shown(tray: SniTray, server: FakeNotifications, n: int) -> dict:
    """The n-th notification, once the app has it on record too (a human can't click faster)."""
    wait_for(lambda: len(server.shown) >= n)
    wait_for(lambda: tray.app.actionable.live >= 1)
    return server.shown[n - 1]


def test_notification_approve_button_runs_the_call(noti_tray, notifications):
    c = noti_tray.client("claude-code")
    th, out = in_thread(c.call, "bash", {"command": "echo from-notification"})
    shown = wait_shown(noti_tray, notifications, 1)
    assert shown["summary"] == "Approval needed"
    assert shown["body"].startswith("bash — echo from-notification (claude-code) is waiting")
    assert {"Approve", "Deny"} <= set(shown["actions"])
    assert "inline-reply" in shown["actions"].values()  # the deny reason field
    notifications.press(shown["id"], shown["actions"]["Approve"])
    th.join(60)
    assert out[0].text == "from-notification"
    assert len(notifications.shown) == 1  # one notification per call


def test_notification_deny_with_a_reason(noti_tray, notifications):
    c = noti_tray.client()
    th, out = in_thread(c.call, "write", {"path": "n.txt", "content": "x"})
    shown = wait_shown(noti_tray, notifications, 1)
    notifications.reply(shown["id"], "not on Fridays")
    th.join(60)
    assert out[0].text == "denied by the user: not on Fridays"

    th, out = in_thread(c.call, "write", {"path": "n.txt", "content": "x"})
    shown = wait_shown(noti_tray, notifications, 2)
    notifications.press(shown["id"], shown["actions"]["Deny"])
    th.join(60)
    assert out[0].text == "denied by the user"


def test_notification_of_a_call_decided_elsewhere_is_withdrawn(noti_tray, notifications, watcher):
    c = noti_tray.client()
    th, out = in_thread(c.call, "bash", {"command": "echo menu"})
    shown = wait_shown(noti_tray, notifications, 1)
    watcher.click("Approve: bash", "Approve")
    th.join(60)
    assert out[0].text == "menu"
    wait_for(lambda: shown["id"] in notifications.closed)


def test_notification_click_opens_the_page(noti_tray, notifications):
    c = noti_tray.client()
    th, _out = in_thread(c.call, "bash", {"command": "true"})
    shown = wait_shown(noti_tray, notifications, 1)
    notifications.press(shown["id"], "default")
    wait_for(lambda: noti_tray.opened)
    assert 'name="code"' in login_page_text(noti_tray.opened[0])
    noti_tray.runner.decide(noti_tray.runner.snapshot().pending[0].id, "deny")
    th.join(60)


def test_without_a_notification_server_the_plain_notification_stays(watcher, env):
    from omp_a2a_bridge.tray.notifier import ActionableNotifier, NotifierUnavailable

    n = ActionableNotifier(lambda *a: None, lambda call_id: None)
    with pytest.raises(NotifierUnavailable, match="no notification server"):
        n.start(timeout=5)


def test_a_server_without_actions_is_not_actionable(dbus):
    from omp_a2a_bridge.tray.notifier import ActionableNotifier, NotifierUnavailable

    server = FakeNotifications(dbus.address, caps=("body",))
    try:
        n = ActionableNotifier(lambda *a: None, lambda call_id: None)
        with pytest.raises(NotifierUnavailable, match="no buttons"):
            n.start(timeout=5)
    finally:
        server.close()


def test_the_icon_registers_again_with_a_new_watcher(tray, watcher, dbus):
    """A panel restart: the new watcher gets the icon without restarting the app."""
    first = watcher.wait_item()
    watcher.close()
    again = FakeWatcher(dbus.address)
    try:
        assert again.wait_item() == first
        assert again.find("Quit") is not None
    finally:
        again.close()


# -- the layout as data (tray/dbusmenu.py) ---------------------------------------------------------


def test_ids_follow_actions_not_positions():
    from omp_a2a_bridge.tray.dbusmenu import IdTable, build, diff
    from omp_a2a_bridge.tray.menu import SEPARATOR, Item

    ids = IdTable()
    a = (Item("Approve: a", submenu=(Item("Approve", ("decide", "a1", "approve")),)),)
    tail = (
        SEPARATOR,
        Item("Pause_bridge", ("pause", "on"), checked=False),
        Item("Quit", ("quit",)),
    )
    one = build(a + tail, ids)
    two = build(tail, ids)  # the call was decided: positions shift
    quit_id = next(i for i, n in one.nodes.items() if n.action == ("quit",))
    assert two.nodes[quit_id].action == ("quit",)
    approve_id = next(i for i, n in one.nodes.items() if n.action == ("decide", "a1", "approve"))
    assert approve_id not in two.nodes
    b = (Item("Approve: a (3 s)", submenu=(Item("Approve", ("decide", "a2", "approve")),)),)
    three = build(b + tail, ids)
    assert approve_id not in three.nodes  # a new call never inherits a retired id
    assert diff(one, two).relayout and diff(two, three).relayout
    pause = next(n for n in three.nodes.values() if n.action == ("pause", "on"))
    assert pause.props == {
        "label": "Pause__bridge",  # a literal underscore is not a mnemonic
        "enabled": True,
        "toggle-type": "checkmark",
        "toggle-state": 0,
    }
    assert three.nodes[0].children[1:2] and three.nodes[three.nodes[0].children[1]].props == {
        "type": "separator"
    }
    relabelled = (
        Item("Approve: a (5 s)", submenu=(Item("Approve", ("decide", "a2", "approve")),)),
        *tail,
    )
    change = diff(three, build(relabelled, ids))
    assert not change.relayout and [p for _, p in change.updated] == [{"label": "Approve: a (5 s)"}]


# -- the login race: the tray starts before the panel -----------------------------------------


def test_a_tray_started_before_the_panel_moves_to_its_menu_when_it_appears(dbus, env, monkeypatch):
    """Autostart at login: no StatusNotifierWatcher yet, no display for pystray. The app serves,
    watches the bus, and when the panel appears 5 s later ends on the SNI icon with its full
    menu, approving calls, without a restart."""
    from omp_a2a_bridge.tray import backend
    from omp_a2a_bridge.tray.app import TrayApp
    from omp_a2a_bridge.tray.autostart import Autostart

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("PYSTRAY_BACKEND", raising=False)
    monkeypatch.delenv("A2A_BRIDGE_TRAY", raising=False)
    backend.choose_backend.cache_clear()
    backend.load_pystray.cache_clear()
    try:
        choice = backend.choose_backend()
    finally:
        backend.choose_backend.cache_clear()
        backend.load_pystray.cache_clear()
    assert choice.name == backend.WAITING and choice.panel_later
    assert any(
        line.startswith("sni: not yet - no org.kde.StatusNotifierWatcher") for line in choice.lines
    )

    write_config(
        env["config"],
        {"roots": [env["root"]], "approval": {"timeout_s": 30, "tiers": {"bash": "prompt"}}},
    )
    runner = BridgeRunner(RunnerOptions(port=0, control=True, discover_tools=False))
    app = TrayApp(
        None,
        choice.name,
        api=runner,
        autostart=Autostart("linux", home=env["root"] + "/home", command=["/x/a2a-bridge", "tray"]),
        opener=lambda _: None,
        browser=lambda _: None,
        copier=lambda _: None,
        interval=0.02,
        panel_later=choice.panel_later,
    )
    th, result = in_thread(app.run)
    watcher = None
    try:
        wait_for(lambda: runner.running, 30)
        assert app.icon is None and runner.snapshot().approvers == ()  # no menu: no approver
        time.sleep(5)  # the panel comes up late (the real login race)
        watcher = FakeWatcher(dbus.address)
        watcher.wait_item(60)
        assert app.backend == "sni"
        wait_for(lambda: runner.snapshot().approvers == ("tray",))
        assert watcher.find("Quit") is not None and watcher.find("Sessions (0)") is not None
        c = Mcp(runner.bridge.port, client="claude-code")
        c.initialize()
        call, out = in_thread(c.call, "bash", {"command": "echo after-login"})
        wait_for(lambda: watcher.find("Approve: bash — echo after-login"), 30)
        watcher.click("Approve: bash — echo after-login", "Approve")
        call.join(30)
        assert out[0].text == "after-login"
    finally:
        app.request_stop()
        th.join(30)
        if watcher is not None:
            watcher.close()
    assert not th.is_alive() and result[0] == 0


def test_closing_the_notifier_leaves_no_task_pending(notifications, caplog):
    """A notification still on its way when the tray stops is cancelled and unwound with the
    loop: left pending, it was destroyed later by the garbage collector, which logs an error
    in whatever runs then (an unrelated test's "no error in the log" failed on it)."""
    import asyncio
    import gc

    from omp_a2a_bridge.tray.notifier import ActionableNotifier

    n = ActionableNotifier(lambda *a: None, lambda call_id: None)
    n.start(timeout=30)
    hang = asyncio.Event()  # never set: the stand-in of a send the server has not answered
    n._submit(hang.wait)  # noqa: SLF001 - the loop's own tasks
    wait_for(lambda: n.loop is not None and len(n._tasks) == 1)  # noqa: SLF001 - the loop's own tasks
    n.close()
    assert n._thread is not None  # noqa: SLF001 - the loop's own tasks
    n._thread.join(5)  # noqa: SLF001 - the loop's own tasks
    assert n.loop is not None and n.loop.is_closed()
    with caplog.at_level("ERROR", logger="asyncio"):
        gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
    assert all(t.done() for t in n._tasks)  # noqa: SLF001 - the loop's own tasks
