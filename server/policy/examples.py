"""Examples of what a rule matches: two calls it matches and one it does not.

Users copy rules from Claude Code and guess at globs; ``rules add`` and the page print these
before saving, so ``bash(echo forbidden*)`` shows ``echo forbidden now`` and a typo shows
itself. Every example is checked against the rule by :func:`server.policy.rules.evaluate`
(an example that would not say the truth is left out). Pure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from .rules import Kind, Rule, RuleList, RuleSet, ValueKind, evaluate

_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./~-]+")


@dataclass(frozen=True, slots=True)
class Examples:
    """Shown call texts: a command for bash, a path for path tools, JSON arguments else."""

    matches: tuple[str, ...]
    misses: tuple[str, ...]


def _fill(glob: str, star: str) -> str:
    """One concrete text a glob word matches, ``star`` standing for each ``*``."""
    glob = re.sub(r"\[!?\^?([^\]])[^\]]*\]", lambda m: m.group(1) if "!" not in m.group(0)[:2]
                  and "^" not in m.group(0)[:2] else "_", glob)  # fmt: skip
    glob = glob.replace("?", "x")
    return glob.replace("*", star)


def _quoted(words: list[str]) -> str:
    return " ".join(w if _SAFE_WORD.fullmatch(w) else shlex.quote(w) for w in words)


def _bash(rule: Rule, n: int) -> str:
    words: list[str] = []
    for tok in rule.words:
        if tok == "*":
            words += [] if n == 0 else (["now"] if n == 1 else ["--flag", "value"])
        else:
            words.append(_fill(tok, "more" if n == 2 else ""))
    return _quoted(words)


def _bash_misses(rule: Rule) -> list[str]:
    base = [_fill(t, "") for t in rule.words if t != "*"]
    out = []
    if rule.words[-1] != "*":
        out.append(_quoted([*base, "extra"]))
    if len(base) > 1:
        out.append(_quoted([base[0], "other", *base[2:]]))
    out.append(_quoted(["other-program", *base[1:]]))
    return out


def _path(rule: Rule, n: int, home: str) -> tuple[str, str]:
    """A real path the rule matches, and how it is shown (``~/`` for the home)."""
    g = rule.path
    if g == "~" or g.startswith("~/"):
        g = home.rstrip("/") + g[1:]
    elif not g.startswith("/") and "/" not in g.rstrip("/"):
        g = "**/" + g  # no slash: any depth
    if g.endswith("/"):
        g += "**"
    g = g.replace("**/", ("", "src/", "a/b/")[n]).replace("**", ("a.txt", "src/b.txt", "c")[n])
    real = _fill(g, ("a", "b", "c")[n])
    if real.startswith(home.rstrip("/") + "/"):
        return real, "~/" + real[len(home.rstrip("/")) + 1 :]
    return real, real


def _args(rule: Rule, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in rule.args:
        out[a.name] = a.value if a.kind is ValueKind.LITERAL else _fill(a.glob, "xyz"[n])
    return out


def examples(rule: Rule, which: RuleList, home: str | None = None) -> Examples:
    """Up to two calls ``rule`` matches and one it does not, as a human would type them."""
    home = home or os.path.realpath(os.path.expanduser("~"))
    rules = RuleSet(**{which.value: (rule,)})

    def hit(args: dict[str, Any], real: str | None) -> bool:
        return evaluate(rules, rule.tool, args, real, rule.machine).decision is which

    tried: list[tuple[str, dict[str, Any], str | None]] = []
    misses: list[tuple[str, dict[str, Any], str | None]] = []
    if rule.kind is Kind.BASH:
        shown = [_bash(rule, n) for n in range(3)]
        shown.append("LANG=C " + shown[0])  # an exact rule still matches a locale change
        tried = [(c, {"command": c}, None) for c in shown]
        misses = [(c, {"command": c}, None) for c in _bash_misses(rule)]
    elif rule.kind is Kind.PATH:
        tried = [(shown, {"path": p}, p) for p, shown in (_path(rule, n, home) for n in range(3))]
        misses = [(p, {"path": p}, p) for p in ("/elsewhere/x.txt", os.path.join(home, "x"))]
    elif rule.kind is Kind.ARGS:
        for n in range(3):
            a = _args(rule, n)
            tried.append((json.dumps(a, ensure_ascii=False), a, None))
        a = {k: "other" for k in _args(rule, 0)} or {"other": 1}
        misses = [(json.dumps(a, ensure_ascii=False), a, None)]
    good = list(dict.fromkeys(t for t, a, r in tried if hit(a, r)))[:2]
    bad = [t for t, a, r in misses if not hit(a, r)][:1]
    return Examples(tuple(good), tuple(bad))


def example_lines(rule: Rule, which: RuleList, home: str | None = None) -> list[str]:
    """The lines ``rules add`` prints (agent-free text: the human typed the rule)."""
    if rule.kind is Kind.ANY:
        return [f"matches every {rule.tool} call"]
    ex = examples(rule, which, home)
    lines = [f"matches:         {t}" for t in ex.matches]
    lines += [f"does not match:  {t}" for t in ex.misses]
    return lines
