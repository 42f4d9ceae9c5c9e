"""Attacks on the seams between features built separately (path policy, rules, grants, search,
bash, upstream tools, rendering), against a real ``a2a-bridge serve`` whose HOME is full of
planted secrets (see :mod:`tests.security.test_planted_home`).

Rules and tiers here are as generous as a user might make them; with no approver attached,
anything that needs a human is refused, so a secret marker in any response, or a planted
persistence file that changed, means a rule or grant covered what it never may.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.helpers import serve_process, wait_for
from .test_planted_home import NO_APPROVER, SECRETS, Serve, _leaks, _start, _stop

RULES = {
    "allow": [
        "bash(cd *)",
        "bash(cat *)",
        "bash(git diff *)",
        "bash(head *)",
        "bash(cp *)",
        "bash(ls *)",
        "read(~/**)",
        "write(~/**)",
        "edit(~/**)",
        "grep",
        "find(~/**)",
        "ls",
    ],
}


def _serve_with_rules(base: Path) -> Serve:
    """The attack bridge, with bash at the prompt tier and broad allow rules in the config."""
    s = _start(base, {"read": "allow", "write": "prompt", "edit": "prompt", "bash": "prompt"})
    cfg_path = s.home / ".config" / "omp-a2a-bridge" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["rules"] = RULES
    _stop(s)
    cfg_path.write_text(json.dumps(cfg))
    return _start_again(base, s)


def _start_again(base: Path, old: Serve) -> Serve:

    log = base / "serve2.log"
    with open(log, "w") as err:
        proc, port = serve_process(old.env, stderr=err)
    return Serve(old.home, proc, port, old.env, old.outside, log)


@pytest.fixture(scope="module")
def ruled(tmp_path_factory) -> Iterator[Serve]:
    s = _serve_with_rules(tmp_path_factory.mktemp("seams"))
    yield s
    _stop(s)


BASH_READS = [
    "cat ~/.ssh/id_rsa",
    "cat $HOME/.ssh/id_rsa",
    "cat ${{HOME}}/.ssh/id_rsa",
    "cat {home}/.ssh/id_rsa",
    "cat ~/.s\\sh/id_rsa",
    "cat ~/'.ssh'/id_rsa",
    "cat proj/links/l0",
    "cat proj/hard/h0.txt",
    "cat proj/dirlinks/d0/id_rsa",
    "cat ~/.ssh/id_*",
    "cat ~/.ss?/id_rsa",
    "cat ~/.{{ssh,aws}}/id_rsa",
    "cat .aws/credentials",
    "cat ./.aws/../.aws/credentials",
    "cat proj/.env",
    "head -c 100 ~/.bash_history",
    "git diff --no-index /dev/null ~/.ssh/id_rsa",
    "cat --file=x ~/.netrc",
    "cat ~/.config/omp-a2a-bridge/config.json",
]


def _kept_out(r) -> bool:
    """Asked (and, with nobody to ask, refused), or - allowed by a rule - ran in the box
    (issue 22), where the protected place is not there or empty: either way nothing read."""
    return r.text.startswith(NO_APPROVER) or r.result["isError"] or r.text == "(no output)"


@pytest.mark.parametrize("command", BASH_READS)
def test_a_bash_allow_rule_never_reads_a_protected_path(ruled, command):
    command = command.format(home=ruled.home)
    r = ruled.client().call("bash", {"command": command})
    assert _leaks(ruled, r) == [], (command, r.text)
    assert _kept_out(r), (command, r.text)


@pytest.mark.parametrize(
    "command",
    [
        "cd .. && cat .aws/credentials",
        "cd ../.. && cat home/.netrc",
        "cd .. ; cd .aws ; cat credentials",
        "cd .. && cd .local && cd bin && cp ../../proj/README.md git",
        "cd / && ls",
    ],
)
def test_a_bash_allow_rule_after_cd_still_sees_the_protected_path(ruled, command):
    r = ruled.client().call("bash", {"command": command, "cwd": "proj"})
    assert _leaks(ruled, r) == [], (command, r.text)
    if command != "cd / && ls":
        assert _kept_out(r), (command, r.text)
    else:
        assert not r.result["isError"], r.text  # "/" itself is nothing protected


def test_a_bash_allow_rule_in_a_protected_cwd_asks(ruled):
    r = ruled.client().call("bash", {"command": "cat id_rsa", "cwd": "~/.ssh"})
    assert _leaks(ruled, r) == [] and r.text.startswith(NO_APPROVER), r.text


@pytest.mark.parametrize(
    "command", ["cp proj/README.md ~/.bashrc", "cp proj/README.md .local/bin/git"]
)
def test_a_bash_allow_rule_never_writes_a_persistence_path(ruled, command):
    before = (ruled.home / ".bashrc").read_text()
    r = ruled.client().call("bash", {"command": command})
    assert _kept_out(r), (command, r.text)
    assert (ruled.home / ".bashrc").read_text() == before
    assert not (ruled.home / ".local" / "bin" / "git").exists()


def test_bash_allow_rules_still_run_harmless_commands(ruled):
    c = ruled.client()
    r = c.call("bash", {"command": "cat proj/README.md"})
    assert "PUBLIC-readme" in r.text and not r.result["isError"], r.text
    r = c.call("bash", {"command": "cat proj/.env.example proj/id_ed25519.pub"})
    assert "PUBLIC-pubkey" in r.text, r.text
    r = c.call("bash", {"command": "ls -la /dev/null /usr/bin"})
    assert not r.result["isError"], r.text


def test_path_rules_never_cover_protected_or_persistence(ruled):
    c = ruled.client()
    bashrc = (ruled.home / ".bashrc").read_text()
    for rel in SECRETS:
        r = c.call("read", {"path": "~/" + rel})
        assert _leaks(ruled, r) == [] and r.text.startswith(NO_APPROVER), (rel, r.text)
    for rel in (".bashrc", ".ssh/authorized_keys", "proj/.git/hooks/pre-commit", ".local/bin/x"):
        r = c.call("write", {"path": "~/" + rel, "content": "evil"})
        assert r.text.startswith(NO_APPROVER), (rel, r.text)
        r = c.call("edit", {"path": "~/" + rel, "old_string": "PUBLIC", "new_string": "evil"})
        assert r.text.startswith(NO_APPROVER), (rel, r.text)
    assert (ruled.home / ".bashrc").read_text() == bashrc
    r = c.call("write", {"path": "proj/ok.txt", "content": "fine"})
    assert not r.result["isError"], r.text


def test_search_rules_keep_the_per_entry_policy(ruled):
    c = ruled.client()
    for args in (
        {"pattern": "SECRET", "path": "~"},
        {"pattern": "SECRET", "path": "proj"},
        {"pattern": "SECRET", "path": "~", "hidden": True},
    ):
        r = c.call("grep", args)
        assert _leaks(ruled, r) == [], (args, r.text)
    for args in ({"pattern": "**", "path": "~"}, {"pattern": "*", "path": "proj/links"}):
        r = c.call("find", args)
        assert _leaks(ruled, r) == [], (args, r.text)
    r = c.call("ls", {"path": "~/.ssh"})
    assert _leaks(ruled, r) == [] and r.result["isError"], r.text


# -- "Always allow calls like this" with an edited rule ---------------------------------------


@pytest.fixture
def prompted(start_bridge, env, tmp_path, monkeypatch):
    """A bridge with a control API; bash and read ask; a private HOME with a key."""
    from ..support.control_client import Api

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET-edited-rule\n")
    monkeypatch.setenv("HOME", str(home))
    running = start_bridge(
        {
            "roots": [env["root"], str(home)],
            "approval": {"tiers": {"read": "prompt", "bash": "prompt"}},
        },
        control=True,
    )
    running.api = Api(running.runner.control)
    return running


@pytest.mark.parametrize(
    "edited",
    ["bash(*)", "bash", "bash(* *)", "read(/**)", "bash(echo *)\nread(~/**)", "mcp__x__y"],
)
def test_an_edited_always_allow_rule_cannot_smuggle_a_broad_or_foreign_rule(prompted, edited):
    c = prompted.client()
    with held_call(prompted, c) as p:
        r = prompted.api.call(
            "POST", f"/api/pending/{p.id}", {"decision": "allow_always", "rule": edited}
        )
        assert r.status == 400 and r.json["error"].startswith("rule not saved: "), r.json
        assert len(prompted.runner.bridge.rules) == 0
        assert prompted.api.call("POST", f"/api/pending/{p.id}", {"decision": "deny"}).status == 200
    r = c.call("read", {"path": "~/.ssh/id_rsa"})
    assert "SECRET-edited-rule" not in r.text and r.result["isError"]


def test_an_edited_rule_for_the_same_tool_is_still_saved(prompted):
    c = prompted.client()
    with held_call(prompted, c) as p:
        r = prompted.api.call(
            "POST", f"/api/pending/{p.id}", {"decision": "allow_always", "rule": "bash(echo *)"}
        )
        assert r.status == 200, r.json
    assert "there" in c.call("bash", {"command": "echo there"}).text


def wait_pending(running):
    from ..support.helpers import wait_for

    wait_for(lambda: running.runner.snapshot().pending)
    return list(running.runner.snapshot().pending)


@contextlib.contextmanager
def held_call(running, c, command: str = "echo hi"):
    """A bash call waiting for a human while a test approver is attached: yields its pending
    entry; the block decides it, and the call has ended when the block is left."""
    from ..support.helpers import in_thread

    approver = running.runner.attach_approver("test")
    try:
        t, _ = in_thread(c.call, "bash", {"command": command})
        [p] = wait_pending(running)
        yield p
        t.join(60)
    finally:
        running.runner.detach_approver(approver)


# -- upstream tools: rules, pins and protected paths ------------------------------------------


def test_an_upstream_rule_never_covers_a_protected_path_and_a_changed_tool_asks(
    start_bridge, tmp_path, monkeypatch
):
    """``mcp__t__echo(text=*)`` stands in for a local filesystem server's ``read_file(path=*)``:
    the bridge cannot know what the upstream opens, but a string argument that names a
    protected or persistence location always asks; other calls run, until the tool changes."""
    from ..integration.test_upstream_servers import ready, stdio_spec

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    state = str(tmp_path / "state")
    os.makedirs(state)
    running = start_bridge(
        {
            "mcp_servers": {"t": stdio_spec(state)},
            "rules": {"allow": ["mcp__t__echo(text=*)", "mcp__t__mutate"]},
        }
    )
    ready(running)
    c = running.client()
    for text in (f"{home}/.ssh/id_rsa", "~/.ssh/id_rsa", "file://" + str(home) + "/.netrc"):
        r = c.call("mcp__t__echo", {"text": text})
        assert r.text.startswith(NO_APPROVER), (text, r.text)
    for text in ("~/.bashrc", "see ~/.config/autostart/x.desktop"):
        assert c.call("mcp__t__echo", {"text": text}).text.startswith(NO_APPROVER), text
    assert c.call("mcp__t__echo", {"text": "hello"}).text == "hello"  # allowed by rule: pinned
    assert c.call("mcp__t__mutate").text == "mutated"
    wait_for(lambda: running.runner.snapshot().servers[0].changed == ("mcp__t__echo",))
    assert c.call("mcp__t__echo", {"text": "again"}).text.startswith(NO_APPROVER)


# -- grep: nothing about a left-out file's content reaches the agent ---------------------------


def _grep_text(s: Serve, pattern: str, path: str) -> str:
    r = s.client().call("grep", {"pattern": pattern, "path": path, "hidden": True})
    text = r.text.replace(pattern, "<pattern>")  # the agent's own pattern, echoed
    assert [m for m in s.markers if m in text] == [], text
    return text


@pytest.mark.parametrize(
    ("path", "hit", "miss"),
    [
        ("proj", "^SECRET-dotenv$", "^SECRET-dotenX$"),  # a secret by its name (.env)
        ("proj/hard", "^SECRET-ssh-rsa$", "^SECRET-ssh-rsX$"),  # hard links to ~/.ssh/id_rsa
        ("proj", "^SECRET-pem$", "^SECRET-peX$"),
    ],
)
def test_grep_is_no_oracle_for_the_content_of_left_out_files(ruled, path, hit, miss):
    """Whether a left-out file matched must change nothing in the answer: else a regex
    bisection reads the secret one character at a time."""
    assert _grep_text(ruled, hit, path) == _grep_text(ruled, miss, path)


def test_grep_more_matches_count_is_no_oracle(ruled):
    """Past the match cap the rest is only counted: a left-out file must not count either."""
    decoy = ruled.home / "proj" / "aaa-decoy"
    decoy.mkdir(exist_ok=True)
    (decoy / "d.txt").write_text("DECOY\n" * 600)
    try:
        hit = _grep_text(ruled, "DECOY|^SECRET-dotenv$", "proj")
        miss = _grep_text(ruled, "DECOY|^SECRET-dotenX$", "proj")
        assert "more matches not shown" in hit
        assert hit == miss
    finally:
        (decoy / "d.txt").unlink()
        decoy.rmdir()


# -- session grants in the rules listing: agent text and session ids --------------------------

EVIL_CLIENT = "evil\x1b]0;pwned\x07\x1b[2J\u202egnp.exe"


def test_rules_list_renders_a_grant_safely_and_never_shows_the_session_id(prompted, cli):
    from ..support.helpers import Mcp

    c = Mcp(prompted.port, client=EVIL_CLIENT)
    c.initialize()
    with held_call(prompted, c) as p:
        assert prompted.runner.decide(p.id, "allow_session")
    assert prompted.runner.snapshot().grants
    for args in (["rules", "list"], ["rules", "list", "--json"]):
        out = cli(*args)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout and "\u202e" not in out.stdout, out.stdout
    text = cli("rules", "list").stdout
    assert "session grant  bash  `echo hi …`  for evil" in text
    assert c.sid is not None and c.sid[:8] not in text, text  # the hash, not the id


def test_an_upstream_servers_stderr_reaches_no_terminal_raw(start_bridge, env, cli):
    """A server's stderr and exit reason are its words: ``a2a-bridge servers`` and the status
    API show them rendered safe, like agent text."""
    import sys

    from ..support.control_client import Api

    script = (
        "import sys; print('bad \\x1b]0;pwned\\x07\\x1b[2J\\u202egnp.exe \\x9b31m', "
        "file=sys.stderr); sys.exit(3)"
    )
    running = start_bridge(
        {"mcp_servers": {"quits": {"command": sys.executable, "args": ["-c", script]}}},
        control=True,
    )

    def failed():
        return any(s.state == "failed" for s in running.runner.snapshot().servers)

    wait_for(failed, 60)
    out = cli("servers")
    assert out.returncode == 0, out.stderr
    assert "bad" in out.stdout and "pwned" in out.stdout
    for raw in ("\x1b", "\x07", "\u202e", "\x9b"):
        assert raw not in out.stdout, (raw, out.stdout)
    status = Api(running.runner.control).call("GET", "/api/status").json
    assert "\x1b" not in json.dumps(status["servers"], ensure_ascii=False)


def test_allow_for_this_session_on_bash_never_covers_a_protected_path(prompted):
    c = prompted.client()
    # The grant names every program the protected commands below use: only the path asks.
    held = "echo granted; cd .; cat /dev/null; cp /dev/null /dev/null"
    with held_call(prompted, c, held) as p:
        assert p.grant_label == "Allow `echo granted …`, `cd …`, `cat …`, `cp …` for this session"
        assert prompted.runner.decide(p.id, "allow_session")
    assert "granted" in c.call("bash", {"command": "echo granted"}).text
    for command in ("cat ~/.ssh/id_rsa", "cd ~ && cat .ssh/id_*", "cp /dev/null ~/.bashrc"):
        r = c.call("bash", {"command": command})
        # A session grant runs bash in the box (issue 22), where these are not there.
        assert "SECRET-edited-rule" not in r.text and _kept_out(r), r.text


def test_the_upstream_pins_file_is_the_bridges_own_wherever_the_config_is(start_bridge, env):
    """Pins decide whether a changed upstream tool keeps its allow rules: an agent that could
    write them (a ``write(/**)`` rule, a config outside the default folder) would re-approve
    its own changed tool."""
    pins = os.path.join(os.path.dirname(env["config"]), "upstream-pins.json")
    running = start_bridge(
        {
            "roots": [env["root"], os.path.dirname(env["config"])],
            "approval": {"tiers": {"write": "allow", "read": "allow"}},
            "rules": {"allow": ["write(/**)", "read(/**)"]},
        }
    )
    c = running.client()
    r = c.call("write", {"path": pins, "content": '{"tools": {}}'})
    assert r.text.startswith(NO_APPROVER), r.text
    assert not os.path.exists(pins)
    r = c.call("write", {"path": os.path.join(env["root"], "ok.txt"), "content": "x"})
    assert not r.result["isError"], r.text


def test_unreadable_pins_suspend_every_upstream_allow(start_bridge, env, tmp_path):
    """A pins file that cannot be read (corrupted, or planted) must not turn every upstream
    tool into "never approved, pin it now": each asks once again, as the log says."""
    from ..integration.test_upstream_servers import ready, stdio_spec

    pins = os.path.join(os.path.dirname(env["config"]), "upstream-pins.json")
    os.makedirs(os.path.dirname(pins), exist_ok=True)
    with open(pins, "w") as f:
        f.write("{not json")
    state = str(tmp_path / "state")
    os.makedirs(state)
    running = start_bridge(
        {
            "mcp_servers": {"t": stdio_spec(state)},
            "rules": {"allow": ["mcp__t__echo"]},
            "approval": {"tiers": {"mcp__t__image": "allow"}},
        }
    )
    ready(running)
    c = running.client()
    assert c.call("mcp__t__echo", {"text": "x"}).text.startswith(NO_APPROVER)
    assert c.call("mcp__t__image").text.startswith(NO_APPROVER)
    from ..support.helpers import in_thread

    approver = running.runner.attach_approver("test")
    t, out = in_thread(c.call, "mcp__t__echo", {"text": "y"})
    [p] = wait_pending(running)
    assert p.upstream is not None and p.upstream.changed
    running.runner.decide(p.id, "approve")  # the human saw this definition: pinned again
    t.join(60)
    assert out[0].text == "y"
    running.runner.detach_approver(approver)
    assert c.call("mcp__t__echo", {"text": "z"}).text == "z"  # the rule applies again
