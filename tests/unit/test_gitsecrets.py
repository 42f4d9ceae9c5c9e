"""Credentials in git config text: found, replaced line for line, never named in a finding."""

from __future__ import annotations

import subprocess

import pytest

from omp_a2a_bridge.server.policy.gitsecrets import (
    PLACEHOLDER,
    holds_secret,
    is_git_config,
    redact,
)

ATTACK = (
    "[user]\n\tname = Box Test\n\temail = box@example.invalid\n"
    "[sendemail]\n\tsmtpPass = FAKESECRET-smtp-pass\n"
    '[http "https://git.corp.example"]\n'
    "\textraHeader = Authorization: Bearer FAKESECRET-extra-header\n"
    '[url "https://oauth2:FAKESECRET-url-token@gitlab.example/"]\n'
    "\tinsteadOf = https://gitlab.example/\n"
    '[remote "origin"]\n'
    "\turl = https://x-access-token:FAKESECRET-remote-token@github.com/acme/app.git\n"
    "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
    "[github]\n\ttoken = FAKESECRET-github-token\n"
)


def test_every_secret_of_the_review_is_replaced_and_the_rest_kept():
    r = redact(ATTACK)
    assert "FAKESECRET" not in r.text
    assert r.text.count("\n") == ATTACK.count("\n")  # line for line
    assert "\tname = Box Test" in r.text and "\tfetch = +refs/heads/*" in r.text
    assert f"\tsmtpPass = {PLACEHOLDER}" in r.text
    assert f'[url "https://oauth2:{PLACEHOLDER}@gitlab.example/"]' in r.text
    assert f"https://x-access-token:{PLACEHOLDER}@github.com/acme/app.git" in r.text
    assert [f.what for f in r.findings] == [
        "sendemail.smtppass",
        "http.https://git.corp.example.extraheader",
        "url.<subsection>",
        "remote.origin.url",
        "github.token",
    ]
    assert [f.line for f in r.findings] == [5, 7, 8, 11, 14]


@pytest.mark.parametrize(
    "text",
    [
        '[credential]\n\thelper = "!f() { echo password=FAKESECRET; }; f"',
        '[credential "https://h"]\n\thelper = store --token FAKESECRET',
        '[remote "x"]\n\tpushurl = https://u:FAKESECRET@h/r.git',
        '[url "https://h/"]\n\tpushInsteadOf = https://u:FAKESECRET@h/',
        "[http]\n\tproxy = http://me:FAKESECRET@proxy:3128",
        '[remote "x"]\n\turl = https://ghp_FAKESECRET0123456789@github.com/a/b',
        "[core] sshCommand = x\n[foo]\n\tAPIKEY = FAKESECRET",
        '[sendemail "work"]\n\tsmtppass = "FAKESECRET # not a comment"',
        "[a]\n\tpassword = FAKE\\\n\tSECRET-continued",  # a value continued on the next line
        '[http "https://u:FAKESECRET@h"]\n\textraHeader = x',  # never named in a finding
    ],
)
def test_other_shapes_of_a_credential(text: str):
    r = redact(text)
    assert r.changed and holds_secret(text)
    assert "FAKESECRET" not in r.text and "SECRET-continued" not in r.text
    assert r.text.count("\n") == text.count("\n")
    assert all("FAKESECRET" not in f.what for f in r.findings)


@pytest.mark.parametrize(
    "text",
    [
        "[user]\n\tname = A\n\temail = a@b.c\n\tsigningKey = ABCDEF",
        '[remote "origin"]\n\turl = git@github.com:acme/app.git',
        '[remote "origin"]\n\turl = https://github.com/acme/app.git',
        '[remote "origin"]\n\turl = ssh://git@github.com/acme/app.git',
        "[credential]\n\thelper = osxkeychain",
        "[core]\n\tbare = false\n# token = in a comment is not git's\n",
        "[include]\n\tpath = ~/.gitconfig-work",
    ],
)
def test_ordinary_config_holds_nothing(text: str):
    r = redact(text)
    assert not r.changed and r.text == text and not holds_secret(text)


def test_git_parses_the_redacted_copy(tmp_path):
    path = tmp_path / "config"
    path.write_text(redact(ATTACK).text)
    out = subprocess.run(
        ["git", "config", "--file", str(path), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "user.name=Box Test" in out and "FAKESECRET" not in out
    assert f"github.token={PLACEHOLDER}" in out


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/home/u/.gitconfig", True),
        ("/home/u/.gitconfig-work", True),
        ("/etc/gitconfig", True),
        ("/home/u/.config/git/config", True),
        ("/home/u/proj/.git/config", True),
        ("/home/u/proj/.git/config.worktree", True),
        ("/home/u/proj/.git/modules/lib/config", True),
        ("/srv/app.git/config", True),
        ("/home/u/.config/git/work.inc", True),
        ("/home/u/dotfiles/work.gitconfig", True),
        ("/home/u/proj/src/git/auth.py", False),
        ("/home/u/proj/config", False),
        ("/home/u/proj/.git/HEAD", False),
        ("/home/u/proj/src/config.py", False),
    ],
)
def test_the_shape_of_a_git_config_file(path: str, expected: bool):
    assert is_git_config(path) is expected
