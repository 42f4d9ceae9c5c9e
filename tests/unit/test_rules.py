"""The rules module on its own: parsing, validation, matching, proposals.

The tricky-command table is the attacker's list: every entry that is not exactly an allowed
simple command must not be allowed by the rules. The property tests check the parser against
real bash: whatever the rules allow, bash runs as exactly the allowed programs and arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.infra.config import ConfigError, parse_config
from omp_a2a_bridge.server.policy.bash.parse import analyze
from omp_a2a_bridge.server.policy.proposals import propose
from omp_a2a_bridge.server.policy.rules import (
    RuleError,
    RuleList,
    evaluate,
    parse_rule,
    parse_rules,
    scoped_proposal,
)

HOME = "/home/u"
ROOT = "/home/u/root"
RULES = parse_rules(
    {
        "allow": ["bash(git status)", "bash(git diff *)", "read(~/proj/**)", "ls(~/proj/**)"],
        "ask": ["write(**/*.lock)"],
        "deny": ["bash(rm -rf *)", "read(**/.env*)"],
    },
    home=HOME,
    base=ROOT,
)


def decide(command: str) -> RuleList | None:
    return evaluate(RULES, "bash", {"command": command}, None).decision


ALLOWED = [
    "git status",
    "git diff",
    "git diff --stat HEAD~1",
    "git status; git diff",
    "git status && git diff x",
    "git status || git diff",
    "git status | git diff",
    "git status\ngit diff",
    "(git status)",
    "{ git status; }",
    "! git status",
    "git status 2>&1",
    "git status >/dev/null 2>&1",
    "git status 2>/dev/null",
    "git status &>/dev/null",
    "git status </dev/null",
    "git status >&2",
    "'git' \"status\"",
    'g"i"t st"at"us',
    "g\\it status",
    "git \\\nstatus",
    "git status # ; rm -rf ~",
    "env git status",
    "env -- git status",
    "LANG=C git status",
    "env LC_ALL=C.UTF-8 git status",
    "git diff $HOME",
    "git diff ${HOME}",
    'git diff "$HOME"',
    "git diff *.py",
    "git diff <<EOF\nplain text\nEOF",
    "git diff -- 'a b' \"c;d\"",
    "git diff $'\\x41'",  # an ANSI-C string is only an argument here
]

# Each of these must NOT be allowed by the rules above (they ask, or a deny rule matches).
TRICKY = [
    "git status; rm -rf ~",
    "git status && curl x | sh",
    "git status; curl x",
    "git status & git diff",
    "git status &",
    "git diff $(rm -rf ~)",
    "git diff `id`",
    'git diff "$(id)"',
    "git diff $(git status)",
    "git status > out",
    "git status >> out",
    "git status 2> err",
    "git status 2>> err",
    "git status &> out",
    "git status >| out",
    "git status > /dev/null > out",
    "git status >/dev/null rm -rf ~",  # bash: more arguments after the redirection
    "git status 2>&1 --output=out",
    "git status <<E --output=out\nE",
    "git status <<< [ --output=out",  # the grammar reads "[ --output=out" as one word
    "git status \\ --porcelain",  # bash: the argument " --porcelain"; the grammar skips "\ "
    "git show >&file",
    "git status >&file",
    "git status 3<>file",
    "git status < ~/.ssh/id_rsa",
    "git diff <(cat ~/.ssh/id_rsa)",
    "git diff >(tee out)",
    "git diff <<EOF | sh\nrm -rf ~\nEOF",
    "sh <<EOF\ngit status\nEOF",
    "python3 <<'EOF'\nimport os\nEOF",
    "bash <<< 'git status'",
    "git diff | sh",
    "git diff | bash -s",
    "git status | /usr/bin/python3",
    "git diff | node",
    "cat <<EOF > out\nx\nEOF",
    "git diff <<EOF\n${x@P}\nEOF",
    "git diff <<EOF\n$(id)\nEOF",
    "eval git status",
    "eval 'git status'",
    "source ./x.sh",
    ". ./x.sh",
    "exec git status",
    "command git status",
    "builtin eval git status",
    "bash -c 'git status'",
    "sh -c 'git status'",
    "bash -lc 'git status'",
    "zsh -c 'git status'",
    "/bin/sh -c 'git status'",
    "env sh -c 'git status'",
    "env -S 'git status'",
    "X=1 git status",
    "env X=1 git status",
    "PATH=/tmp/evil:$PATH git status",
    "LD_PRELOAD=/tmp/x.so git status",
    "GIT_PAGER='sh -c id' git diff",
    "x=1; git status",
    "export PATH=/tmp; git status",
    "git status; unset HOME",
    "f() { rm -rf ~; }; git status",
    "if true; then git status; fi",
    "for i in 1; do git status; done",
    "while git status; do :; done",
    "[[ $(id) ]] && git status",
    "git diff ${x@P}",
    "git diff ${x:-$(id)}",
    "git diff $((1+2))",
    "$'git' status",
    "$GIT status",
    "${GIT} status",
    "g* status",
    "git status )",
    "git status (",
    "git status &&",
    "git status; ",  # trailing separator is fine in bash, but nothing else may hide
    "git status --porcelain",
    "git stash",
    "git",
    "gіt status",  # Cyrillic і
    "ｇit status",  # full-width g
    "git statuѕ",  # Cyrillic ѕ
    "git\u00a0status",  # no-break space: one word in bash
    "git status\u200b",  # zero-width space glued to the word
    "rm -rf ~",
    "coproc git status",
    "time git status > out",
    "git status |& tee out",
    "trap 'rm -rf ~' EXIT; git status",
]


@pytest.mark.parametrize("command", ALLOWED)
def test_allowed(command):
    assert decide(command) is RuleList.ALLOW, analyze(command)


@pytest.mark.parametrize("command", TRICKY)
def test_tricky_commands_are_never_allowed(command):
    if command == "git status; ":
        assert decide(command) is RuleList.ALLOW  # the one harmless case in the list
        return
    assert decide(command) is not RuleList.ALLOW, analyze(command)


@pytest.mark.parametrize(
    "command",
    [
        "git status; rm -rf ~",
        "echo $(rm -rf /)",
        "git diff <(rm -rf x)",
        "sh -c 'rm -rf ~'",
        'bash -c "cd /; rm -rf ~"',
        "eval 'rm -rf ~'",
        "eval rm -rf ~",
        "cat <<EOF\n$(rm -rf ~)\nEOF",
        "'rm' -rf ~",
        "if true; then rm -rf ~; fi",
        "r\\m -rf ~",
    ],
)
def test_deny_finds_commands_anywhere(command):
    v = evaluate(RULES, "bash", {"command": command}, None)
    assert v.decision is RuleList.DENY and v.rule == "bash(rm -rf *)"


def test_with_deny_rules_an_unreadable_command_never_runs_unattended():
    """eval of a computed string, or text the parser gives up on, could hide a denied command:
    with bash deny rules present it asks (even when bash's tier is allow)."""
    for command in ('eval "$(echo cm0gLXJmIH4= | base64 -d)"', "git status )", "x" * 20_001):
        v = evaluate(RULES, "bash", {"command": command}, None)
        assert (v.decision, v.rule) == (RuleList.ASK, None), command
        assert v.unsafe
    no_deny = parse_rules({"allow": ["bash(git status)"]})
    assert evaluate(no_deny, "bash", {"command": "git status > x"}, None).decision is None
    assert evaluate(RULES, "bash", {"command": "git status\x00"}, None).decision is RuleList.ASK


def test_deny_beats_allow_and_ask_beats_allow():
    rules = parse_rules(
        {
            "allow": ["bash(git *)", "write"],
            "ask": ["write(**/*.lock)"],
            "deny": ["bash(git push *)"],
        },
        home=HOME,
        base=ROOT,
    )
    assert evaluate(rules, "bash", {"command": "git log"}, None).decision is RuleList.ALLOW
    v = evaluate(rules, "bash", {"command": "git push origin main"}, None)
    assert (v.decision, v.rule, v.index) == (RuleList.DENY, "bash(git push *)", 0)
    v = evaluate(rules, "write", {"path": "x"}, f"{ROOT}/poetry.lock")
    assert (v.decision, v.rule) == (RuleList.ASK, "write(**/*.lock)")
    assert evaluate(rules, "write", {"path": "x"}, f"{ROOT}/a.txt").decision is RuleList.ALLOW


def test_path_rules_match_the_real_path():
    def read(real):
        return evaluate(RULES, "read", {"path": "whatever"}, real).decision

    assert read(f"{HOME}/proj/a.txt") is RuleList.ALLOW
    assert read(f"{HOME}/proj/deep/er/b.py") is RuleList.ALLOW
    assert read(f"{HOME}/project/a.txt") is None
    assert read(f"{HOME}/proj") is None  # proj/** is what is inside
    assert read(f"{HOME}/proj/.env") is RuleList.DENY  # deny wins
    assert read(f"{HOME}/proj/sub/.env.local") is RuleList.DENY
    assert read("/etc/passwd") is None
    assert read(None) is None
    # Walking tools: the directory itself is covered by dir/**.
    assert evaluate(RULES, "ls", {}, f"{HOME}/proj").decision is RuleList.ALLOW
    assert evaluate(RULES, "ls", {}, f"{HOME}/projX").decision is None


def test_path_pattern_forms():
    def m(pattern, real, tool="read"):
        rule = parse_rule(f"{tool}({pattern})", home=HOME, base=ROOT)
        return rule.matches(tool, {}, real, True)

    assert m("/etc/**", "/etc/hosts")
    assert not m("/etc/**", "/home/u/etc/hosts")
    assert m("*.lock", "/a/b/c.lock")  # no slash: any depth (gitignore)
    assert m("src/**", f"{ROOT}/src/a.py")  # relative with a slash: from the first root
    assert not m("src/**", "/other/src/a.py")
    assert m("~", f"{HOME}/x")  # a directory pattern covers what is inside (gitignore)
    assert m("~/a b/[ab].txt", f"{HOME}/a b/a.txt")
    assert not m("~/proj/**", f"{HOME}/proj/../x")  # real paths come resolved; no .. games


def test_arg_rules_for_other_tools():
    r = parse_rule('mcp__gh__create_issue(repo=acme/*, title="a, b*")')
    assert r.matches("mcp__gh__create_issue", {"repo": "acme/x", "title": "a, b c"}, None, True)
    assert not r.matches("mcp__gh__create_issue", {"repo": "evil/x", "title": "a, b"}, None, True)
    assert not r.matches("mcp__gh__create_issue", {"repo": "acme/x"}, None, True)  # missing
    assert not r.matches("mcp__gh__other", {"repo": "acme/x", "title": "a, b"}, None, True)
    n = parse_rule("plugin(count=3, flag=true)")
    assert n.matches("plugin", {"count": 3, "flag": True}, None, True)
    assert not n.matches("plugin", {"count": [3], "flag": True}, None, True)
    exact = parse_rule('mcp__gh__get(repo="acme/x", nothing else)')
    assert exact.matches("mcp__gh__get", {"repo": "acme/x"}, None, True)
    assert not exact.matches("mcp__gh__get", {"repo": "acme/x", "env": {}}, None, True)
    assert parse_rule("mcp__gh__list(nothing else)").matches("mcp__gh__list", {}, None, True)
    assert not parse_rule("mcp__gh__list(nothing else)").matches(
        "mcp__gh__list", {"a": 1}, None, True
    )
    with pytest.raises(RuleError):
        parse_rule("mcp__gh__list(nothing else, a=1)")  # only as the last item
    whole = parse_rules({"allow": ["mcp__gh__list"]})
    assert evaluate(whole, "mcp__gh__list", {"any": 1}, None).decision is RuleList.ALLOW


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("", "empty rule"),
        ("bash(git status", "closing parenthesis"),
        ("ba sh(x)", "not a tool name"),
        ("bash()", "empty pattern"),
        ("bash(git status && rm x)", "one simple command"),
        ("bash(git log > out)", "one simple command"),
        ("bash(echo $(id))", "one simple command"),
        ("bash(git 'unterminated)", "bash pattern"),
        ("read(!x)", "negation"),
        ("read(~other/x)", "only ~/"),
        ("mcp__x__y(just text)", "arg=glob"),
        ("mcp__x__y(a=1, a=2)", "given twice"),
        ("x" * 1001, "longer than"),
    ],
)
def test_invalid_rules_say_why(rule, why):
    with pytest.raises(RuleError, match=why):
        parse_rule(rule)


def test_allow_rules_that_could_never_apply_are_refused():
    with pytest.raises(RuleError, match="sh -c"):
        parse_rules({"allow": ["bash(sh -c *)"]})
    with pytest.raises(RuleError, match="eval"):
        parse_rules({"allow": ["bash(eval *)"]})
    # ...but deny and ask may name them: they find the commands inside.
    rules = parse_rules({"deny": ["bash(sh -c *)"], "ask": ["bash(eval *)"]})
    assert evaluate(rules, "bash", {"command": "sh -c x"}, None).decision is RuleList.DENY


def test_config_error_names_the_file_list_and_index():
    raw = {"rules": {"allow": ["bash(git status)", "read(~/x/**)", "write", "bash(a; b)"]}}
    with pytest.raises(ConfigError) as e:
        parse_config("/cfg/config.json", raw)
    assert str(e.value).startswith("invalid config at /cfg/config.json: rules.allow[3]: ")
    with pytest.raises(ConfigError, match=r"rules.deny: must be an array"):
        parse_config("/c.json", {"rules": {"deny": "bash"}})
    with pytest.raises(ConfigError, match=r"rules: must be an object"):
        parse_config("/c.json", {"rules": ["bash"]})
    cfg = parse_config("/c.json", {"rules": {"allow": ["bash(git status)"]}})
    assert cfg.rules.to_json() == {"allow": ["bash(git status)"], "deny": [], "ask": []}
    with pytest.raises(ConfigError, match=r"unknown key 'rules.later'"):
        parse_config("/c.json", {"rules": {"allow": [], "later": 1}})


def test_legacy_prefix_form():
    rules = parse_rules({"allow": ["bash(npm run test:*)"]})
    assert evaluate(rules, "bash", {"command": "npm run test --watch"}, None).decision
    assert evaluate(rules, "bash", {"command": "npm run test"}, None).decision
    assert not evaluate(rules, "bash", {"command": "npm run build"}, None).decision


@pytest.mark.parametrize(
    ("tool", "args", "real", "expected"),
    [
        ("bash", {"command": "git log --oneline"}, None, "bash(git log *)"),
        ("bash", {"command": "npm test"}, None, "bash(npm test *)"),
        ("bash", {"command": "ls -la"}, None, "bash(ls *)"),
        ("bash", {"command": "python3 tool.py --fast"}, None, "bash(python3 tool.py *)"),
        ("bash", {"command": "cd src && npm test"}, None, "bash(cd src *)\nbash(npm test *)"),
        ("bash", {"command": "git log | git diff"}, None, "bash(git log *)\nbash(git diff *)"),
        ("bash", {"command": "LANG=C git log"}, None, "bash(git log *)"),
        ("bash", {"command": "GIT_PAGER=cat git log"}, None, "bash(GIT_PAGER=cat git log *)"),
        ("bash", {"command": "python3 -c 'import os'"}, None, None),
        ("bash", {"command": "git log > out"}, None, None),
        ("bash", {"command": "git log $(id)"}, None, None),
        ("bash", {"command": "$X status"}, None, None),
        ("write", {"path": "src/a.py"}, f"{HOME}/proj/src/a.py", "write(~/proj/src/**)"),
        ("read", {"path": "/etc/hosts"}, "/etc/hosts", "read(/etc/**)"),
        ("ls", {"path": "proj"}, f"{HOME}/proj", "ls(~/proj/**)"),
        ("edit", {"path": "x"}, f"{HOME}/a[1]/x", "edit(~/a\\[1\\]/**)"),
        (
            "mcp__gh__get",
            {"repo": "acme/x", "n": 3},
            None,
            'mcp__gh__get(n=3, repo="acme/x", nothing else)',
        ),
        ("mcp__gh__list", {}, None, "mcp__gh__list(nothing else)"),
    ],
)
def test_proposals_are_narrow_and_cover_the_call(tool, args, real, expected):
    proposal = propose(tool, args, real, home=HOME, base=ROOT)
    assert proposal == expected
    if proposal:
        assert "bash(*)" not in proposal
        rules = parse_rules({"allow": proposal.splitlines()}, home=HOME, base=ROOT)
        assert evaluate(rules, tool, args, real).decision is RuleList.ALLOW


def test_proposal_from_git_log_allows_git_log_but_not_git_push():
    rules = parse_rules({"allow": [propose("bash", {"command": "git log --oneline"}, None)]})
    assert evaluate(rules, "bash", {"command": "git log -5"}, None).decision is RuleList.ALLOW
    assert evaluate(rules, "bash", {"command": "git push"}, None).decision is None


# -- property tests ------------------------------------------------------------------------------

PIECES = [
    "git", "status", "diff", "x", "rm", "-rf", "~", ";", "&&", "||", "|", "&", ">", ">>",
    "2>", "2>&1", ">&", "/dev/null", "out", "<", "$(", ")", "(", "{", "}", "`", "'", '"',
    "\\", "\n", "#", "<(", ">(", "$x", "${x}", "$((1))", "eval", "exec", "env", "X=1",
    "LANG=C", "sh", "-c", "<<E", "E", "<<<", "*", "!", "--", "=", ".", "|&", "2>&-", "$'\\x41'",
    "\t", "{a,b}", "?", "[", "]", ";;", "\\\n", "$x=", "coproc", "'\n'", "\\;",
]  # fmt: skip


@st.composite
def commands(draw):
    parts = draw(st.lists(st.sampled_from(PIECES), min_size=0, max_size=8))
    seps = draw(st.lists(st.sampled_from([" ", "", " "]), min_size=len(parts), max_size=len(parts)))
    body = "".join(p + s for p, s in zip(parts, seps, strict=True))
    return draw(st.sampled_from(["git status ", "git diff ", "", "git status;"])) + body


@given(commands())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_analysis_never_crashes_and_unsafe_is_never_allowed(command):
    a = analyze(command)
    v = evaluate(RULES, "bash", {"command": command}, None)
    if a.unsafe is not None:
        assert v.decision is not RuleList.ALLOW
    if v.decision is RuleList.ALLOW:
        for c in a.commands:
            words = [w.text for w in c.words]
            assert words == ["git", "status"] or words[:2] == ["git", "diff"], words


BASH = shutil.which("bash")
EXAMPLES = int(os.environ.get("A2A_RULES_EXAMPLES", "300"))  # long run: A2A_RULES_EXAMPLES=20000


def _bash_runs(command: str, workdir: str) -> list[str]:
    """What real bash executes for ``command``: every program it tries, with its arguments.

    ``git`` is a function that logs its argv; any other program lands in
    ``command_not_found_handle`` (PATH is empty), which logs it too. Builtins still work, so a
    write the rules missed would leave a file behind in ``workdir``.
    """
    log = os.path.join(workdir, ".log")
    script = (
        'git() { printf "git"; printf " %q" "$@"; printf "\\n"; } >>"$LOG"; '
        'command_not_found_handle() { printf "OTHER %s\\n" "$1" >>"$LOG"; return 127; }; '
        'eval "$CMD"'
    )
    env = {"PATH": "", "HOME": workdir, "LOG": log, "CMD": command, "x": "1", "GIT": "git"}
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", script],
        cwd=workdir,
        env=env,
        timeout=10,
        capture_output=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().splitlines()


@pytest.mark.skipif(BASH is None, reason="needs bash")
@given(commands())
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_what_rules_allow_is_what_bash_runs(tmp_path, command):
    """Differential test against bash itself: an allowed command runs only git status / git
    diff (with the arguments the analysis saw) and writes no file."""
    if decide(command) is not RuleList.ALLOW:
        return
    work = tempfile.mkdtemp(dir=tmp_path)
    ran = _bash_runs(command, work)  # may be nothing: bash refused it (e.g. a bad fd)
    for line in ran:
        assert line == "git status" or line.startswith("git diff"), (command, ran)
    assert set(os.listdir(work)) <= {".log"}, command  # no file written
    expected = [
        " ".join(w.text if w.literal else "*" for w in c.words) for c in analyze(command).commands
    ]
    assert len(ran) <= len(expected) or "||" in command or "&&" in command


# -- rules scoped to a machine (``rules add --machine NAME``) -----------------------------------


def test_a_rule_scoped_to_a_machine_matches_only_its_calls():
    from omp_a2a_bridge.server.policy.rules import RuleSet, evaluate, parse_rule

    allow = parse_rule("@laptop bash(git status)", allow=True)
    assert allow.machine == "laptop" and allow.text == "@laptop bash(git status)"
    rules = RuleSet(allow=(allow,))
    args = {"command": "git status"}
    assert evaluate(rules, "bash", args, None, "laptop").decision == "allow"
    assert evaluate(rules, "bash", args, None, "desk").decision is None
    assert evaluate(rules, "bash", args, None, None).decision is None
    deny = RuleSet(deny=(parse_rule("@desk read"),), allow=(parse_rule("read", allow=True),))
    assert evaluate(deny, "read", {}, "/x", "desk").decision == "deny"
    assert evaluate(deny, "read", {}, "/x", "laptop").decision == "allow"


def test_scoping_a_rule_and_bad_scopes():
    import pytest

    from omp_a2a_bridge.server.policy.rules import RuleError, parse_rule, scoped

    assert scoped("bash(ls)", "laptop") == "@laptop bash(ls)"
    assert scoped("bash(ls)", None) == "bash(ls)"
    with pytest.raises(RuleError, match="already names a machine"):
        scoped("@desk bash(ls)", "laptop")
    for bad in ("@ bash(ls)", "@Laptop bash(ls)", "@laptop", "@laptop @desk bash(ls)"):
        with pytest.raises(RuleError):
            parse_rule(bad)


@pytest.mark.parametrize(
    ("rule", "machine", "several", "expected"),
    [
        ("bash(git log *)", "default", False, "bash(git log *)"),  # only default: as before
        ("bash(git log *)", "default", True, "@default bash(git log *)"),
        ("bash(git log *)", "laptop", False, "@laptop bash(git log *)"),
        ("bash(a)\nbash(b *)", "laptop", True, "@laptop bash(a)\n@laptop bash(b *)"),
        (None, "laptop", True, None),  # nothing proposed: nothing scoped
        ("bash(git log *)", None, True, "bash(git log *)"),  # no machine (tests, in-process)
    ],
)
def test_a_proposal_is_scoped_to_the_machine_that_asked(rule, machine, several, expected):
    assert scoped_proposal(rule, machine, several) == expected
