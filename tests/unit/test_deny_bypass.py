"""Deny and ask rules see through the disguises an outside review found (F2, F5).

A deny rule names a program; bash runs the same program whether the agent writes ``rm``,
``/bin/rm``, ``./rm`` or hides it behind a wrapper (``busybox rm``, ``env -i rm``, ``command
rm``). An upstream reads ``"７"``, ``"0o7"`` and ``9007199254740993`` as the denied value
and fills ``Force`` from ``"FORCE"``. Deny/ask match all of those; allow rules stay literal,
because a path-named program may be anything (an agent-written binary named ``git``).
"""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.policy.rules import RuleList, evaluate, parse_rules


def bash(command: str, deny: list[str] = (), allow: list[str] = (), ask: list[str] = ()):
    rules = parse_rules({"deny": list(deny), "allow": list(allow), "ask": list(ask)})
    return evaluate(rules, "bash", {"command": command}, None)


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("bash(rm *)", "/bin/rm victim2"),
        ("bash(rm *)", "./rm victim"),
        ("bash(rm *)", "../x/rm victim"),
        ("bash(rm *)", '"/bin/rm" victim'),
        ("bash(git push *)", "/usr/bin/git push origin main"),
        ("bash(rm -rf *)", "sudo /bin/rm -rf x"),
        ("bash(git push *)", "timeout 5 /usr/bin/git push"),
        ("bash(rm *)", "X=1 rm victim"),
        ("bash(rm *)", "PATH=/tmp /bin/rm victim"),
        ("bash(rm *)", "busybox rm victim"),
        ("bash(rm *)", "/bin/busybox rm victim"),
        ("bash(rm *)", "/bin/env -i rm victim"),
        ("bash(rm *)", "env -u HOME /bin/rm victim"),
        ("bash(git push *)", "command -p git push"),
        ("bash(git push *)", "exec -a x git push"),
        ("bash(rm *)", "fakeroot rm victim"),
        ("bash(rm *)", "eatmydata /bin/rm victim"),
        ("bash(rm *)", "setarch x86_64 rm victim"),
        ("bash(rm *)", "nocache rm victim"),
        ("bash(rm *)", "chronic rm victim"),
        ("bash(rm *)", "numactl rm victim"),
        ("bash(rm *)", "/bin/RM victim"),  # macOS: case-insensitive file system
        ("bash(rm *)", "rm.exe victim"),  # Git Bash on Windows
        ("bash(rm *)", "X=1 /usr/bin/Rm.EXE victim"),
        ("bash(rm *)", "sudo -iu root rm victim"),  # -u takes the next word
        ("bash(rm *)", "sudo -uroot /bin/rm victim"),  # -u takes the rest of its word
        ("bash(rm *)", "gtimeout 5 rm victim"),
        ("bash(/bin/rm *)", "rm victim"),  # a rule written with a path names the program too
        ("bash(/usr/bin/git push *)", "./git push"),
    ],
)
def test_deny_sees_the_program_however_it_is_named(rule, command):
    assert bash(command, deny=[rule]).decision is RuleList.DENY, command
    assert bash(command, ask=[rule]).decision is RuleList.ASK, command


@pytest.mark.parametrize(
    "command",
    [
        r"\rm victim",
        "'r'm victim",
        '"rm" victim',
        "nohup rm victim",
        "stdbuf -o0 rm victim",
        "chrt 10 rm victim",
        "ionice -c 3 rm victim",
        "taskset 1 rm victim",
        "setsid rm victim",
        "flock f rm victim",
        "nice -n 5 /bin/rm victim",
        "xargs /bin/rm < /dev/null",
        "find . -exec /bin/rm {} ;",
    ],
)
def test_siblings_that_were_already_seen_stay_seen(command):
    assert bash(command, deny=["bash(rm *)"]).decision is RuleList.DENY, command


@pytest.mark.parametrize("command", ["watch rm victim", "builtin rm victim", "env -S 'rm victim'"])
def test_what_cannot_be_read_never_runs_unattended(command):
    assert bash(command, deny=["bash(rm *)"]).decision in (RuleList.DENY, RuleList.ASK)


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("bash(git log *)", "/tmp/evil/git log"),
        ("bash(git log *)", "./git log"),
        ("bash(rm *)", "busybox rm x"),
        ("bash(rm *)", "fakeroot rm x"),
        ("bash(rm *)", "/bin/env rm x"),
        ("bash(rm *)", "RM x"),
        ("bash(rm *)", "rm.exe x"),
    ],
)
def test_allow_rules_stay_literal(rule, command):
    assert bash(command, allow=[rule]).decision is None, command


def test_allow_rules_still_allow_what_they_name():
    assert bash("git log -1", allow=["bash(git log *)"]).decision is RuleList.ALLOW
    assert bash("/usr/bin/git log", allow=["bash(/usr/bin/git log *)"]).decision is (RuleList.ALLOW)
    both = ["bash(fakeroot *)", "bash(make *)"]
    assert bash("fakeroot make", allow=both).decision is RuleList.ALLOW
    assert bash("fakeroot rm x", allow=both).decision is None  # the wrapped command too


def test_a_path_named_program_that_is_not_the_denied_one_is_not_denied():
    assert bash("/bin/rmdir x", deny=["bash(rm *)"]).decision is None
    assert bash("/usr/bin/git log", deny=["bash(git push *)"]).decision is None


T = "mcp__x__t"


def upstream(rule: str, args: dict, which: str = "deny") -> RuleList | None:
    return evaluate(parse_rules({which: [rule]}), T, args, None).decision


@pytest.mark.parametrize(
    ("rule", "args"),
    [
        ("mcp__x__t(id=7)", {"id": "７"}),  # full-width: Python int() reads 7
        ("mcp__x__t(id=7)", {"id": "٧"}),  # Arabic-Indic digit: int() reads 7 too
        ("mcp__x__t(id=7)", {"id": "0o7"}),
        ("mcp__x__t(id=7)", {"id": "0x7"}),
        ("mcp__x__t(id=7)", {"id": "0b111"}),
        ("mcp__x__t(id=1000)", {"id": "1_000"}),
        ("mcp__x__t(id=9007199254740992)", {"id": 9007199254740993}),
        ("mcp__x__t(id=9007199254740992)", {"id": "9007199254740993"}),
        ("mcp__x__t(force=true)", {"Force": True}),
        ("mcp__x__t(force=true)", {"FORCE": True}),
        ("mcp__x__t(force=true)", {"FORCE": "true"}),
    ],
)
def test_deny_and_ask_read_values_as_upstreams_do(rule, args):
    assert upstream(rule, args) is RuleList.DENY
    assert upstream(rule, args, "ask") is RuleList.ASK
    assert upstream(rule, args, "allow") is None  # allow rules stay strict


def test_deny_still_tells_other_values_apart():
    assert upstream("mcp__x__t(id=7)", {"id": "８"}) is None
    assert upstream("mcp__x__t(id=7)", {"id": "0x8"}) is None
    assert upstream("mcp__x__t(id=9007199254740992)", {"id": 9007199254740996}) is None
    assert upstream("mcp__x__t(force=true)", {"Forced": True}) is None
    assert upstream("mcp__x__t(id=7)", {"id": "1e999"}) is None
    assert upstream("mcp__x__t(id=7)", {"id": 10**400}) is None
    assert upstream("mcp__x__t(force=true)", {"force": True}, "allow") is RuleList.ALLOW


def test_an_allow_rule_does_not_match_an_argument_named_twice_in_two_cases():
    """Go's encoding/json fills ``DryRun`` from the last of ``dry_run``/``DRY_RUN``."""
    rule = "mcp__x__t(dry_run=true)"
    assert upstream(rule, {"dry_run": True, "DRY_RUN": False}, "allow") is None
    assert upstream(rule, {"DRY_RUN": False, "dry_run": True}, "allow") is None
    assert upstream(rule, {"dry_run": True, "other": 1}, "allow") is RuleList.ALLOW
    assert upstream(rule, {"dry_run": False, "DRY_RUN": True}) is RuleList.DENY


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("bash(git push *)", "git -C . push origin main"),
        ("bash(git push *)", "git --no-pager push"),
        ("bash(git push *)", "git -P push"),
        ("bash(git push *)", "git --git-dir=.git push"),
        ("bash(git push *)", "git --work-tree . push"),
        ("bash(git push *)", "git --namespace x push"),
        ("bash(git push *)", "git --bare push"),
        ("bash(git push *)", "git --literal-pathspecs push"),
        ("bash(git push *)", "timeout 5 git -P push"),
        ("bash(git push *)", "/usr/bin/git -C /x --no-pager push"),
        ("bash(git push *)", "git -C. push"),  # the value in the option's word
        ("bash(git push *)", "git --some-future-option x push"),  # unknown: read both ways
        ("bash(docker rm *)", "docker -H tcp://x rm c"),
        ("bash(docker rm *)", "docker --context c rm c"),
        ("bash(kubectl delete *)", "kubectl -n ns delete pod x"),
        ("bash(kubectl delete *)", "kubectl --context prod --namespace=ns delete pod x"),
        ("bash(npm publish *)", "npm --prefix x publish"),
        ("bash(cargo publish *)", "cargo +nightly publish"),
        ("bash(cargo publish *)", "cargo --locked -Z x publish"),
        ("bash(systemctl stop *)", "systemctl --user stop x"),
        ("bash(aws s3 rm *)", "aws --profile p s3 rm s3://x"),
        ("bash(docker-compose down *)", "docker-compose -f x.yml -p p down -v"),
        ("bash(make deploy*)", "make -C sub -j 4 deploy"),
        ("bash(make deploy*)", "make -j deploy"),  # -j's value is optional
        ("bash(rm *)", "sudo -R /x rm x"),  # sudo's --chroot takes a value
        ("bash(rm *)", "sudo --chroot /x rm x"),
        ("bash(rm *)", "coreutils --coreutils-prog=rm x"),
        ("bash(rm *)", "coreutils --coreutils-prog-shebang=rm script x"),
    ],
)
def test_deny_sees_the_subcommand_past_global_options(rule, command):
    assert bash(command, deny=[rule]).decision is RuleList.DENY, command
    assert bash(command, ask=[rule]).decision is RuleList.ASK, command


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("bash(git log *)", "git -C /elsewhere log"),  # -C changes which repository
        ("bash(git log *)", "git --git-dir=/x/.git log"),
        ("bash(git push *)", "git -C . push"),
        ("bash(kubectl get *)", "kubectl -n prod get pods"),
    ],
)
def test_allow_rules_stay_literal_about_global_options(rule, command):
    assert bash(command, allow=[rule]).decision is None, command


@pytest.mark.parametrize(
    "command",
    ["git -C push status", "git status push", "git --git-dir push status", "docker -H rm ps"],
)
def test_a_global_options_value_is_not_the_subcommand(command):
    assert bash(command, deny=["bash(git push)", "bash(docker rm *)"]).decision is None, command


def test_git_c_is_still_never_allowed():
    assert bash("git -c core.pager=sh push", allow=["bash(git *)"]).decision is None
