"""Outside review (attack5): credentials git keeps in its config files are handed out.

``~/.gitconfig`` and ``~/.config/git`` are opened by default (``private.allow`` and
``box.read_allow``: git needs them), and a repository's ``.git/config`` is an ordinary file to
read. Git's own documentation puts secrets there: ``sendemail.smtpPass``, an
``http.<url>.extraHeader`` with a bearer token (the usual way to reach a private forge from
scripts), a ``url.<base>.insteadOf`` whose base holds ``user:token@``, and a remote cloned as
``https://x-access-token:<token>@github.com/...`` keeps the token in ``remote.origin.url``. The
``read`` tool (allow tier) and the box both handed them to the agent. Fixed: a git config file
holding a credential is private to the built-in tools (a human decides), and the box binds a
copy with the credentials replaced over it (git still works). A real bridge process, the
default config.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, put, require_bwrap, serve, stop

GLOBAL = (
    "[user]\n\tname = Box Test\n\temail = box@example.invalid\n"
    "[sendemail]\n\tsmtpPass = FAKESECRET-smtp-pass\n"
    '[http "https://git.corp.example"]\n'
    "\textraHeader = Authorization: Bearer FAKESECRET-extra-header\n"
    '[url "https://oauth2:FAKESECRET-url-token@gitlab.example/"]\n'
    "\tinsteadOf = https://gitlab.example/"
)
XDG = "[github]\n\ttoken = FAKESECRET-xdg-github-token"
REMOTE = "https://x-access-token:FAKESECRET-remote-token@github.com/acme/app.git"
OTHER = "https://oauth2:FAKESECRET-other-repo@gitlab.example/acme/other.git"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_bwrap()
    world = make_world()
    try:
        put(os.path.join(world.home, ".gitconfig"), GLOBAL)
        put(os.path.join(world.home, ".config", "git", "config"), XDG)
        env = {**os.environ, "HOME": world.home}
        subprocess.run(
            ["git", "remote", "add", "origin", REMOTE], cwd=world.project, env=env, check=True
        )
        other = os.path.join(world.home, "other")
        subprocess.run(["git", "init", "-q", other], env=env, check=True)
        subprocess.run(["git", "remote", "add", "origin", OTHER], cwd=other, env=env, check=True)
        serve(world, False)
        yield world
    finally:
        stop(world)


@pytest.mark.parametrize("rel", [".gitconfig", ".config/git/config", "proj/.git/config"])
def test_the_read_tool_does_not_hand_over_git_credentials(world: World, rel: str) -> None:
    c = world.client()
    try:
        r = c.call("read", {"path": os.path.join(world.home, rel)})
    finally:
        c.close()
    assert r.status == 200, r
    assert "FAKESECRET" not in r.raw.decode(), r.text[:300]
    assert "protected location" in r.text, r.text  # it asked a human (none is watching)


def test_a_git_config_without_credentials_reads_as_before(world: World) -> None:
    """Only a config that holds a credential is private: an ordinary one reads unasked."""
    plain = os.path.join(world.home, "plain")
    env = {**os.environ, "HOME": world.home}
    subprocess.run(["git", "init", "-q", plain], env=env, check=True)
    remote = "https://github.com/acme/plain.git"
    subprocess.run(["git", "remote", "add", "origin", remote], cwd=plain, env=env, check=True)
    c = world.client()
    try:
        r = c.call("read", {"path": os.path.join(plain, ".git", "config")})
    finally:
        c.close()
    assert r.status == 200, r
    assert remote in r.text, r.text[:300]


@pytest.mark.parametrize(
    "command",
    [
        "cat ~/.gitconfig ~/.config/git/config",
        "git config --global --list",
        "git remote -v",
        "cat ~/other/.git/config; git -C ~/other remote -v",  # a repository beside the project
    ],
)
def test_the_box_does_not_show_git_credentials(world: World, command: str) -> None:
    """git itself still works in the box (``git log`` runs): the box binds a copy of each
    config file with the credentials replaced over it."""
    _, text = world.bash(f"{command} 2>&1; git log --oneline -1 >/dev/null && echo git-works")
    assert "git-works" in text, text
    assert world.leaks(text) == [], text


def test_git_in_the_box_reads_the_redacted_copies(world: World) -> None:
    """git parses the copies: its settings stay, each credential reads as the placeholder, and
    a commit still works (``user.name`` from the global config)."""
    _, text = world.bash(
        "git remote -v; git config --global user.name; git config --global github.token; "
        "git commit -q --allow-empty -m boxed && git log --oneline -1"
    )
    assert world.leaks(text) == [], text
    assert "x-access-token:REDACTED-by-a2a-bridge@github.com/acme/app.git" in text, text
    assert "Box Test" in text and "REDACTED-by-a2a-bridge" in text and "boxed" in text, text
