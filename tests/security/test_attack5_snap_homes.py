"""Outside review (attack5): a snap's own home is a home's hidden tree the box shows whole.

A snap app keeps its data under ``~/snap/<app>/<revision>`` and ``~/snap/<app>/common``, each a
``HOME`` for that app with its own hidden tree: Ubuntu's default Firefox and Chromium keep their
profiles there (saved logins, ``key4.db``, cookies), as do the Slack, Telegram and VS Code snaps.
``~/snap`` is not hidden, and the roots' index skips it as a toolchain (like ``~/go``), so the
box — no human asked, default config — reads every one of those files, secret-looking names
included. The ``read`` tool knows the browsers' snap folders from its table, but not the other
apps' (``private by default`` ends at ``~/.*``). A real bridge process, real HTTP.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, put, require_bwrap, serve, stop

BROWSERS = [
    "snap/firefox/common/.mozilla/firefox/abcd.default/logins.json",
    "snap/firefox/common/.mozilla/firefox/abcd.default/key4.db",
    "snap/chromium/common/chromium/Default/Login Data",
    "snap/chromium/common/chromium/Default/Cookies",
]
APPS = [
    "snap/slack/current/.config/Slack/Cookies",
    "snap/telegram-desktop/current/.local/share/TelegramDesktop/tdata/key_datas",
    "snap/code/current/.config/Code/User/globalStorage/state.vscdb",
]
SECRET_NAMED = ["snap/firefox/common/.mozilla/firefox/abcd.default/.env"]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_bwrap()
    world = make_world()
    try:
        for rel in (*BROWSERS, *APPS, *SECRET_NAMED):
            put(os.path.join(world.home, rel), f"FAKESECRET-{rel}")
        serve(world, False)
        yield world
    finally:
        stop(world)


def _read(world: World, rel: str) -> str:
    c = world.client()
    try:
        r = c.call("read", {"path": os.path.join(world.home, rel)})
    finally:
        c.close()
    assert r.status == 200, r
    return r.raw.decode()


@pytest.mark.parametrize("rel", [*BROWSERS, *APPS, *SECRET_NAMED])
def test_the_box_does_not_show_a_snaps_private_data(world: World, rel: str) -> None:
    _, text = world.bash(f"cat ~/{rel!r} 2>&1; true")
    assert world.leaks(text) == [], text


@pytest.mark.parametrize("rel", APPS)
def test_the_read_tool_keeps_a_snap_apps_hidden_tree_private(world: World, rel: str) -> None:
    assert "FAKESECRET" not in _read(world, rel)


@pytest.mark.parametrize("rel", [*BROWSERS, *SECRET_NAMED])
def test_guard_the_read_tool_knows_the_browsers_snaps(world: World, rel: str) -> None:
    """Held: the table names the browsers' snap folders, so ``read`` asks (nobody answers)."""
    assert "FAKESECRET" not in _read(world, rel)


def test_a_boxed_call_does_not_plant_a_snap_apps_startup_files(world: World) -> None:
    """The agent names a ``cwd`` inside the snap VS Code's user folder (a hidden tree in any
    other home, so persistence): its user ``tasks.json`` and ``settings.json`` run and steer
    the editor the human opens next. (A ``cwd`` in the snap Firefox profile asks: the table
    names it.)"""
    code = os.path.join(world.home, "snap/code/current/.config/Code/User")
    os.makedirs(code, exist_ok=True)
    planted = [os.path.join(code, "tasks.json"), os.path.join(code, "settings.json")]
    c = world.client()
    try:
        # (not ``world.bash``: that fails a call that asks, and this one asks now — the snap
        # home's hidden tree is private, as the snap Firefox profile's guard below)
        r = c.call(
            "bash",
            {
                "command": "echo '{\"tasks\": []}' > tasks.json; "
                'echo \'{"terminal.integrated.env.linux": {"PROMPT_COMMAND": "id"}}\' '
                "> settings.json; true",
                "cwd": code,
            },
        )
        assert r.result["isError"], r.text
        assert [p for p in planted if os.path.exists(p)] == []
    finally:
        c.close()
        for p in planted:
            if os.path.exists(p):
                os.remove(p)


def test_guard_a_cwd_in_the_snap_firefox_profile_asks(world: World) -> None:
    """Held: the table names the snap Firefox profile, so a ``cwd`` there asks (refused)."""
    profile = os.path.join(world.home, "snap/firefox/common/.mozilla/firefox/abcd.default")
    c = world.client()
    try:
        r = c.call("bash", {"command": "echo x > user.js", "cwd": profile})
    finally:
        c.close()
    assert r.result["isError"], r.text
    assert not os.path.exists(os.path.join(profile, "user.js"))


def test_a_boxed_call_in_a_snap_home_is_refused_not_run(world: World) -> None:
    """Closed with the rest: the box hides ``~/snap`` whole, so a ``cwd`` there (outside any
    hidden tree: the path policy lets it be) is refused by the box like a ``cwd`` in the
    home's hidden tree — no box hides the folder a call runs in."""
    cwd = os.path.join(world.home, "snap", "code", "current", "projects")
    os.makedirs(cwd, exist_ok=True)
    made = os.path.join(cwd, "made")
    try:
        failed, text = world.bash(f"cat ~/{APPS[0]!r}; echo x > made", cwd=cwd)
        assert failed and world.leaks(text) == [], text
        assert not os.path.exists(made)
        assert "~/snap" in text and '"box": false' in text, text
    finally:
        if os.path.exists(made):
            os.remove(made)
