"""'Always allow' proposals are no wider than the call (issue 23 item 4), and session grants
name a program + subcommand (item 3), checked directly on the pure policy functions.

The table lists every program that reads or writes whatever it is pointed at: each gets the
call's literal words. The property test runs each proposal's rule against mutated commands
(extra arguments, other paths, ``~``, ``..``, other subcommands) and checks that it allows
nothing it was not shown, beyond the documented wildcard for programs like ``git status *``.
"""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.policy.bash.parse import analyze
from omp_a2a_bridge.server.policy.grants import covering, offer
from omp_a2a_bridge.server.policy.proposals import POINTED, propose
from omp_a2a_bridge.server.policy.rules import RuleList, RuleSet, evaluate, parse_rule_lines

HOME = "/home/u"

# The issue's list, each with a call it was shown: the proposal is exactly those words.
LITERAL = [
    ("grep -rn TODO src", "bash(grep -rn TODO src)"),
    ("rg -n TODO src", "bash(rg -n TODO src)"),
    ("cat notes.txt", "bash(cat notes.txt)"),
    ("sort -o out.txt f", "bash(sort -o out.txt f)"),
    ("curl -s https://example.com/x", "bash(curl -s https://example.com/x)"),
    ("wget -q https://example.com/x", "bash(wget -q https://example.com/x)"),
    ("tar -czf out.tgz src", "bash(tar -czf out.tgz src)"),
    ("cp a.txt b.txt", "bash(cp a.txt b.txt)"),
    ("mv a.txt b.txt", "bash(mv a.txt b.txt)"),
    ("sed -n 1p notes.txt", "bash(sed -n 1p notes.txt)"),
    ("awk 1 notes.txt", "bash(awk 1 notes.txt)"),
    ("find . -name x.py", "bash(find . -name x.py)"),
    ("printf %s x", "bash(printf %s x)"),
    ("test -f x", "bash(test -f x)"),
    ("xargs -n1 echo", "bash(xargs -n1 echo)\nbash(echo *)"),
    ("dd if=a of=b", "bash(dd if=a of=b)"),
    ("du -sh src", "bash(du -sh src)"),
    ("head -n 5 notes.txt", "bash(head -n 5 notes.txt)"),
    ("tail -n 5 notes.txt", "bash(tail -n 5 notes.txt)"),
    ("tee out.txt", "bash(tee out.txt)"),
    # never a wildcard, whatever the program
    ("rm -rf build dist && npm publish", "bash(rm -rf build dist)\nbash(npm publish)"),
    ("git push --force", "bash(git push --force)"),
    ("git push origin main", "bash(git push origin main)"),
    ("git -C . push", "bash(git -C . push)"),
    # a recursive flag or an output option keeps the literal path, whatever the program
    ("git diff --output=x.patch", "bash(git diff --output=x.patch)"),
    ("zip -r out.zip src", "bash(zip -r out.zip src)"),
]
# The documented wildcard: program + subcommand + ``*`` for programs that do not act on
# whatever they are pointed at.
WILDCARD = [
    ("git status", "bash(git status *)"),
    ("git log --oneline", "bash(git log *)"),
    ("npm test", "bash(npm test *)"),
    ("ls -la", "bash(ls *)"),
    ("python3 tool.py --fast", "bash(python3 tool.py *)"),
]


@pytest.mark.parametrize(("command", "expected"), LITERAL + WILDCARD)
def test_the_proposal_table(command, expected):
    assert propose("bash", {"command": command}, None, home=HOME) == expected


def test_every_pointed_program_named_by_the_issue_is_in_the_table():
    named = (
        "grep rg cat sort curl wget tar cp mv sed awk find printf test xargs dd du head tail tee"
    )
    assert set(named.split()) <= POINTED


def _allows(rule_text: str, command: str) -> bool:
    rules = RuleSet(allow=tuple(parse_rule_lines(rule_text, home=HOME)))
    return evaluate(rules, "bash", {"command": command}, None).decision is RuleList.ALLOW


def _words(command: str) -> list[list[str]]:
    return [[w.text for w in c.words] for c in analyze(command).commands]


PATHS = ["~", "~/.ssh/id_rsa", "..", "../x", "/", "/etc/passwd", "~/Documents", "src/../..", "*"]
EXTRA = ["-r", "-o", "out", "--force", "-delete", "-exec", "x", "-f", "--output=o", "+main"]
SUBS = ["push", "publish", "rm", "reset", "clean", "config", "status"]


@st.composite
def mutations(draw, command: str) -> str:
    words = shlex.split(command)
    kind = draw(st.sampled_from(["extra", "path", "sub", "drop", "swap"]))
    if kind == "extra":
        at = draw(st.integers(1, len(words)))
        words.insert(at, draw(st.sampled_from(EXTRA + PATHS)))
    elif kind == "path" and len(words) > 1:
        at = draw(st.integers(1, len(words) - 1))
        words[at] = draw(st.sampled_from(PATHS))
    elif kind == "sub" and len(words) > 1:
        words[1] = draw(st.sampled_from(SUBS))
    elif kind == "drop" and len(words) > 1:
        del words[draw(st.integers(1, len(words) - 1))]
    else:
        words.append(draw(st.sampled_from(PATHS)))
    return " ".join(shlex.quote(w) if w != "~" and not w.startswith("~/") else w for w in words)


@given(st.data())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_proposal_allows_a_command_it_was_not_shown(data):
    command, _ = data.draw(st.sampled_from(LITERAL + WILDCARD))
    rule = propose("bash", {"command": command}, None, home=HOME)
    assert rule is not None and _allows(rule, command)
    mutated = data.draw(mutations(command.split(" && ")[0]))
    if not _allows(rule, mutated):
        return
    shown = _words(command)
    for words in _words(mutated):
        if words in shown:
            continue
        # Only the documented wildcard: the rule's own head (program + subcommand or script).
        assert (command, rule) in WILDCARD, (command, rule, mutated)
        head = shlex.split(rule.removeprefix("bash(").removesuffix(" *)"))
        assert words[: len(head)] == head, (command, rule, mutated)


def test_grants_never_cover_rm_or_another_subcommand():
    g = offer("bash", {"command": "echo one"}, escalated=False, home=HOME)
    assert g is not None and g.label == "Allow `echo one …` for this session"
    assert covering([g], "bash", {"command": "rm -rf ~/Documents"}, None) is None
    assert covering([g], "bash", {"command": "echo one; rm -rf ~"}, None) is None
    g = offer("bash", {"command": "git commit -m x"}, escalated=False, home=HOME)
    assert g is not None and g.label == "Allow `git commit …` for this session"
    assert covering([g], "bash", {"command": "git commit --amend"}, None) is g
    assert covering([g], "bash", {"command": "git push"}, None) is None
    assert covering([g], "bash", {"command": "git commit -m x > ~/.bashrc"}, None) is None
    for command in ("rm -rf build", "git push origin main", "find . -delete", "npm publish"):
        assert offer("bash", {"command": command}, escalated=False, home=HOME) is None
    assert offer("bash", {"command": "echo one"}, escalated=True, home=HOME) is None


def test_a_folder_grant_covers_its_tree_only():
    g = offer("write", {"path": "x"}, escalated=False, project=f"{HOME}/a", home=HOME)
    assert g is not None and g.label == "Allow writes in ~/a for this session"
    assert covering([g], "write", {}, f"{HOME}/a/deep/f.py") is g
    assert covering([g], "write", {}, f"{HOME}/ab/f.py") is None
    assert covering([g], "edit", {}, f"{HOME}/a/f.py") is None
    assert offer("write", {"path": "x"}, escalated=False, project=None, home=HOME) is None


def test_no_grant_names_a_scope_the_human_cannot_read():
    """A bidi or invisible character in the scope would make the label lie: not offered."""
    assert offer("bash", {"command": "ec\u202eho one"}, escalated=False, home=HOME) is None
    assert offer("mcp__x\u200b__y", {}, escalated=False, home=HOME) is None
    folder = f"{HOME}/pro\u202ej"
    assert offer("write", {"path": "x"}, escalated=False, project=folder, home=HOME) is None


# -- why no "Always allow" is offered: the reason each UI shows must be this call's -----------

from omp_a2a_bridge.server.policy.proposals import NO_RULE_FALLBACK, why_no_rule  # noqa: E402


@pytest.mark.parametrize(
    ("tool", "args", "real", "kw", "expected"),
    [
        ("bash", {"command": "git log"}, None, {}, None),  # offered: no reason
        ("read", {"path": "/srv/x"}, "/srv/x", {}, None),
        (
            "read", {"path": "~/.ssh/id_rsa"}, "/h/.ssh/id_rsa",
            {"always_asks": "/h/.ssh/id_rsa is in a protected location (SSH keys)"},
            "/h/.ssh/id_rsa is in a protected location (SSH keys): that always asks a human, "
            "no rule may cover it",
        ),
        (
            "write", {"path": "a.lock", "content": ""}, "/p/a.lock",
            {"ask_rule": "write(**/*.lock)"},
            "the ask rule write(**/*.lock) matches it, so an allow rule would never apply",
        ),
        (
            "bash", {"command": "echo hi > out.txt"}, None, {},
            "no rule can allow this command: redirection > out.txt",
        ),
        (
            "bash", {"command": 'eval "$X"'}, None, {"guard": True},
            "deny rules exist and the command cannot be fully read (eval runs its arguments as "
            "shell code): it always asks",
        ),
        (
            "mcp__db__query", {"q": "\u202e"}, None, {},
            "it contains hidden characters, so no rule is saved from it",
        ),
        (
            "mcp__db__query", {"q": {"nested": 1}}, None, {},
            "an argument is an object, an array or a non-finite number: "
            "no rule can name it exactly",
        ),
        (
            "mcp__db__query", {"bad name": 1}, None, {},
            "an argument's name is outside the rule grammar, so no rule can name it exactly",
        ),
        ("read", {"path": "x"}, None, {}, "its path could not be resolved, so no rule can name it"),
    ],
)  # fmt: skip
def test_why_no_rule_names_the_real_cause(tool, args, real, kw, expected):
    assert why_no_rule(tool, args, real, home="/h", base="/p", **kw) == expected


def test_why_no_rule_is_never_the_generic_text_for_the_common_causes():
    for command in ("cat x | sh", "echo $(id)", "rm -rf $DIR", "ls &"):
        why = why_no_rule("bash", {"command": command}, None, home="/h", base="/p")
        assert why is not None and why != NO_RULE_FALLBACK, command


@pytest.mark.parametrize(
    ("tool", "real", "expected"),
    [
        ("write", f"{HOME}/notes.txt", "write(~/notes.txt)"),
        ("edit", f"{HOME}/todo*.md", "edit(~/todo\\*.md)"),
        ("write", "/home/notes.txt", "write(/home/notes.txt)"),
        ("write", "/x.txt", "write(/x.txt)"),
        ("write", f"{HOME}/proj/a.py", "write(~/proj/**)"),
        ("write", "/home/u2/a.txt", "write(/home/u2/**)"),
    ],
)
def test_always_allow_on_a_file_in_the_home_names_the_file_not_the_home(tool, real, expected):
    """Outside review (attack5): "Always allow" on a write of ``~/notes.txt`` proposed
    ``write(~/**)``: every project, document and download of the home, unasked, for good."""
    args = {"path": real, "content": "x"} if tool == "write" else {"path": real}
    if tool == "edit":
        args.update(old_string="a", new_string="b")
    assert propose(tool, args, real, home=HOME) == expected
    rules = RuleSet(allow=tuple(parse_rule_lines(expected, home=HOME)))
    other = f"{HOME}/Documents/keep.txt"
    assert evaluate(rules, tool, {**args, "path": other}, other).decision is not RuleList.ALLOW
