"""Second attack round against a real ``a2a-bridge serve`` (HOME full of planted secrets, see
:mod:`tests.test_attack_paths`): holes that the first rounds (``test_attack_paths``,
``test_seams``, ``test_search_attacker``) did not close.

Each test first failed against the code it now guards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .test_attack_paths import NO_APPROVER, Serve, _leaks, _stop
from .test_seams import _serve_with_rules


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
]


@pytest.mark.parametrize("command", BASH_SPELLINGS)
def test_bash_spellings_of_a_protected_path_still_ask(ruled, command):
    command = command.replace("{home}", str(ruled.home))
    r = ruled.client().call("bash", {"command": command, "cwd": str(ruled.home)})
    assert _leaks(ruled, r) == [], (command, r.text)
    assert r.text.startswith(NO_APPROVER), (command, r.text)


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
