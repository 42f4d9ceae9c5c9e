"""Playing the attacker against how an upstream (``mcp__``) tool's arguments are judged.

A real bridge over real HTTP, the real test upstream (``tests/support/upstream_server.py``:
``--wide`` for ``exec``, ``--fs`` for a ``read_file`` that opens what it is told), a fake HOME with
planted secrets, and no approver attached: every call that needs a human is refused, so a call that
runs (or a secret in a response) means the promise "every string argument is judged" broke.

Outside review, two findings: (1) only the first 64 strings, 8 levels deep, values only were
judged, so a filler argument, deep nesting or a key hid the path; (2) relative names were
judged against the first root while a stdio upstream ran in the bridge's own working directory
(the home folder for a desktop launch), so ``.aws/credentials`` read the key.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from omp_a2a_bridge.server.present.views import pending_json
from omp_a2a_bridge.server.present.watchtext import describe
from omp_a2a_bridge.tray.menu import call_context, notification_for

from ..integration.test_upstream_servers import REPO, free_port, ready
from ..support.helpers import in_thread, wait_for

NO_APPROVER = "approval required but no approver is available"
SERVER = os.path.join(
    REPO, "tests", "support", "upstream_server.py"
)  # by path: runs in any directory


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fake HOME with an SSH key and AWS credentials; the root is ``~/proj``."""
    h = tmp_path / "home"
    for rel, text in {".ssh/id_rsa": "SECRET-ssh-rsa", ".aws/credentials": "SECRET-aws"}.items():
        (h / rel).parent.mkdir(parents=True, exist_ok=True)
        (h / rel).write_text(text + "\n")
    (h / "proj").mkdir()
    (h / "proj" / "notes.txt").write_text("PUBLIC-notes\n")
    monkeypatch.setenv("HOME", str(h))
    return h


def spec(state: str, *flags: str, **extra) -> dict:
    s = {"command": sys.executable, "args": [SERVER, "--state", state, *flags]}
    s.update(extra)
    return s


def _refused(resp) -> bool:
    return resp.result.get("isError") is True and resp.text.startswith(NO_APPROVER)


# -- finding 1: arguments past the old limits were not judged ----------------------------------

FILLERS = {f"k{i}": "v" for i in range(64)}


def _hiding(key: str, aws: str) -> list[dict]:
    """Calls of ``exec`` (command ``cat …``, so the rule ``exec(command=cat *)`` matches) that
    name ``key`` where the old check never looked."""
    nested: dict = {"p": key}
    for _ in range(9):
        nested = {"a": nested}
    return [
        {"env": FILLERS, "command": f"cat {key}"},  # 64 strings first: the command was 65th
        {"command": "cat x", "env": nested},  # 9 levels deep
        {"command": "cat x", "env": {key: "x"}},  # a key
        {"command": "cat x", "env": {"list": ["v"] * 64 + [key]}},  # a list of 64 fillers
        {"command": "cat x", "env": {f"k{i}": "v" * 100 for i in range(600)}},  # too many
        {"command": "cat x", "files": json.dumps([aws])},  # JSON in a string
        {"command": "cat x", "files": repr([aws])},  # a list's repr: brackets are not globs
    ]


@pytest.mark.parametrize("how", ["rule", "tier", "session"])
def test_no_argument_hides_a_protected_path_from_the_check(start_bridge, home, tmp_path, how):
    state = str(tmp_path / "state")
    cfg: dict = {"mcp_servers": {"up": spec(state, "--wide")}}
    if how == "rule":
        cfg["rules"] = {"allow": ["mcp__up__exec(command=cat *)"]}
    elif how == "tier":
        cfg["approval"] = {"tiers": {"mcp__up__exec": "allow"}}
    running = start_bridge(cfg)
    ready(running, "up")
    c = running.client()
    if how == "session":  # a human grants "Allow for this session" on a harmless call
        handle = running.runner.attach_approver("test")
        t, out = in_thread(c.call, "mcp__up__exec", {"command": "cat notes.txt"})
        (p,) = running.pending()
        running.runner.decide(p.id, "allow_session")
        t.join(60)
        assert not out[0].result.get("isError"), out[0].text
        running.runner.detach_approver(handle)
    key, aws = f"{home}/.ssh/id_rsa", f"{home}/.aws/credentials"
    # The plain form was always refused, and an ordinary call still runs unattended.
    assert _refused(c.call("mcp__up__exec", {"command": f"cat {key}"}))
    ok = c.call("mcp__up__exec", {"command": "cat notes.txt", "env": FILLERS})
    assert not ok.result.get("isError") and "notes.txt" in ok.text
    for args in _hiding(key, aws):
        r = c.call("mcp__up__exec", args)
        assert _refused(r), (list(args), r.text[:200])
    done = [r for r in running.audit() if r["phase"] == "done" and r["tool"] == "mcp__up__exec"]
    n = len(_hiding(key, aws))
    assert [r["outcome"] for r in done[-n:]] == ["no_approver"] * n


def test_arguments_too_many_to_check_tell_the_human_and_the_agent_why(start_bridge, home, tmp_path):
    state = str(tmp_path / "state")
    cfg = {"mcp_servers": {"up": spec(state, "--wide")}}
    cfg["rules"] = {"allow": ["mcp__up__exec(command=cat *)"]}
    running = start_bridge(cfg)
    ready(running, "up")
    c = running.client()
    many = {"command": "cat x", "env": {f"k{i}": "v" for i in range(600)}}
    r = c.call("mcp__up__exec", many)
    assert r.text.startswith(f"{NO_APPROVER}: the call is too large to check for protected paths")
    running.runner.attach_approver("test")
    t, out = in_thread(c.call, "mcp__up__exec", many)
    (p,) = running.pending()
    assert p.escalation is not None and str(p.escalation.kind) == "unchecked"
    why = "arguments hold over 512 names and strings, too many to check"
    assert why in p.escalation.category
    # Every UI says why: the tray's submenu and notification, watch/pending, the page's JSON.
    (sp,) = running.runner.snapshot().pending
    assert any(line.startswith("Why: arguments hold over 512") for line in call_context(sp))
    assert "why: arguments hold over" in (notification_for([sp], 1) or "")
    shown = pending_json(sp)
    assert shown["escalation"]["kind"] == "unchecked" and why in shown["escalation"]["category"]
    assert "the call was not checked for protected paths" in describe(shown)
    assert p.proposed_rule is None  # an always-asking call gets no "Always allow"
    running.runner.decide(p.id, "approve")
    t.join(60)
    assert not out[0].result.get("isError")  # a human may still run it


# -- finding 2: relative names are judged where the upstream runs ------------------------------


def test_a_stdio_upstream_without_cwd_runs_in_the_first_root(
    start_bridge, home, tmp_path, monkeypatch
):
    monkeypatch.chdir(home)  # a desktop or autostart launch: the bridge runs in $HOME
    state = str(tmp_path / "state")
    cfg = {
        "roots": [str(home / "proj")],
        # Outside the box: the test reads the ``cwd`` it writes into ``state`` (outside the
        # roots, so in the box it would land in the box's private /tmp).
        "mcp_servers": {"fs": spec(state, "--fs", box=False)},
        "rules": {"allow": ["mcp__fs__read_file(path=*)"]},
    }
    running = start_bridge(cfg)
    ready(running, "fs")
    c = running.client()
    r = c.call("mcp__fs__read_file", {"path": ".aws/credentials"})
    assert "SECRET" not in r.text, r.text
    assert c.call("mcp__fs__read_file", {"path": "notes.txt"}).text == "PUBLIC-notes\n"
    with open(os.path.join(state, "cwd")) as f:
        assert f.read() == str(home / "proj")
    assert _refused(c.call("mcp__fs__read_file", {"path": "../.aws/credentials"}))


def test_relative_names_are_judged_against_a_configured_cwd(start_bridge, home, tmp_path):
    state = str(tmp_path / "state")
    cfg = {
        "roots": [str(home / "proj")],
        "mcp_servers": {"fs": spec(state, "--fs", cwd=str(home))},
        "rules": {"allow": ["mcp__fs__read_file(path=*)"]},
    }
    running = start_bridge(cfg)
    ready(running, "fs")
    c = running.client()
    for path in (".aws/credentials", ".ssh/id_rsa", "./.aws/credentials"):
        r = c.call("mcp__fs__read_file", {"path": path})
        assert _refused(r) and "SECRET" not in r.text, (path, r.text)
    assert c.call("mcp__fs__read_file", {"path": "proj/notes.txt"}).text == "PUBLIC-notes\n"


@pytest.fixture
def http_fs(home, tmp_path):
    """The ``--fs`` upstream over HTTP, running in HOME (the bridge cannot know that)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--state", str(tmp_path / "hstate"), "--fs", "--http", str(port)],
        cwd=str(home),
        start_new_session=True,
    )

    def up():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(up, 30)
    yield f"http://127.0.0.1:{port}/mcp"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_relative_names_for_an_http_upstream_are_judged_against_every_plausible_base(
    start_bridge, home, http_fs
):
    cfg = {
        "roots": [str(home / "proj")],
        "mcp_servers": {"fs": {"url": http_fs}},
        "rules": {"allow": ["mcp__fs__read_file(path=*)"]},
    }
    running = start_bridge(cfg)
    ready(running, "fs")
    c = running.client()
    for path in (".aws/credentials", ".ssh/id_rsa"):
        r = c.call("mcp__fs__read_file", {"path": path})
        assert _refused(r) and "SECRET" not in r.text, (path, r.text)
    assert c.call("mcp__fs__read_file", {"path": "proj/notes.txt"}).text == "PUBLIC-notes\n"


# -- attack review F1: a one-word name that is a symlink to a secret ---------------------------


def test_a_one_word_symlink_to_a_secret_needs_a_human_upstream_and_in_bash(
    start_bridge, home, tmp_path
):
    (home / "proj" / "creds").symlink_to("../.aws/credentials")
    state = str(tmp_path / "state")
    cfg = {
        "roots": [str(home / "proj")],
        "mcp_servers": {"fs": spec(state, "--fs")},
        "approval": {"tiers": {"mcp__fs__read_file": "allow"}},
        "rules": {"allow": ["bash(cat *)"]},
    }
    running = start_bridge(cfg)
    ready(running, "fs")
    c = running.client()
    r = c.call("mcp__fs__read_file", {"path": "creds"})
    assert _refused(r) and "SECRET" not in r.text, r.text
    r = c.call("bash", {"command": "cat creds"})  # in the box (issue 22): ~/.aws is empty
    assert (_refused(r) or r.result["isError"]) and "SECRET" not in r.text, r.text
    # A hard link by one word is the secret it links to (judged by its identity).
    os.link(home / ".ssh" / "id_rsa", home / "proj" / "readme")
    for tool, args in (
        ("mcp__fs__read_file", {"path": "readme"}),
        ("bash", {"command": "cat readme"}),
    ):
        r = c.call(tool, args)
        # bash runs in the box (issue 22), where the hard-linked file is masked (empty)
        kept_out = _refused(r) or (tool == "bash" and r.text == "(no output)")
        assert kept_out and "SECRET" not in r.text, (tool, r.text)
    # A plain word that names an ordinary file still runs unattended.
    assert c.call("mcp__fs__read_file", {"path": "notes.txt"}).text == "PUBLIC-notes\n"
    assert "PUBLIC-notes" in c.call("bash", {"command": "cat notes.txt"}).text


def test_a_recursive_glob_reaches_a_protected_file_at_any_depth_only_with_a_human(
    start_bridge, home, tmp_path
):
    (home / ".config" / "gh").mkdir(parents=True)
    (home / ".config" / "gh" / "hosts.yml").write_text("SECRET-gh\n")
    state = str(tmp_path / "state")
    cfg = {
        "roots": [str(home / "proj")],
        "mcp_servers": {"up": spec(state, "--wide")},
        "approval": {"tiers": {"mcp__up__exec": "allow"}},
    }
    running = start_bridge(cfg)
    ready(running, "up")
    c = running.client()
    for args in (
        {"command": "cat x", "pattern": "~/**/hosts.yml"},
        {"command": "cat x", "root": "~", "glob": "**/hosts.yml"},
        {"command": f"cat {home}/%2essh/%69d_rsa"},
    ):
        assert _refused(c.call("mcp__up__exec", args)), args
