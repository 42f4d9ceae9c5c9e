"""Rules end to end: a real bridge, real MCP calls over HTTP, the control API and the CLI.

With no approver attached, a call that needs a human is refused at once with
"approval required but no approver is available" - which is how these tests see "it asks"
without waiting on a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from omp_a2a_bridge.server.cli.watch import PROMPT

from ..conftest import require_system
from ..support.control_client import Api
from ..support.helpers import Watch, in_thread, read_text, wait_for
from ..unit.test_rules import TRICKY

ASKS = "approval required but no approver is available"  # + why, when a path escalated


@pytest.fixture
def start_bridge(start_bridge):
    """These tests are about what a bash command's text lets run unasked, so bash waits at
    ``prompt`` here (its default tier is ``box`` since issue 22: unasked, in the box)."""

    def start(config=None, **opts):
        config = json.loads(json.dumps(config or {}))
        config.setdefault("approval", {}).setdefault("tiers", {}).setdefault("bash", "prompt")
        return start_bridge(config, **opts)

    return start


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private home with ~/proj; the bridge (and git, and ~ in rules) see it as HOME."""
    h = tmp_path / "home"
    (h / "proj" / "src").mkdir(parents=True)
    (h / "proj" / "a.txt").write_text("inside proj\n")
    (h / "other.txt").write_text("outside proj\n")
    (h / ".ssh").mkdir()
    (h / ".ssh" / "id_rsa").write_text("-----BEGIN KEY-----\n")
    monkeypatch.setenv("HOME", str(h))
    return str(h)


@pytest.fixture
def repo(env, home):
    """The first root is a git repository with one commit."""
    require_system("git", packages="git")
    root = env["root"]
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
            cwd=root,
            check=True,
            capture_output=True,
        )
    return root


@pytest.fixture
def ruled(start_bridge, repo, home):
    running = start_bridge(
        {
            "roots": [repo, home],
            "approval": {"timeout_s": 20, "tiers": {"read": "prompt"}},
            "rules": {
                "allow": ["bash(git status)", "bash(git diff *)", "read(~/proj/**)"],
            },
            "deny": ["nothing_by_that_name"],  # another key: kept as written on every edit
        },
        control=True,
    )
    running.api = Api(running.runner.control)
    return running


def _done(running, call_id=None):
    records = [r for r in running.audit() if r["phase"] == "done"]
    return records[-1] if call_id is None else next(r for r in records if r["id"] == call_id)


def test_rules_allow_exactly_what_they_say(ruled, home):
    c = ruled.client("agent")
    r = c.call("bash", {"command": "git status"})
    assert not r.text.startswith(ASKS) and "branch" in r.text.lower(), r.text
    done = _done(ruled)
    assert (done["decided_by"], done["rule"], done["outcome"]) == ("rule", "bash(git status)", "ok")
    r = c.call("bash", {"command": "git diff --stat HEAD"})
    assert not r.text.startswith(ASKS) and _done(ruled)["rule"] == "bash(git diff *)"
    r = c.call("read", {"path": os.path.join(home, "proj", "a.txt")})
    assert "inside proj" in r.text
    assert _done(ruled)["rule"] == "read(~/proj/**)"
    # The real path decides: a relative path or a .. that lands in ~/proj is in, others out.
    assert "inside proj" in c.call("read", {"path": f"{home}/proj/src/../a.txt"}).text
    assert c.call("read", {"path": f"{home}/proj/../other.txt"}).text.startswith(ASKS)
    assert c.call("read", {"path": f"{home}/other.txt"}).text.startswith(ASKS)
    # Near misses ask.
    for command in ("git status --short", "git stash", "git log", "echo hi"):
        assert c.call("bash", {"command": command}).text.startswith(ASKS), command
        assert _done(ruled)["decided_by"] == "policy"  # no approver: refused by policy


@pytest.mark.parametrize("command", [t for t in TRICKY if t != "git status; "])
def test_every_tricky_variant_asks_over_http(ruled, command):
    r = ruled.client().call("bash", {"command": command})
    assert r.result["isError"] is True
    assert r.text.startswith(ASKS), (command, r.text)


def test_deny_beats_allow(start_bridge, repo, home):
    running = start_bridge(
        {
            "roots": [repo, home],
            "approval": {"tiers": {"bash": "allow"}},
            "rules": {
                "allow": ["bash(git diff *)"],
                "deny": ["bash(git diff --stat *)", "bash(rm -rf *)"],
            },
        }
    )
    c = running.client()
    r = c.call("bash", {"command": "git diff --stat"})
    assert r.result["isError"] is True
    assert r.text == "denied by rule bash(git diff --stat *) (rules.deny)"
    done = _done(running)
    assert (done["outcome"], done["decided_by"], done["rule"]) == (
        "denied",
        "rule",
        "bash(git diff --stat *)",
    )
    # Even inside a substitution, and even though bash's tier is allow.
    r = c.call("bash", {"command": "echo $(rm -rf ~/proj)"})
    assert r.text == "denied by rule bash(rm -rf *) (rules.deny)"
    assert os.path.isdir(os.path.join(home, "proj"))
    assert c.call("bash", {"command": "git diff"}).result["isError"] is False
    # A command that could hide a denied one (computed eval) asks, although bash is allow-tier.
    hidden = 'eval "$(echo cm0gLXJmIH4vcHJvag== | base64 -d)"'  # rm -rf ~/proj
    assert c.call("bash", {"command": hidden}).text.startswith(ASKS)
    assert os.path.isdir(os.path.join(home, "proj"))
    assert c.call("bash", {"command": "echo fine"}).text == "fine"  # no deny match, tier allow


def test_a_deny_rule_sees_the_program_named_by_its_path(start_bridge, repo, home):
    """Outside review F2: ``/bin/rm`` ran past ``bash(rm *)`` and deleted the file."""
    running = start_bridge(
        {
            "roots": [repo, home],
            "approval": {"tiers": {"bash": "allow"}},
            "rules": {"deny": ["bash(rm *)", "bash(git push *)"]},
        }
    )
    c = running.client()
    victims = []
    for n, command in enumerate(
        ["rm victim1", "/bin/rm victim2", "./../../bin/rm victim3", "sudo -n /bin/rm victim4",
         "X=1 /usr/bin/env -i rm victim5", "busybox rm victim6", "command -p rm victim7"],
        start=1,
    ):  # fmt: skip
        victim = os.path.join(repo, f"victim{n}")
        Path(victim).write_text("keep me\n")
        victims.append(victim)
        r = c.call("bash", {"command": command})
        assert r.result["isError"] is True, command
        assert r.text == "denied by rule bash(rm *) (rules.deny)", (command, r.text)
    assert all(os.path.exists(v) for v in victims)
    r = c.call("bash", {"command": "timeout 5 /usr/bin/git push origin main"})
    assert r.text == "denied by rule bash(git push *) (rules.deny)"
    assert c.call("bash", {"command": "/bin/echo fine"}).text == "fine"  # no deny match


def test_a_deny_rule_sees_git_push_past_global_options(start_bridge, repo, home):
    """Outside review: ``git -C . push`` ran past ``bash(git push *)``."""
    remote = os.path.join(home, "remote.git")
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True, capture_output=True)
    running = start_bridge(
        {
            "roots": [repo, home],
            "approval": {"tiers": {"bash": "allow"}},
            "rules": {"deny": ["bash(git push *)"]},
        }
    )
    c = running.client()
    for command in (
        f"git -C . push {remote} HEAD:refs/heads/a",
        f"git --no-pager push {remote} HEAD:refs/heads/b",
        f"git -P push {remote} HEAD:refs/heads/c",
        f"git --git-dir=.git push {remote} HEAD:refs/heads/d",
        f"git --work-tree . push {remote} HEAD:refs/heads/e",
        f"timeout 5 git -P push {remote} HEAD:refs/heads/f",
    ):
        r = c.call("bash", {"command": command})
        assert r.text == "denied by rule bash(git push *) (rules.deny)", (command, r.text)
    refs = subprocess.run(
        ["git", "--git-dir", remote, "for-each-ref"], check=True, capture_output=True, text=True
    )
    assert refs.stdout == ""  # nothing was pushed
    r = c.call("bash", {"command": "git -C . rev-parse --is-inside-work-tree"})
    assert r.text.strip() == "true"  # another subcommand runs


def test_protected_paths_always_ask_whatever_the_rules_say(start_bridge, home):
    running = start_bridge(
        {
            "roots": [home],
            "rules": {"allow": ["read(~/.ssh/**)", "read"]},
        },
        control=True,
    )
    c = running.client()
    assert c.call("read", {"path": f"{home}/.ssh/id_rsa"}).text.startswith(ASKS)
    assert "outside proj" in c.call("read", {"path": f"{home}/other.txt"}).text
    # And "always allow" offers no rule for it: none could ever apply.
    running.runner.attach_approver("test")
    t, out = in_thread(c.call, "read", {"path": f"{home}/.ssh/id_rsa"})
    [p] = running.pending()
    assert p.proposed_rule is None
    api = Api(running.runner.control)
    assert api.call("GET", f"/api/pending/{p.id}").json["proposed_rule"] is None
    r = api.call("POST", f"/api/pending/{p.id}", {"decision": "allow_always"})
    assert r.status == 400 and "no rule can allow" in r.json["error"]
    api.call("POST", f"/api/pending/{p.id}", {"decision": "deny"})
    t.join(60)
    assert out[0].text == "denied by the user"


def test_always_allow_saves_a_narrow_rule_and_the_cli_removes_it(ruled, env, cli):
    c = ruled.client("claude-code")
    approver = ruled.runner.attach_approver("test")
    t, out = in_thread(c.call, "bash", {"command": "git log --oneline"})
    [p] = ruled.pending()
    pending = ruled.api.call("GET", f"/api/pending/{p.id}").json
    assert pending["proposed_rule"] == "bash(git log *)"
    r = ruled.api.call("POST", f"/api/pending/{p.id}", {"decision": "allow_always"})
    assert r.status == 200, r
    t.join(60)
    assert "init" in out[0].text
    ruled.runner.detach_approver(approver)  # from here on, "asks" is an immediate refusal

    # Effective at once (before the file write lands), and saved with the rest kept.
    r = c.call("bash", {"command": "git log -5"})
    assert "init" in r.text
    assert _done(ruled)["rule"] == "bash(git log *)"
    assert c.call("bash", {"command": "git push"}).text.startswith(ASKS)
    cfg = wait_for(
        lambda: (
            (d := json.loads(read_text(env["config"])))["rules"]["allow"][-1] == "bash(git log *)"
            and d
        )
    )
    assert cfg["deny"] == ["nothing_by_that_name"]
    assert "approval" in cfg and cfg["approval"]["tiers"].get("bash") == "prompt"

    listed = json.loads(cli("rules", "list", "--json").stdout)
    assert listed["allow"][-1] == "bash(git log *)"
    r = cli("rules", "rm", "bash(git log *)")
    assert r.returncode == 0, r.stderr
    assert c.call("bash", {"command": "git log -5"}).text.startswith(ASKS)  # at once, no restart
    assert "bash(git log *)" not in json.loads(read_text(env["config"]))["rules"]["allow"]


def test_always_allow_with_an_edited_rule(ruled, env):
    c = ruled.client()
    approver = ruled.runner.attach_approver("test")
    t, _ = in_thread(c.call, "bash", {"command": "git log --oneline"})
    [p] = ruled.pending()
    bad = ruled.api.call(
        "POST", f"/api/pending/{p.id}", {"decision": "allow_always", "rule": "bash(git log; x)"}
    )
    assert bad.status == 400 and bad.json["error"].startswith("rule not saved: ")
    assert ruled.runner.snapshot().pending  # still waiting
    r = ruled.api.call(
        "POST", f"/api/pending/{p.id}", {"decision": "allow_always", "rule": "bash(git log -5)"}
    )
    assert r.status == 200
    t.join(60)
    ruled.runner.detach_approver(approver)
    assert "init" in c.call("bash", {"command": "git log -5"}).text
    assert c.call("bash", {"command": "git log -6"}).text.startswith(ASKS)
    wait_for(lambda: "bash(git log -5)" in read_text(env["config"]))


def test_rules_api_add_test_remove_and_errors(ruled, env):
    api = ruled.api
    data = api.call("GET", "/api/rules").json
    assert data["allow"] == ["bash(git status)", "bash(git diff *)", "read(~/proj/**)"]
    assert data["ask"] == data["deny"] == data["grants"] == []

    r = api.call("POST", "/api/rules", {"list": "deny", "rule": "bash(git push *)"})
    assert r.status == 200 and r.json["deny"] == ["bash(git push *)"]
    bad = api.call("POST", "/api/rules", {"list": "allow", "rule": "bash(a && b)"})
    assert bad.status == 400
    assert bad.json["error"].startswith(f"invalid config at {env['config']}: rules.allow[3]: ")
    assert api.call("POST", "/api/rules", {"list": "maybe", "rule": "x"}).status == 400
    assert api.call("POST", "/api/rules", {"rule": ""}).status == 400

    def test(command):
        return api.call("POST", "/api/rules/test", {"command": command}).json

    assert test("git status") | {"escalation": None} == {
        "tool": "bash",
        "outcome": "allow",
        "decided_by": "rule",
        "list": "allow",
        "rule": "bash(git status)",
        "rule_display": "bash(git status)",
        "index": 0,
        "tier": "prompt",
        "unsafe": None,
        "escalation": None,
        "verdict": "run_in_box",  # an allow rule for bash means "in the box"
        "why": "a rule decides",
        "deciding_rule": "bash(git status)",
        "invalid": None,
    }
    assert test("git push origin main")["outcome"] == "deny"
    t = test("git status > out")
    # With a bash deny rule present, an unallowable command asks even on an allow tier.
    assert (t["outcome"], t["decided_by"], t["unsafe"]) == ("ask", "guard", "redirection > out")
    read = api.call(
        "POST", "/api/rules/test", {"tool": "read", "arguments": {"path": "~/proj/a.txt"}}
    ).json
    assert read["rule"] == "read(~/proj/**)" and read["outcome"] == "allow"
    assert api.call("POST", "/api/rules/test", {"command": 3}).status == 400

    # Remove by index and by URL-encoded text; a stale one is a 404.
    assert api.call("DELETE", "/api/rules/deny/0").json["deny"] == []
    key = urllib.parse.quote("read(~/proj/**)", safe="")
    assert "read(~/proj/**)" not in api.call("DELETE", f"/api/rules/allow/{key}").json["allow"]
    assert api.call("DELETE", f"/api/rules/allow/{key}").status == 404
    assert api.call("DELETE", "/api/rules/allow/99").status == 404
    assert api.call("DELETE", "/api/rules/nope/0").status == 400
    saved = json.loads(read_text(env["config"]))
    assert saved["rules"]["allow"] == ["bash(git status)", "bash(git diff *)"]
    assert saved["deny"] == ["nothing_by_that_name"]
    # Without the secret: nothing.
    assert Api(ruled.runner.control, secret=False).call("GET", "/api/rules").status == 401


def test_session_grants_are_listed_and_revocable(ruled):
    c = ruled.client("granted")
    approver = ruled.runner.attach_approver("test")
    t, _ = in_thread(c.call, "write", {"path": "g.txt", "content": "x"})
    [p] = ruled.pending()
    ruled.api.call("POST", f"/api/pending/{p.id}", {"decision": "allow_session"})
    t.join(60)
    ruled.runner.detach_approver(approver)
    grants = ruled.api.call("GET", "/api/rules").json["grants"]
    session = grants[0]["session"]  # the hash UIs show
    root = ruled.env["root"]  # a git top-level: the grant's scope is that project
    label = f"Allow writes in {root} for this session"
    assert grants == [
        {
            "sid": c.sid,
            "session": session,
            "client": "granted",
            "machine": "default",  # from the token: the grant is this machine's session's
            "tool": "write",
            "scope": root,
            "label": label,
        }
    ]
    assert ruled.runner.snapshot().grants[0].tool == "write"
    assert ruled.api.call("GET", "/api/grants").json == {"grants": grants}
    assert c.call("write", {"path": "g2.txt", "content": "y"}).result["isError"] is False
    assert ruled.api.call("DELETE", f"/api/grants/{c.sid}/write").status == 204
    assert ruled.api.call("DELETE", f"/api/grants/{c.sid}/write").status == 404
    assert c.call("write", {"path": "g3.txt", "content": "z"}).text.startswith(ASKS)


def test_cli_rules_add_test_rm_and_offline(ruled, env, cli):
    r = cli("rules", "add", "bash(npm test *)")
    assert r.returncode == 0 and "added to rules.allow: bash(npm test *)" in r.stdout
    r = cli("rules", "add", "--deny", "bash(git push *)", "--json")
    assert json.loads(r.stdout)["deny"] == ["bash(git push *)"]
    out = cli("rules", "list").stdout
    assert "deny[0]  bash(git push *)" in out and "allow[3]  bash(npm test *)" in out
    r = cli("rules", "test", "git status && rm -rf ~")
    assert r.returncode == 0 and "asks a human" in r.stdout
    r = cli("rules", "test", "git push --force")
    assert "is refused: rules.deny[0] bash(git push *)" in r.stdout
    j = json.loads(cli("rules", "test", "--json", "npm test --watch").stdout)
    assert (j["outcome"], j["rule"]) == ("allow", "bash(npm test *)")
    r = cli("rules", "add", "bash(a; b)")
    assert r.returncode == 1 and "rules.allow[4]" in r.stderr
    assert cli("rules", "rm", "--deny", "0").returncode == 0
    assert ruled.runner.snapshot().rules.deny == ()
    assert cli("rules", "rm", "bash(not there)").returncode == 1

    ruled.runner.stop()  # without a bridge, the CLI edits the file
    assert cli("rules", "add", "--ask", "write(**/*.lock)").returncode == 0
    saved = json.loads(read_text(env["config"]))
    assert saved["rules"]["ask"] == ["write(**/*.lock)"]
    assert saved["deny"] == ["nothing_by_that_name"]
    r = cli("rules", "test", "git status")
    assert "rules.allow[0] bash(git status)" in r.stdout and "not running" in r.stdout


def test_a_bad_rule_stops_the_start(start_bridge, env):
    from omp_a2a_bridge.server.core.runner import StartupError

    with pytest.raises(StartupError) as e:
        start_bridge({"rules": {"allow": ["bash(git status)", "read(!x)"]}})
    assert str(e.value) == (
        f"invalid config at {env['config']}: rules.allow[1]: "
        "negation (!) is not supported: use a deny or ask rule"
    )


def test_watch_edits_the_proposed_rule_before_saving(ruled, env):
    c = ruled.client("watched")
    w = Watch()
    try:
        wait_for(lambda: "terminal (watch)" in ruled.runner.snapshot().approvers)
        t, out = in_thread(c.call, "bash", {"command": "git log --oneline"})
        w.wait_out("[A]lways would save: bash(git log *)")  # watch drops what is typed earlier
        w.wait_out(PROMPT)
        w.send("A")
        w.wait_out("rule to save [")
        w.send("bash(git log --oneline)")  # an edited rule
        t.join(60)
        assert "init" in out[0].text
        wait_for(
            lambda: "bash(git log --oneline)" in ruled.runner.snapshot().rules.to_json()["allow"]
        )
        # Keeping the proposal: Enter.
        t, out = in_thread(c.call, "bash", {"command": "git show --stat"})
        w.wait_out(PROMPT, 2)
        w.send("A")
        w.wait_out("rule to save [", 2)
        w.send("")
        t.join(60)
        wait_for(lambda: "bash(git show *)" in ruled.runner.snapshot().rules.to_json()["allow"])
        stdout = w.finish()
    finally:
        w.close()
    assert "rule to save [bash(git show *)]" in stdout
    assert c.call("bash", {"command": "git log --oneline"}).text != ASKS
    # The live rules change at once; the file is written by a worker after that: waited for.
    saved = wait_for(
        lambda: (
            "bash(git show *)" in (a := json.loads(read_text(env["config"]))["rules"]["allow"])
            and a
        )
    )
    assert saved[-2:] == ["bash(git log --oneline)", "bash(git show *)"]


def test_cli_approve_with_a_rule(ruled, cli):
    c = ruled.client()
    approver = ruled.runner.attach_approver("test")
    t, _ = in_thread(c.call, "bash", {"command": "git log -1"})
    [p] = ruled.pending()
    r = cli("approve", p.id, "--rule", "bash(git log -1)")
    assert r.returncode == 0, r.stderr
    t.join(60)
    ruled.runner.detach_approver(approver)
    assert "bash(git log -1)" in ruled.runner.snapshot().rules.to_json()["allow"]


def test_tray_rules_submenu_model(ruled):
    from omp_a2a_bridge.server.present.textsafe import shorten
    from omp_a2a_bridge.tray.menu import menu_model

    c = ruled.client("granted")
    approver = ruled.runner.attach_approver("test")
    t, _ = in_thread(c.call, "write", {"path": "g.txt", "content": "x"})
    [p] = ruled.pending()
    ruled.runner.decide(p.id, "allow_session")
    t.join(60)
    ruled.runner.detach_approver(approver)
    items = menu_model(ruled.runner.snapshot())
    scope = shorten(ruled.env["root"], 60).text
    rules = next(i for i in items if i.text.startswith("Rules ("))
    assert rules.text == "Rules (4)"
    entries = [(i.text, i.submenu[0].text, i.submenu[0].action) for i in rules.submenu]
    assert entries == [
        ("allow: bash(git status)", "Remove", ("rule_remove", "allow", "bash(git status)")),
        ("allow: bash(git diff *)", "Remove", ("rule_remove", "allow", "bash(git diff *)")),
        ("allow: read(~/proj/**)", "Remove", ("rule_remove", "allow", "read(~/proj/**)")),
        (f"session: write {scope} for granted", "Revoke", ("grant_revoke", c.sid, "write")),
    ]
    assert ruled.runner.revoke_grant(c.sid, "write") is True
    assert ruled.runner.snapshot().grants == ()


def test_outside_the_roots_a_rule_may_allow(start_bridge, env, home):
    """Outside the roots is the one escalation a rule may cover (branch pathpolicy's
    ``Escalation.always_asks`` is False for it); a plain-text escalation always asks."""
    from omp_a2a_bridge.server.policy import paths

    running = start_bridge({"roots": [env["root"]], "rules": {"allow": ["read(~/proj/**)"]}})
    r = running.client().call("read", {"path": f"{home}/proj/a.txt"})
    if hasattr(paths, "EscalationKind"):
        assert "inside proj" in r.text
        assert _done(running)["rule"] == "read(~/proj/**)"
    else:
        assert r.text.startswith(ASKS)


@pytest.mark.parametrize(
    ("command", "config_env"),
    [
        # A variable the bridge has and bash does not (the scrubbed environment): bash expands
        # it to nothing and reads the key; the check once expanded the bridge's value.
        ("cat ${OMP_TEST_ONLY_IN_BRIDGE}{home}/.aws/credentials", {}),
        ("cat $OMP_TEST_ONLY_IN_BRIDGE{home}/.aws/credentials", {}),
        # A variable bash.env sets (and the bridge does not have): expanded as bash will.
        ("cat $D/.aws/credentials", {"set": {"D": "{home}"}}),
        ("cat ~/../.aws/credentials", {"set": {"HOME": "{home}/proj"}}),
    ],
)
def test_the_command_check_expands_variables_as_bash_will(
    start_bridge, env, home, monkeypatch, command, config_env
):
    monkeypatch.setenv("OMP_TEST_ONLY_IN_BRIDGE", "x11")
    home = Path(home)
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = PLANTED-AWS\n")
    bash_env = json.loads(json.dumps(config_env).replace("{home}", str(home)))
    running = start_bridge(
        {
            "roots": [str(home / "proj")],
            "approval": {"tiers": {"bash": "prompt"}},
            "rules": {"allow": ["bash(cat *)"]},
            "bash": {"env": bash_env},
        }
    )
    c = running.client()
    r = c.call("bash", {"command": command.replace("{home}", str(home)), "cwd": str(home / "proj")})
    assert "PLANTED-AWS" not in r.raw.decode(), r.text
    # Allowed by the rule, it runs in the box (issue 22), where the key is not there to read.
    assert r.result["isError"] and "No such file" in r.text, r.text
    # The rule still runs what it covers, variables included.
    r = c.call("bash", {"command": "cat $PWD/a.txt", "cwd": str(home / "proj")})
    assert r.text.strip() == "inside proj", r.text


def test_offline_rules_test_judges_paths_like_the_live_bridge(start_bridge, env, home, cli):
    """``rules test --tool read PATH`` with no bridge running gives the live bridge's answer
    (the same function): path rules match, escalations and tiers count."""
    os.makedirs(os.path.join(home, "src"), exist_ok=True)
    running = start_bridge(
        {
            "roots": [home],
            "approval": {"tiers": {"write": "allow"}},
            "rules": {"allow": ["read(~/src/**)"], "deny": ["read(**/secret*)"]},
        },
        control=True,
    )
    cases = [
        ("read", "~/src/a.py"),
        ("read", "~/src/secret.txt"),
        ("read", "src/b.py"),  # relative: from the first root
        ("read", "~/other.txt"),
        ("read", "~/.ssh/id_rsa"),
        ("write", "~/notes.txt"),
        ("write", "~/.bashrc"),
        ("ls", '{"path": "~/src"}'),
        ("nope", "x"),
    ]
    live = {}
    for tool, arg in cases:
        r = cli("rules", "test", "--json", "--tool", tool, arg)
        assert r.returncode == 0, r.stderr
        live[tool, arg] = json.loads(r.stdout)
    assert live["read", "~/src/a.py"]["outcome"] == "allow"
    assert live["read", "~/src/secret.txt"]["outcome"] == "deny"
    running.runner.stop()
    for (tool, arg), expected in live.items():
        r = cli("rules", "test", "--json", "--tool", tool, arg)
        assert r.returncode == 0, r.stderr
        offline = json.loads(r.stdout)
        assert "not running" in offline.pop("note")
        assert offline == expected, (tool, arg)
    text = cli("rules", "test", "--tool", "read", "~/src/secret.txt").stdout
    assert "is refused: rules.deny[0] read(**/secret*)" in text
    text = cli("rules", "test", "--tool", "read", "~/src/a.py").stdout
    assert "runs unattended: rules.allow[0] read(~/src/**)" in text


def test_cli_rules_test_shows_the_types_it_judged(env, cli):
    from ..conftest import write_config

    rule = "mcp__t__delete(id=7, recursive=false, nothing else)"
    write_config(env["config"], {"roots": [env["root"]], "rules": {"allow": [rule]}})
    seen = cli("rules", "test", "--tool", "mcp__t__delete", '{"id": 7, "recursive": false}')
    assert f"runs unattended: rules.allow[0] {rule}" in seen.stdout, seen
    assert '(arguments as JSON: {"id": 7, "recursive": false})' in seen.stdout
    other = cli("rules", "test", "--tool", "mcp__t__delete", '{"id": "7", "recursive": "false"}')
    assert "rules.allow" not in other.stdout, other
    assert '(arguments as JSON: {"id": "7", "recursive": "false"})' in other.stdout
