"""Tray logic without a display: menu model, icons, autostart files, clipboard, dispatcher."""

from __future__ import annotations

import configparser
import plistlib
import threading
import time
from dataclasses import replace

import pytest

from omp_a2a_bridge.server.box.plan import BoxStatus, Mechanism
from omp_a2a_bridge.server.policy.grants import offer
from omp_a2a_bridge.server.types import (
    Exposure,
    MachineView,
    PendingCall,
    SessionView,
    Snapshot,
    TierChange,
    TunnelView,
)
from omp_a2a_bridge.server.vocab import Tier, TunnelState
from omp_a2a_bridge.tray.autostart import APPROVED_KEY, RUN_KEY, Autostart
from omp_a2a_bridge.tray.clipboard import copy_text
from omp_a2a_bridge.tray.dispatch import Dispatcher
from omp_a2a_bridge.tray.firstrun import STATE_FILE, FirstRun
from omp_a2a_bridge.tray.icons import COLORS, IconState, render_icon, state_for
from omp_a2a_bridge.tray.menu import (
    first_run_text,
    menu_model,
    notification_for,
    pending_label,
    title,
    tooltip,
)

from ..support.helpers import wait_for

NOW = 1_000_000.0


def snap(sessions=(), pending=(), paused=False, control="http://127.0.0.1:9/", **more) -> Snapshot:
    return Snapshot(
        seq=1,
        url="http://127.0.0.1:53917/",
        control_url=control,
        host="127.0.0.1",
        port=53917,
        paused=paused,
        running=True,
        sessions=tuple(sessions),
        pending=tuple(pending),
        approvers=("tray",),
        token_source="keyring",
        warnings=(),
        calls_total=0,
        **more,
    )


def session(
    sid="s1", client="claude-code", version="1.0.3", calls=5, seen=4.0, machine="default"
) -> SessionView:
    return SessionView(sid, client, version, NOW - 100, NOW - seen, calls, 0, machine=machine)


def pending(
    i=1, tool="bash", summary="bash: git push origin main", waited=12.0, rule="bash(git push *)"
) -> PendingCall:
    grant = offer("bash", {"command": "git status"}, escalated=False, home="/h")
    return PendingCall(
        f"a{i}",
        "s1",
        "claude-code",
        tool,
        {},
        summary,
        NOW - waited,
        proposed_rule=rule,
        grant=grant if tool == "bash" else None,
    )


def texts(items):
    return [i.text for i in items]


# -- menu model ---------------------------------------------------------------------------------


def test_menu_empty_is_never_empty_and_has_everything():
    items = menu_model(snap(), now=NOW, autostart=False)
    t = texts(items)
    assert t[0] == "omp A2A bridge — 127.0.0.1:53917 · 0 sessions"
    assert not items[0].enabled
    for expected in (
        "Sessions (0)",
        "Open approval page",
        "Copy connection URL",
        "Copy client config (includes the token)",
        "Copy token",
        "Pause bridge",
        "Start at login",
        "Rotate token…",
        "Open audit log",
        "Show logs: no log file (it could not be opened)",
        "Open config folder",
        "Quit",
    ):
        assert expected in t
    assert t[-1] == "Quit"
    sessions = next(i for i in items if i.text.startswith("Sessions"))
    assert texts(sessions.submenu) == ["No live sessions"]
    assert next(i for i in items if i.text == "Open approval page").default is True
    assert next(i for i in items if i.text == "Start at login").checked is False


def test_menu_with_sessions():
    items = menu_model(snap(sessions=[session(), session("s2", "omp", "", 1, 90)]), now=NOW)
    assert items[0].text.endswith("· 2 sessions")
    sessions = next(i for i in items if i.text == "Sessions (2)")
    assert texts(sessions.submenu) == [
        "default · claude-code 1.0.3 · 5 calls · 4 s ago",
        "default · omp · 1 call · 2 min ago",
    ]
    end = sessions.submenu[0].submenu[0]
    assert (end.text, end.action) == ("End session", ("end_session", "s1"))
    assert "Start at login" not in texts(items)  # unknown autostart state: no checkbox


def test_session_labels_start_with_the_machine_from_the_token():
    items = menu_model(
        snap(sessions=[session(machine="laptop", client="claude-code", version="2.1")]), now=NOW
    )
    sessions = next(i for i in items if i.text == "Sessions (1)")
    assert texts(sessions.submenu) == ["laptop · claude-code 2.1 · 5 calls · 4 s ago"]
    spoof = session(machine="default", client="laptop\u202e", version="")
    shown = menu_model(snap(sessions=[spoof]), now=NOW)
    label = next(i for i in shown if i.text == "Sessions (1)").submenu[0].text
    assert label.startswith("default · laptop\\u202e")  # the claim is rendered, never the name


# -- machines, tunnels, the confirmations -------------------------------------------------------

LAPTOP_TUNNEL = TunnelView(
    "laptop", "ada@laptop", 8765, 53917, "claude-code", TunnelState.UP, None, NOW - 60, 1
)
DESK_TUNNEL = TunnelView(
    "desk",
    "ada@desk",
    8766,
    53917,
    None,
    TunnelState.DOWN,
    "ssh: connect to host desk port 22: Connection refused\x1b[2J",
    NOW - 5,
    3,
    retry_in=4.0,
)


def machines_snap(tunnels=(LAPTOP_TUNNEL, DESK_TUNNEL), **more) -> Snapshot:
    return snap(
        sessions=[session(), session("s2", machine="laptop"), session("s3", machine="laptop")],
        machines=(
            MachineView("default", None, NOW - 4, 5, 1),
            MachineView("laptop", NOW - 900, NOW - 4, 12, 2, "up"),
            MachineView("desk", NOW - 900, None, 0, 0, "down"),
        ),
        tunnels=tunnels,
        **more,
    )


def machine_entry(items, name):
    menu = next(i for i in items if i.text.startswith("Machines ("))
    return next(i for i in menu.submenu if i.text.startswith(f"{name} — "))


def test_machines_menu_shows_sessions_and_a_tunnel_up_and_one_down_with_its_error():
    items = menu_model(machines_snap(), now=NOW)
    menu = next(i for i in items if i.text.startswith("Machines ("))
    assert menu.text == "Machines (3) · 1 tunnel(s) down"
    assert texts(menu.submenu) == [
        "default — 1 session",
        "laptop — 2 sessions · tunnel up",
        "desk — 0 sessions · tunnel down",
    ]
    laptop = machine_entry(items, "laptop").submenu
    assert [(i.text, i.action, i.enabled) for i in laptop[:3]] == [
        ("12 calls · last seen 4 s ago", None, False),
        ("Tunnel up: ada@laptop, remote port 8765", None, False),
        ("Reconnect", ("reconnect_tunnel", "laptop"), True),
    ]
    assert not any(i.text.startswith("Last error") for i in laptop)  # up: no old error shown
    desk = machine_entry(items, "desk").submenu
    assert texts(desk)[:4] == [
        "0 calls · not seen",
        "Tunnel down: ada@desk, remote port 8766",
        "Last error: ssh: connect to host desk port 22: Connection refused\\x1b[2J",
        "Reconnect",
    ]
    assert "\x1b" not in " ".join(texts(desk))  # ssh's words are rendered, never raw
    assert desk[3].action == ("reconnect_tunnel", "desk")
    # A tunnel whose name is no machine's (its clients use another token): listed after them.
    lone = TunnelView("nas", "ada@nas", 8767, 53917, None, TunnelState.CONNECTING, None, NOW, 1)
    extra = menu_model(machines_snap(tunnels=(LAPTOP_TUNNEL, lone)), now=NOW)
    entry = machine_entry(extra, "nas")
    assert entry.text == "nas — tunnel connecting (no machine of that name)"
    assert entry.submenu[-1].action == ("reconnect_tunnel", "nas")
    assert not any(i.text.startswith("Machines") for i in menu_model(snap(), now=NOW))


def test_revoke_asks_first_and_names_what_it_cuts_and_default_has_none():
    items = menu_model(machines_snap(), now=NOW)
    laptop = machine_entry(items, "laptop").submenu
    # No item of the machine's own submenu revokes: only the question's answer does.
    assert not any(i.action and i.action[0] == "revoke_machine" for i in laptop)
    ask = next(i for i in laptop if i.text == "Revoke…")
    assert ask.action is None and ask.submenu is not None
    assert [(i.text, i.action, i.enabled) for i in ask.submenu] == [
        ("Revoke laptop: its 2 sessions end and its token stops working for good", None, False),
        ("Its tunnel stays: 'a2a-bridge tunnels --rm laptop' removes it", None, False),
        ("-", None, False),
        ("Revoke", ("revoke_machine", "laptop"), True),
        ("Cancel", None, True),
    ]
    default = machine_entry(items, "default").submenu
    assert not any(i.text.startswith("Revoke") for i in default)
    assert not any(i.action and i.action[0] == "revoke_machine" for i in default)
    [hint] = [i for i in default if "own token" in i.text]
    assert not hint.enabled and "Rotate token…" in hint.text
    idle = MachineView("desk", NOW - 900, None, 0, 0, None)
    question = machine_entry(menu_model(snap(machines=(idle,)), now=NOW), "desk").submenu[-1]
    assert question.submenu[0].text == "Revoke desk: its token stops working for good"


def test_rotate_asks_first_and_names_what_it_cuts():
    items = menu_model(machines_snap(), now=NOW)
    assert not any(i.action == ("rotate",) for i in items)  # never one click from the top
    rotate = next(i for i in items if i.text == "Rotate token…")
    assert [(i.text, i.action, i.enabled) for i in rotate.submenu] == [
        (
            "The 1 session of machine default is refused until their clients have the new "
            "token, and its waiting calls end; the other 2 machine(s) keep working",
            None,
            False,
        ),
        ("Its clients need the new token (Copy client config)", None, False),
        ("-", None, False),
        ("Rotate", ("rotate",), True),
        ("Cancel", None, True),
    ]
    alone = next(i for i in menu_model(snap(), now=NOW) if i.text == "Rotate token…")
    assert alone.submenu[0].text.startswith("Machine default has no session open; ")


def test_show_logs_opens_the_log_file_and_says_when_there_is_none():
    items = menu_model(snap(log_path="/var/log/bridge.log"), now=NOW)
    logs = next(i for i in items if i.text == "Show logs")
    assert logs.action == ("show_logs",) and logs.enabled
    t = texts(items)
    assert t.index("Open audit log") < t.index("Show logs") < t.index("Open config folder")
    none = next(i for i in menu_model(snap(), now=NOW) if i.text.startswith("Show logs"))
    assert not none.enabled and none.action is None


EXPOSED = Exposure(("/srv/code", "/srv/notes"), (TierChange("write", Tier.ALLOW, Tier.PROMPT),))
BOX = BoxStatus(True, Mechanism.BWRAP, "bubblewrap 0.8.0, user namespaces, no network")


def test_tooltip_says_what_is_exposed_the_box_and_the_machines():
    s = machines_snap(exposure=EXPOSED, box=BOX, log_path="/l/bridge.log")
    assert tooltip(s).splitlines() == [
        "127.0.0.1:53917 · 3 session(s)",
        "exposed: /srv/code, /srv/notes · tiers changed: write=allow",
        "box: bubblewrap (bash runs in it)",
        "machines: default (1 session), laptop (2 sessions, tunnel up), desk (tunnel down)",
    ]
    one_line = title(replace(s, exposure=replace(EXPOSED, roots=("/srv/code",))))
    assert one_line == (
        "omp A2A bridge - 127.0.0.1:53917 · 3 session(s) · /srv/code · "
        "tiers: write=allow · box: bubblewrap · 3 machines, 1 tunnel down"
    )
    one_line.encode("latin-1")
    long_roots = Exposure(tuple(f"/srv/{'x' * 50}{i}" for i in range(3)))
    cut = title(machines_snap(exposure=long_roots, box=BOX, pending=[pending()] * 3))
    assert len(cut) <= 127 and "3 waiting for approval" in cut
    assert "\n" not in cut


def test_first_run_text_is_the_start_text_with_the_trays_way_to_approve():
    s = snap(exposure=EXPOSED, box=BOX, log_path="/l/bridge.log")
    exposed, approve, log = first_run_text(s).splitlines()
    assert exposed == (
        "exposed: /srv/code, /srv/notes · tiers changed: write=allow · "
        "box: bubblewrap (bash runs in it)"
    )
    assert approve.startswith("approve: from this icon's menu")
    assert log == "log: /l/bridge.log ('a2a-bridge logs')"
    assert "'a2a-bridge watch'" in first_run_text(s, has_menu=False)


def test_first_run_is_remembered_in_a_private_file(tmp_path):
    state = FirstRun(str(tmp_path / "cfg"))
    assert state.due()
    state.mark()
    path = tmp_path / "cfg" / STATE_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert not state.due() and not FirstRun(str(tmp_path / "cfg")).due()
    path.write_text("{not json")
    assert not state.due()  # a broken file never makes every start repeat it


def test_menu_pending_first_with_decisions_and_deny_all():
    p = [pending(1), pending(2, "write", "write: notes/todo.md", 3.0), pending(3, "ls", "ls", 0)]
    items = menu_model(snap(sessions=[session()], pending=p), now=NOW)
    t = texts(items)
    assert t[2] == "Approve: bash — git push origin main (claude-code, 12 s)"
    assert t[3] == "Approve: write — notes/todo.md (claude-code, 3 s)"
    assert t[4] == "Approve: ls (claude-code, 0 s)"
    assert t[5] == "Deny all (3)"
    assert items[5].action == ("deny_all",)
    sub = items[2].submenu
    assert [(i.text, i.action) for i in sub if i.action and i.action[0] == "decide"] == [
        ("Approve", ("decide", "a1", "approve")),
        ("Allow `git status …` for this session", ("decide", "a1", "allow_session")),
        ("Always allow: bash(git push *)", ("decide", "a1", "allow_always")),
        ("Deny", ("decide", "a1", "deny")),
    ]
    # No grant as narrow as the call (here: a write with no project): a disabled line.
    write = items[3].submenu
    assert not any(i.action[-1:] == ("allow_session",) for i in write if i.action)
    assert any(i.text.startswith("Allow for this session: not offered") for i in write)
    one = menu_model(snap(pending=[pending()]), now=NOW)
    assert not any(i.text.startswith("Deny all") for i in one)


def test_menu_paused_and_error():
    items = menu_model(snap(paused=True), now=NOW, error="keyring locked")
    assert items[0].text.endswith("· paused")
    assert items[1].text == "Error: keyring locked" and not items[1].enabled
    pause = next(i for i in items if i.text == "Pause bridge")
    assert pause.checked is True and pause.action == ("pause", "off")
    running = next(i for i in menu_model(snap(), now=NOW) if i.text == "Pause bridge")
    assert running.checked is False and running.action == ("pause", "on")


def test_long_summaries_are_shortened_and_titles_never_hold_secrets():
    label = pending_label(pending(summary="bash: " + "x" * 300), NOW)
    assert len(label) < 120 and "…" in label
    assert title(snap(pending=[pending()])) == (
        "omp A2A bridge - 127.0.0.1:53917 · 0 session(s) · 1 waiting for approval"
    )
    title(snap(pending=[pending()] * 3, paused=True)).encode("latin-1")  # X11 STRING-safe
    assert len(title(snap(sessions=[session()] * 64, pending=[pending()] * 64))) <= 127


def test_notification_texts():
    assert notification_for([], 0) is None
    assert notification_for([pending(summary="bash: git push")], 1, NOW) == (
        "bash — git push (claude-code) is waiting"
    )
    assert notification_for([pending()] * 2, 3, NOW) == "3 tool calls waiting for approval"


# -- icons --------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [16, 22, 32, 48, 64])
@pytest.mark.parametrize("state", list(IconState))
def test_icon_sizes_and_colors(state, size):
    img = render_icon(state, 3 if state is IconState.ATTENTION else 0, size)
    assert img.size == (size, size) and img.mode == "RGBA"
    # The state colour fills the background corner region.
    r, g, b, a = img.getpixel((size // 6, size // 2))
    assert a > 200
    assert max(abs(r - COLORS[state][0]), abs(g - COLORS[state][1]), abs(b - COLORS[state][2])) < 40


def test_attention_badge_is_drawn_and_differs_by_count():
    plain = render_icon(IconState.ATTENTION, 0, 64)
    one = render_icon(IconState.ATTENTION, 1, 64)
    many = render_icon(IconState.ATTENTION, 12, 64)
    corner = (56, 56)
    assert plain.getpixel(corner)[:3] == pytest.approx(COLORS[IconState.ATTENTION], abs=40)
    r, g, b, _ = one.getpixel(corner)
    assert r > 150 and g < 80 and b < 80  # the red badge
    assert one.tobytes() != many.tobytes()


def test_state_for():
    assert state_for(0, 0, False, False) is IconState.IDLE
    assert state_for(2, 0, False, False) is IconState.CONNECTED
    assert state_for(2, 1, True, False) is IconState.ATTENTION
    assert state_for(2, 0, True, False) is IconState.PAUSED
    assert state_for(0, 3, False, True) is IconState.ERROR


# -- autostart ------------------------------------------------------------------------------------

CMD = ["/opt/venv/bin/a2a-bridge", "tray"]


class FakeRegistry:
    def __init__(self):
        self.values: dict[tuple[str, str], object] = {}

    def get(self, key, name):
        return self.values.get((key, name))

    def set(self, key, name, value):
        self.values[(key, name)] = value

    def delete(self, key, name):
        self.values.pop((key, name), None)


def test_autostart_linux_desktop_file(tmp_path):
    a = Autostart("linux", home=str(tmp_path), command=CMD)
    assert a.status() == (False, f"no {tmp_path}/.config/autostart/omp-a2a-bridge.desktop")
    a.enable()
    a.enable()  # idempotent
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str
    cp.read(a.path)
    entry = cp["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Exec"] == "/opt/venv/bin/a2a-bridge tray"
    assert entry["X-GNOME-Autostart-enabled"] == "true"
    assert a.enabled is True
    path = tmp_path / ".config/autostart/omp-a2a-bridge.desktop"
    path.write_text(path.read_text().replace("Hidden=false", "Hidden=true"))
    assert a.status()[0] is False and "Hidden=true" in a.status()[1]
    a.disable()
    a.disable()
    assert a.enabled is False
    assert list((tmp_path / ".config/autostart").iterdir()) == []


def test_autostart_macos_launch_agent(tmp_path):
    a = Autostart("darwin", home=str(tmp_path), command=CMD)
    a.enable()
    with open(a.path, "rb") as f:
        plist = plistlib.load(f)
    assert a.path == f"{tmp_path}/Library/LaunchAgents/dev.omp.a2a-bridge.plist"
    assert plist["ProgramArguments"] == CMD and plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}  # never a plain KeepAlive=true
    assert a.enabled
    a.disable()
    assert not a.enabled


def test_autostart_windows_registry_and_startup_approved(tmp_path):
    reg = FakeRegistry()
    a = Autostart(
        "win32",
        home=str(tmp_path),
        registry=reg,
        command=["C:\\Py\\pythonw.exe", "-m", "omp_a2a_bridge.tray"],
    )
    a.enable()
    a.enable()
    assert reg.values == {
        (RUN_KEY, "omp-a2a-bridge"): '"C:\\Py\\pythonw.exe" "-m" "omp_a2a_bridge.tray"'
    }
    assert a.enabled
    reg.set(APPROVED_KEY, "omp-a2a-bridge", b"\x03" + b"\x00" * 11)  # disabled in Task Manager
    assert a.status() == (False, "disabled in Task Manager (StartupApproved)")
    reg.set(APPROVED_KEY, "omp-a2a-bridge", b"\x02" + b"\x00" * 11)
    assert a.enabled
    a.disable()
    assert not a.enabled and (RUN_KEY, "omp-a2a-bridge") not in reg.values


def test_autostart_default_command_is_absolute():
    a = Autostart("linux", home="/nonexistent")
    assert a.command[0].startswith("/") and a.command[-1] == "tray"


# -- clipboard ----------------------------------------------------------------------------------


def test_clipboard_success_failure_and_hang():
    got = []
    assert copy_text("hello", copier=got.append) is None and got == ["hello"]

    class PyperclipException(Exception):
        pass

    def missing(text):
        raise PyperclipException("Pyperclip could not find a copy/paste mechanism for your system")

    assert (
        copy_text("x", copier=missing) == "no clipboard tool found (install xclip or wl-clipboard)"
    )
    t0 = time.monotonic()
    assert copy_text("x", timeout=0.2, copier=lambda t: time.sleep(5)) == (
        "the clipboard did not answer within 0.2 s"
    )
    assert time.monotonic() - t0 < 1


# -- dispatcher ---------------------------------------------------------------------------------


def _no_timer_armed() -> bool:
    """No dispatcher flush is scheduled or running: every ``threading.Timer`` has finished."""
    return not any(isinstance(t, threading.Timer) and t.is_alive() for t in threading.enumerate())


def test_dispatcher_coalesces_bursts_and_keeps_the_latest():
    applied = []
    done = threading.Event()

    def apply(x):
        applied.append(x)
        if x == 99:
            done.set()

    d = Dispatcher(apply, interval=0.2)
    d.submit(0)  # first change after quiet: goes out at once
    wait_for(lambda: applied == [0], timeout=30)
    for i in range(1, 100):
        d.submit(i)
    assert done.wait(30)
    wait_for(_no_timer_armed, timeout=30)  # nothing left that could apply again
    assert applied[0] == 0 and applied[-1] == 99
    assert len(applied) == 2  # 100 submissions, 2 UI updates


def test_dispatcher_posts_through_the_ui_poster_and_stops_when_closed():
    posted = []
    d = Dispatcher(
        lambda x: posted.append(("applied", x)), 0.01, post=lambda fn: (posted.append("post"), fn())
    )
    d.submit(1)
    wait_for(lambda: len(posted) == 2, timeout=30)
    assert posted == ["post", ("applied", 1)]
    d.close()
    d.submit(2)
    wait_for(_no_timer_armed, timeout=30)  # a submit after close armed nothing that could post
    assert posted == ["post", ("applied", 1)]


def test_dispatcher_applies_one_at_a_time_and_ends_on_the_latest():
    """An apply that is slow (a thread the loaded machine did not schedule) is not overtaken:
    the next flush waits for it, then applies the newest snapshot. Overtaken, the older
    apply finished last and the icon kept its stale state (attention, tooltip) until the next
    change - a panel read "NeedsAttention" after the call was decided."""
    applied: list[int] = []
    overlapped: list[int] = []
    running: list[int] = []
    first_in = threading.Event()
    release = threading.Event()
    second_done = threading.Event()

    def apply(x: int) -> None:
        if running:
            overlapped.append(x)
        running.append(x)
        if x == 1:
            first_in.set()
            release.wait(30)
        applied.append(x)
        running.remove(x)
        if x == 2:
            second_done.set()

    d = Dispatcher(apply, interval=0.01)
    d.submit(1)
    assert first_in.wait(30)
    d.submit(2)  # its flush comes due while the first apply still runs
    second_done.wait(1)  # an overtaking apply shows up here (it did, in ~10 ms)
    release.set()
    wait_for(lambda: len(applied) == 2, timeout=30)
    wait_for(_no_timer_armed, timeout=30)
    assert overlapped == [] and applied == [1, 2]
