"""What the human sees is what runs, for upstream (``mcp__``) calls and for saved rules.

A real bridge, a real upstream MCP server (``tests/support/upstream_server.py --wide``: tools whose
arguments go beyond a ``command``), real MCP calls over HTTP, the control API over HTTP, the
CLI, and the tray's and ``watch``'s views of the same pending call. Each test plays the agent
that hides what it asks for: an ``env`` next to a harmless ``command``, a fifth argument, a
U+202E deep inside an object, an argument a rule cannot name, a proposal with a hidden
character, hidden text in the client name, the escalation path or the upstream description.
"""

from __future__ import annotations

import json
import os

import pytest

from omp_a2a_bridge.server.cli.watch import PROMPT_NO_RULE
from omp_a2a_bridge.server.present.views import pending_json
from omp_a2a_bridge.server.present.watchtext import describe
from omp_a2a_bridge.tray.menu import call_context, menu_model, notification_for, pending_label

from ..integration.test_upstream_servers import ready, state, stdio_spec  # noqa: F401 - the fixture "state"
from ..support.control_client import Api
from ..support.helpers import Watch, in_thread, wait_for

RLO = "\u202e"
EVIL = {"command": "ls", "env": {"LD_PRELOAD": "/tmp/evil.so"}, "cwd": "/"}


@pytest.fixture
def wide(start_bridge, state):  # noqa: F811 - the fixture imported above
    """A bridge with the control API and the test upstream with its ``--wide`` tools (prompt
    tier, the default), an approver attached, and the control API's client as ``.api``."""

    def start(*flags: str, config: dict | None = None):
        args = ["-m", "tests.support.upstream_server", "--state", state, "--wide", *flags]
        cfg = {"mcp_servers": {"t": stdio_spec(state, args=args)}, "approval": {"timeout_s": 30}}
        cfg.update(config or {})
        running = start_bridge(cfg, control=True)
        ready(running)
        running.api = Api(running.runner.control)
        running.approver = running.runner.attach_approver("test")
        return running

    return start


def _wait_call(running, client, tool: str, args: dict):
    t, out = in_thread(client.call, tool, args)
    (p,) = running.pending()
    return t, out, p


def _views(running, p) -> dict[str, str]:
    """Every UI's text for the pending call ``p``: tray label, submenu and notification,
    ``watch``/``pending`` (from the control API over HTTP), and the summary line."""
    snap = running.runner.snapshot()
    (sp,) = [x for x in snap.pending if x.id == p.id]
    item = next(i for i in menu_model(snap) if i.text.startswith("Approve: "))
    full = running.api.call("GET", f"/api/pending/{p.id}").json
    listed = running.api.call("GET", "/api/pending").json["pending"][0]
    return {
        "label": item.text,
        "submenu": "\n".join(i.text for i in item.submenu),
        "notification": notification_for([sp], 1) or "",
        "watch": describe(full),
        "pending": describe(listed),
        "summary": listed["summary"],
    }


def _finish(running, t, p, decision: str = "deny"):
    running.runner.decide(p.id, decision)
    t.join(60)


# -- 1. every argument of an upstream call is shown --------------------------------------------


def test_an_env_next_to_a_harmless_command_is_shown_everywhere(wide):
    running = wide()
    c = running.client("agent")
    t, _, p = _wait_call(running, c, "mcp__t__exec", EVIL)
    views = _views(running, p)
    for name in ("label", "submenu", "watch", "pending", "summary"):
        assert "LD_PRELOAD" in views[name], (name, views[name])
        assert "/tmp/evil.so" in views[name], (name, views[name])
    assert views["summary"] == (
        'mcp__t__exec: command="ls", env={"LD_PRELOAD": "/tmp/evil.so"}, cwd="/"'
    )
    assert 'cwd = "/"' in views["submenu"] and 'cwd = "/"' in views["watch"]
    # The notification is short: it says how many arguments there are.
    assert "3 arguments" in views["notification"]
    _finish(running, t, p)


def test_no_argument_disappears_without_a_marker(wide):
    running = wide()
    c = running.client("agent")
    args = {f"a{i}": i for i in range(30)}
    args["a29"] = "x" * 500  # a long value: head…tail and its length
    t, _, p = _wait_call(running, c, "mcp__t__delete", args)
    views = _views(running, p)
    assert views["summary"].endswith("more arguments"), views["summary"]
    assert "… +" in views["summary"]
    for name in ("submenu", "watch", "pending"):
        assert "… +6 more arguments" in views[name], (name, views[name])
    pv = running.api.call("GET", f"/api/pending/{p.id}").json["preview"]
    assert [a["name"] for a in pv["arguments"]] == [f"a{i}" for i in range(24)]
    assert pv["more_arguments"] == 6
    t.join(0)
    running.runner.decide(p.id, "deny")
    t.join(60)

    # A fifth argument (the old summary showed four) and a long value in the listed ones.
    args = {"a": 1, "b": 2, "c": 3, "d": 4, "e": "y" * 300}
    t, _, p = _wait_call(running, c, "mcp__t__delete", args)
    views = _views(running, p)
    assert "e=" in views["summary"] and "(302 chars)" in views["summary"], views["summary"]
    assert "e = " in views["submenu"] and "(302 chars)" in views["submenu"]
    assert "(302 chars)" in views["watch"]
    _finish(running, t, p)


@pytest.mark.parametrize(
    "args",
    [
        {"command": "ls", "env": {"NOTE": ["fine", f"x{RLO}y"]}},  # deep in a value
        {"command": "ls", "env": {f"A{RLO}B": "1"}},  # in a nested key
        {"command": "ls", "cwd": "/", "zz": 1, "yy": 2, "xx": "\u200b"},  # past the 4th argument
        {"command": "ls", "co\u200bmmand": "rm -rf ~"},  # in a top-level key
    ],
)
def test_a_hidden_character_in_any_argument_warns_everywhere(wide, args):
    running = wide()
    c = running.client("agent")
    t, _, p = _wait_call(running, c, "mcp__t__exec", args)
    assert p.hidden is True
    views = _views(running, p)
    assert views["label"].startswith("Approve: ⚠ contains hidden characters")
    assert "contains hidden characters" in views["submenu"]
    assert views["notification"].startswith("⚠ contains hidden characters")
    assert "contains hidden characters" in views["watch"]
    assert running.api.call("GET", "/api/pending").json["pending"][0]["hidden"] is True
    for name, text in views.items():
        assert RLO not in text and "\u200b" not in text, name
    _finish(running, t, p)


def test_a_builtin_tool_refuses_arguments_it_does_not_know(start_bridge, env):
    # The built-in tools' previews pick their fields: that holds only because their schema
    # refuses anything else, before any approval is asked.
    running = start_bridge({"approval": {"timeout_s": 30}})
    running.runner.attach_approver("test")
    c = running.client()
    for tool, args in (
        ("write", {"path": "a.txt", "content": "x", "env": {"LD_PRELOAD": "/tmp/e.so"}}),
        ("bash", {"command": "ls", "env": {"LD_PRELOAD": "/tmp/e.so"}}),
    ):
        r = c.call(tool, args)
        assert r.result["isError"] is True, r.text
        assert "env" in r.text
    assert running.runner.snapshot().pending == ()


# -- 2. "Always allow" names every argument, or is not offered ---------------------------------


@pytest.mark.parametrize(
    ("tool", "args", "rule", "other"),
    [
        (
            "mcp__t__exec",
            {"command": "echo " + "a" * 245},
            'mcp__t__exec(command="echo ' + "a" * 245 + '", nothing else)',
            {"command": "rm -rf ~"},
        ),
        (
            "mcp__t__query",
            {"db": "staging", "sql": "SELECT 1 -- " + "x" * 250},
            'mcp__t__query(db="staging", sql="SELECT 1 -- ' + "x" * 250 + '", nothing else)',
            {"db": "staging", "sql": "DROP TABLE users"},
        ),
        ("mcp__t__delete", {"id": 42}, "mcp__t__delete(id=42, nothing else)", {"id": 43}),
        (
            "mcp__t__delete",
            {"id": "a*"},
            'mcp__t__delete(id="a[*]", nothing else)',
            {"id": "abc"},
        ),
        # The same command with an argument the human never saw is not "like this".
        ("mcp__t__exec", {"command": "ls"}, 'mcp__t__exec(command="ls", nothing else)', EVIL),
        ("mcp__t__exec", {}, "mcp__t__exec(nothing else)", {"command": "ls"}),
    ],
)
def test_always_allow_names_every_argument(wide, tool, args, rule, other):
    running = wide()
    c = running.client("agent")
    t, out, p = _wait_call(running, c, tool, args)
    assert running.api.call("GET", f"/api/pending/{p.id}").json["proposed_rule"] == rule
    r = running.api.call("POST", f"/api/pending/{p.id}", {"decision": "allow_always"})
    assert r.status == 200, r.json
    t.join(60)
    assert json.loads(out[0].text) == args
    assert rule in running.runner.snapshot().rules.to_json()["allow"]
    # The same call now runs unattended; another one still asks.
    assert json.loads(c.call(tool, args).text) == args
    t, out, p = _wait_call(running, c, tool, other)
    _finish(running, t, p)
    assert out[0].text == "denied by the user"


def test_always_allow_for_false_does_not_allow_the_string_false(wide):
    """The saved rule allows what the human saw (``false``, ``7``), not the strings that print
    the same (``"false"`` is truthy in a Python or JavaScript upstream)."""
    running = wide(config={"rules": {"deny": ["mcp__t__delete(force=true)"]}})
    seen = {"id": 7, "recursive": False}
    t, out, p = _wait_call(running, running.client("agent"), "mcp__t__delete", seen)
    rule = "mcp__t__delete(id=7, recursive=false, nothing else)"
    assert running.api.call("GET", f"/api/pending/{p.id}").json["proposed_rule"] == rule
    r = running.api.call("POST", f"/api/pending/{p.id}", {"decision": "allow_always"})
    assert r.status == 200, r.json
    t.join(60)
    assert json.loads(out[0].text) == seen
    c = running.client("other agent")  # a new session: no grant, only the saved rule
    assert json.loads(c.call("mcp__t__delete", seen).text) == seen
    t, out, p = _wait_call(running, c, "mcp__t__delete", {"id": "7", "recursive": "false"})
    _finish(running, t, p)
    assert out[0].text == "denied by the user"
    # A deny rule written for a boolean also refuses the other JSON types of the same value.
    for force in (True, "true", "True", [True]):
        res = c.call("mcp__t__delete", {"id": 7, "force": force})
        assert res.result["isError"], force
        assert res.text == "denied by rule mcp__t__delete(force=true) (rules.deny)", force


NO_EXACT_FORM = (
    "an argument is an object, an array or a non-finite number: no rule can name it exactly"
)
NO_NAME = "an argument's name is outside the rule grammar, so no rule can name it exactly"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (EVIL, NO_EXACT_FORM),  # an object: no exact form in the rule grammar
        ({"command": "ls", "argv": ["-la"]}, NO_EXACT_FORM),  # an array
        ({"command": "ls", "two words": "x"}, NO_NAME),  # a name the grammar cannot write
    ],
)
def test_no_always_allow_when_a_rule_cannot_name_the_call_exactly(wide, cli, args, why):
    running = wide()
    c = running.client("agent")
    t, _, p = _wait_call(running, c, "mcp__t__exec", args)
    assert p.proposed_rule is None
    assert running.api.call("GET", f"/api/pending/{p.id}").json["proposed_rule"] is None
    r = running.api.call("POST", f"/api/pending/{p.id}", {"decision": "allow_always"})
    assert r.status == 400 and r.json["error"].startswith("no rule can allow calls like this")
    r = cli("approve", p.id, "--always")
    assert r.returncode != 0 and "no rule can allow calls like this" in r.stderr, r
    views = _views(running, p)
    # Each UI gives this call's own reason (it used to say "no rule can name exactly this call"
    # whatever the cause).
    assert f"Always allow: not offered ({why})" in views["submenu"]
    assert f'(no "Always allow" for this call: {why})' in views["watch"]
    assert running.runner.snapshot().rules.to_json()["allow"] == []
    _finish(running, t, p, "approve")


def test_watch_shows_every_argument_and_refuses_always_without_a_rule(wide):
    running = wide()
    running.runner.detach_approver(running.approver)
    c = running.client("agent")
    w = Watch()
    try:
        wait_for(lambda: "terminal (watch)" in running.runner.snapshot().approvers)
        t, out = in_thread(c.call, "mcp__t__exec", EVIL)
        w.wait_out(PROMPT_NO_RULE)  # watch drops what is typed before a call shows
        w.send("A")  # [A]lways: not offered
        w.wait_out(PROMPT_NO_RULE, 2)
        w.send("d")
        w.wait_out("reason (optional")
        w.send("")  # deny without a reason
        t.join(60)
        stdout = w.finish()
    finally:
        w.close()
    assert out[0].text == "denied by the user"
    assert 'env = {"LD_PRELOAD": "/tmp/evil.so"}' in stdout
    assert stdout.count('(no "Always allow" for this call') >= 2  # in the card, and on "A"
    assert "[A]lways" not in stdout
    assert running.runner.snapshot().rules.to_json()["allow"] == []


# -- 3. a proposal with hidden characters never becomes a rule -----------------------------------


def test_a_hidden_character_inside_a_quoted_value_is_not_proposed(wide, cli):
    # JSON writes U+202E as the six ASCII characters \u202e in the rule's text, so a check on
    # the text alone passed it; the value the rule matches still holds the real character.
    running = wide()
    c = running.client("agent")
    t, _, p = _wait_call(running, c, "mcp__t__query", {"db": f"stag{RLO}ing"})
    assert p.proposed_rule is None
    assert running.api.call("GET", f"/api/pending/{p.id}").json["proposed_rule"] is None
    r = cli("approve", p.id, "--always")
    assert r.returncode != 0, r
    _finish(running, t, p)
    assert running.runner.snapshot().rules.to_json()["allow"] == []


def test_a_bash_proposal_with_a_hidden_character_reaches_no_ui_and_is_never_saved(
    start_bridge, env, cli
):
    config = {"approval": {"timeout_s": 30, "tiers": {"bash": "prompt"}}}  # bash asks here
    running = start_bridge(config, control=True)
    api = Api(running.runner.control)
    running.runner.attach_approver("test")
    c = running.client("agent")
    t, _ = in_thread(c.call, "bash", {"command": f"python3 x{RLO}.py --fast"})
    (p,) = running.pending()
    # The tray reads the snapshot's PendingCall directly (not pending_json).
    assert p.proposed_rule is None
    item = next(i for i in menu_model(running.runner.snapshot()) if i.text.startswith("Approve"))
    assert not [i for i in item.submenu if RLO in i.text]
    assert "Always allow: not offered" in "\n".join(i.text for i in item.submenu)
    r = cli("approve", p.id, "--always")
    assert r.returncode != 0 and "no rule can allow" in r.stderr
    _finish(running, t, p)
    # Nor can an edited rule carry one (here the call itself is clean and has a proposal).
    t, _ = in_thread(c.call, "bash", {"command": "python3 x.py --fast"})
    (p,) = running.pending()
    assert p.proposed_rule == "bash(python3 x.py *)"
    for how in ("page", "cli"):
        edited = f"bash(python3 x{RLO}.py *)"
        if how == "page":
            body = {"decision": "allow_always", "rule": edited}
            r = api.call("POST", f"/api/pending/{p.id}", body)
            assert r.status == 400, r.json
            error = r.json["error"]
        else:
            r = cli("approve", p.id, "--rule", edited)
            assert r.returncode != 0
            error = r.stderr
        assert "rule not saved: it contains hidden characters" in error, error
    _finish(running, t, p)
    assert running.runner.snapshot().rules.to_json()["allow"] == []


def test_rules_are_shown_rendered_on_every_ui(start_bridge, env, cli):
    bad = f"read(**/a{RLO}b.txt)"
    running = start_bridge({"rules": {"deny": [bad, "bash(rm \x1b[2K *)"]}}, control=True)
    api = Api(running.runner.control)
    status = api.call("GET", "/api/status").json
    shown = status["rules_display"]["deny"]
    assert shown[0] == {"text": "read(**/a\\u202eb.txt)", "hidden": True}
    assert shown[1] == {"text": "bash(rm \\x1b[2K *)", "hidden": True}
    assert status["rules"]["deny"][0] == bad  # raw, to remove it through the API
    listed = api.call("GET", "/api/rules").json
    assert listed["display"]["deny"][0]["text"] == "read(**/a\\u202eb.txt)"
    tested = api.call("POST", "/api/rules/test", {"tool": "read", "arguments": {"path": "x"}})
    assert tested.status == 200
    tested = api.call("POST", "/api/rules/test", {"command": "rm \x1b[2K x"})
    assert tested.json["rule"] == "bash(rm \x1b[2K *)"
    assert tested.json["rule_display"] == "bash(rm \\x1b[2K *)"
    r = cli("rules", "list")
    assert RLO not in r.stdout and "\x1b" not in r.stdout
    assert "read(**/a\\u202eb.txt)  ⚠ contains hidden characters" in r.stdout
    r = cli("rules", "test", "rm \x1b[2K x")
    assert "\x1b" not in r.stdout and "bash(rm \\x1b[2K *)" in r.stdout, r.stdout
    rules = next(i for i in menu_model(running.runner.snapshot()) if i.text.startswith("Rules"))
    assert all(RLO not in i.text and "\x1b" not in i.text for i in rules.submenu)
    assert rules.submenu[0].text == "⚠ contains hidden characters · deny: read(**/a\\u202eb.txt)"


# -- 4. one decision on "contains hidden characters" ---------------------------------------------


def _all_warn(running, p) -> None:
    snap = running.runner.snapshot()
    (sp,) = snap.pending
    assert pending_json(sp)["hidden"] is True
    assert pending_label(sp, sp.arrived).startswith("⚠ contains hidden characters")
    assert call_context(sp)[0].startswith("⚠ contains hidden characters")
    assert (notification_for([sp], 1) or "").startswith("⚠ contains hidden characters")
    listed = running.api.call("GET", "/api/pending").json["pending"][0]
    assert listed["hidden"] is True
    assert "contains hidden characters" in describe(listed)


def test_a_hidden_character_in_the_client_name_warns_in_the_tray_too(wide):
    running = wide()
    c = running.client(f"claude{RLO}edoc")
    t, _, p = _wait_call(running, c, "mcp__t__delete", {"id": 1})
    assert p.hidden is False  # the arguments are clean: the client name is what warns
    _all_warn(running, p)
    _finish(running, t, p)


def test_a_hidden_character_in_the_upstream_description_warns_in_the_tray_too(wide):
    running = wide("--sneaky")
    c = running.client("agent")
    t, _, p = _wait_call(running, c, "mcp__t__notes", {})
    _all_warn(running, p)
    _finish(running, t, p)


def test_a_hidden_character_in_the_escalation_path_warns_in_the_tray_too(wide, tmp_path):
    running = wide()
    c = running.client("agent")
    outside = tmp_path / "outside"
    outside.mkdir()
    name = f"a{RLO}txt.sh"
    (outside / name).write_text("x")
    # The agent writes the path with a plain name the bridge resolves through a symlink, so
    # only the escalation's real path carries the hidden character.
    link = os.path.join(running.env["root"], "link")
    os.symlink(outside / name, link)
    t, _, p = _wait_call(running, c, "read", {"path": "link"})
    assert p.escalation is not None and RLO in str(p.escalation.to_json()["path"])
    _all_warn(running, p)
    _finish(running, t, p)


def test_a_path_proposal_with_a_hidden_character_is_not_offered(start_bridge, env, cli):
    # write(<root>/a\u202eb/**) would be a standing rule whose text reads differently.
    running = start_bridge({"approval": {"timeout_s": 30, "tiers": {"write": "prompt"}}})
    running.runner.attach_approver("test")
    os.mkdir(os.path.join(env["root"], f"a{RLO}b"))
    c = running.client("agent")
    t, _ = in_thread(c.call, "write", {"path": f"a{RLO}b/x.txt", "content": "x"})
    (p,) = running.pending()
    assert p.proposed_rule is None
    assert call_context(p)[0].startswith("⚠ contains hidden characters")
    _finish(running, t, p)
