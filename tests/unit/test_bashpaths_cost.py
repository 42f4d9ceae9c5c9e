"""server/policy/bash/paths.py: the check's work is bounded by directory entries looked at.

A glob word makes the check read and match a whole folder; a command of many such words over
a big folder once froze the bridge loop for seconds (outside attack review). The listings are
read once per call and every entry matched counts towards ``MAX_SCANNED``; past it the call
asks. Counted, not timed.
"""

from __future__ import annotations

import glob
import os

import pytest

from omp_a2a_bridge.server.policy.bash import paths as bashpaths
from omp_a2a_bridge.server.policy.bash.paths import (
    MAX_SCANNED,
    Budget,
    arguments_escalation,
    command_escalation,
)
from omp_a2a_bridge.server.policy.paths import CallPaths, EscalationKind, PathPolicy

BIG = 5000


@pytest.fixture(scope="module")
def made_home(tmp_path_factory):
    h = tmp_path_factory.mktemp("cost") / "home"
    (h / ".ssh").mkdir(parents=True)
    (h / ".ssh" / "id_rsa").write_text("KEY")
    big = h / "proj" / "big"
    big.mkdir(parents=True)
    for i in range(BIG):
        (big / f"f{i:05d}").touch()
    (h / "proj" / "sub" / "deep").mkdir(parents=True)
    (h / "proj" / "sub" / ".hidden").touch()
    (h / "proj" / "sub" / "deep" / "x.py").touch()
    return h


@pytest.fixture
def home(made_home, monkeypatch):
    monkeypatch.setenv("HOME", str(made_home))
    return made_home


@pytest.fixture
def policy(home) -> PathPolicy:
    return PathPolicy([str(home / "proj")], home=str(home), scan_identities=False)


@pytest.fixture
def scandirs(monkeypatch):
    """The folders the check lists, in order."""
    seen: list[str] = []
    real = os.scandir

    def counting(path="."):
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(bashpaths.os, "scandir", counting)
    return seen


def _attack_words(n: int) -> str:
    """``big/[aa big/[ab …``: each word an unclosed class that matches nothing."""
    abc = [chr(97 + i // 676) + chr(97 + i // 26 % 26) + chr(97 + i % 26) for i in range(n)]
    words = [f"big/[{w}" for w in abc]
    return "cat " + " ".join(words)


def test_many_globs_over_a_big_folder_ask_and_list_it_once(home, policy, scandirs):
    cwd = str(home / "proj")
    cmd = _attack_words(1600)
    assert len(cmd) < bashpaths.MAX_COMMAND_CHARS
    budget = Budget()
    esc = command_escalation(cmd, cwd, CallPaths(policy), budget=budget)
    assert esc is not None and esc.kind is EscalationKind.UNCHECKED and esc.always_asks
    assert "too many files" in esc.category, esc.category
    # The work stopped at the budget: about MAX_SCANNED entries, not 1,990 x 5,000.
    assert MAX_SCANNED < budget.scanned <= MAX_SCANNED + BIG
    assert scandirs.count(str(home / "proj" / "big")) == 1  # one listing, matched many times


def test_an_ordinary_glob_over_a_big_folder_stays_within_budget(home, policy, scandirs):
    cwd = str(home / "proj")
    budget = Budget()
    cmd = "ls big/f0001* && wc -l big/f0002?"
    esc = command_escalation(cmd, cwd, CallPaths(policy), budget=budget)
    assert esc is None
    assert budget.scanned <= 2 * BIG + 100  # each glob matched once over the folder
    assert scandirs.count(str(home / "proj" / "big")) == 1


def test_a_glob_still_finds_the_secret_past_a_big_folder(home, policy):
    cwd = str(home / "proj")
    esc = command_escalation("ls big/f0001* ; cat ~/.s[s]h/id_*", cwd, CallPaths(policy))
    assert esc is not None and esc.kind is not EscalationKind.UNCHECKED and esc.always_asks


@pytest.mark.parametrize(
    "pattern",
    [
        "{p}/big/f0001*",
        "{p}/s*/*",
        "{p}/s*/.*",
        "{p}/*/deep/*.py",
        "{p}/*/*/x.py",
        "{p}/sub/deep/x.py",
        "{p}/sub/nothing*",
        "{p}/[s]ub/",
        "{p}/big/[aa",
        "{p}/*/[!d]*",
    ],
)
def test_the_glob_on_cached_listings_matches_pythons_glob(home, pattern):
    pat = pattern.format(p=str(home / "proj"))
    got = Budget().glob(pat, 10_000)
    want = glob.glob(pat, include_hidden=True)
    assert sorted(os.path.normpath(g) for g in got) == sorted(os.path.normpath(w) for w in want)


def test_upstream_arguments_over_big_folders_ask(home, policy, tmp_path):
    folders = []
    for k in range(3):
        d = tmp_path / f"many{k}"
        d.mkdir()
        for i in range(bashpaths.MAX_LISTING + 1):
            (d / f"e{i}").touch()
        folders.append(str(d))
    letters = " ".join(chr(97 + i) for i in range(26))
    args = {"dirs": folders, "s": [f"[ {letters} {i}" for i in range(490)]}
    esc = arguments_escalation(args, policy)
    assert esc is not None and esc.kind is EscalationKind.UNCHECKED, esc
    assert "too many files" in esc.category
