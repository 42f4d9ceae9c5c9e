"""Private by default and persistence anywhere, as pure policy (issue 23 items 1 and 2)."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.infra.config import ConfigError, parse_config
from omp_a2a_bridge.server.policy.paths import EscalationKind, PathPolicy
from omp_a2a_bridge.server.policy.private import PrivateScope, git_dir_of
from omp_a2a_bridge.server.policy.protected import (
    DEFAULT_PRIVATE_ALLOW,
    HIDDEN_HOME,
    OTHER_HOME,
)

from ..support.helpers import git_repo

P, W = EscalationKind.PROTECTED, EscalationKind.PERSISTENCE
HOME = "/home/alice"


def policy(**kw) -> PathPolicy:
    kw.setdefault("other_homes", ["/home/bob"])
    return PathPolicy([HOME], home=HOME, scan_identities=False, **kw)


# The stores, each named by the table's category (not the generic words).
CATEGORIES = {
    ".claude/.credentials.json": "coding-agent credentials",
    ".codex/auth.json": "coding-agent credentials",
    ".config/github-copilot/hosts.json": "coding-agent credentials",
    ".config/sops/age/keys.txt": "app credentials and sessions",
    ".cache/huggingface/token": "app credentials and sessions",
    ".kaggle/kaggle.json": "app credentials and sessions",
    ".pulumi/credentials.json": "app credentials and sessions",
    ".config/ngrok/ngrok.yml": "app credentials and sessions",
    ".authinfo": "app credentials and sessions",
    ".msmtprc": "app credentials and sessions",
    ".local/share/remmina/a.remmina": "app credentials and sessions",
    ".config/filezilla/sitemanager.xml": "app credentials and sessions",
    ".config/Code/User/globalStorage/state.vscdb": "app credentials and sessions",
    ".local/share/atuin/history.db": "app credentials and sessions",
    ".ssh/id_rsa": "SSH keys",
    ".bashrc": "shell startup file",  # a read of a persistence file: the table's words
    ".some-new-agent/token": HIDDEN_HOME,
    ".config/unknown/state.json": HIDDEN_HOME,
    # The folders macOS and Windows hide in the home for app data count as hidden.
    "Library/Application Support/SomeApp/token": HIDDEN_HOME,
    "AppData/Local/SomeApp/token": HIDDEN_HOME,
    # Per-app homes: a snap's (each ``~/snap/<app>/<revision|common|current>`` is a home with a
    # hidden tree of its own: attack5), Flatpak's (under ``~/.var``), macOS containers (under
    # ``~/Library``).
    "snap/slack/current/.config/Slack/Cookies": HIDDEN_HOME,
    "snap/code/172/.config/Code/User/globalStorage/state.vscdb": HIDDEN_HOME,
    "snap/telegram-desktop/common/.local/share/TelegramDesktop/tdata/key_datas": HIDDEN_HOME,
    "snap/firefox/common/.mozilla/firefox/a.default/logins.json": "browser profiles",
    ".var/app/com.slack.Slack/config/Slack/Cookies": HIDDEN_HOME,
    "Library/Containers/com.tinyspeck.slackmacgap/Data/Library/Cookies/x": HIDDEN_HOME,
}


@pytest.mark.parametrize(("rel", "category"), CATEGORIES.items())
def test_a_private_path_is_named_by_the_table_or_generically(rel, category):
    esc = policy().judge(f"{HOME}/{rel}")
    assert esc is not None and esc.kind is P and esc.category == category, esc
    assert esc.always_asks
    entry = policy().judge_entry(f"{HOME}/{rel}")
    assert entry is not None and entry.category == category


def test_writes_to_the_hidden_tree_are_persistence_and_always_ask():
    p = policy()
    hidden = (".bash_aliases", ".bashrc.d/x", ".cargo/bin/x", ".some-new-tool/hook", ".gitconfig")
    for rel in hidden:
        esc = p.judge(f"{HOME}/{rel}", write=True)
        assert esc is not None and esc.kind is W and esc.always_asks, rel


def test_a_snap_homes_hidden_tree_is_private_and_only_that():
    """``~/snap/<app>/<home>/.*`` is a hidden tree like ``~/.*`` (reads ask, writes are
    persistence); the rest of a snap home reads and writes as any folder of the home."""
    p = policy()
    for rel in ("snap/code/current/.config/Code/User/tasks.json", "snap/x/common/.bashrc"):
        esc = p.judge(f"{HOME}/{rel}", write=True)
        assert esc is not None and esc.kind is W and esc.always_asks, rel
    for rel in ("snap", "snap/code", "snap/code/.x", "snap/code/current", "snap/code/1/a/.b"):
        assert p.judge(f"{HOME}/{rel}") is None, rel
    assert p.judge(f"{HOME}/proj/snap/code/1/.config/x") is None  # only the home's ~/snap
    allowed = policy(private_allow=["~/snap/code/current/.config/Code"])
    assert allowed.judge(f"{HOME}/snap/code/current/.config/Code/User/x.json") is None
    assert allowed.judge(f"{HOME}/snap/code/current/.config/other") is not None


def test_walks_prune_each_snap_homes_hidden_tree(tmp_path):
    home = tmp_path / "home"
    for rel in ("snap/code/172/.config", "snap/code/172/src", "snap/code/common/.cache"):
        (home / rel).mkdir(parents=True)
    (home / "snap/code/current").symlink_to("172")
    scope = PrivateScope(str(home), [], [])
    for base in (home, home / "snap", home / "snap/code/172"):
        under = scope.dirs_under(str(base))
        assert str(home / "snap/code/172/.config") in under, base
        assert str(home / "snap/code/172/src") not in under
    assert str(home / "snap/code/common/.cache") in scope.dirs_under(str(home / "snap"))
    assert scope.dirs_under(str(home / "snap/code/172/src")) == []
    below = str(home / "snap/code/172").lower() + "/"
    assert scope.children(below) == (frozenset(), (".",))
    assert scope.children(str(home / "snap/code").lower() + "/") == (frozenset(), ())


def test_private_allow_default_and_its_limits():
    assert DEFAULT_PRIVATE_ALLOW == ("~/.gitconfig", "~/.config/git")
    p = policy()
    assert p.judge(f"{HOME}/.gitconfig") is None
    assert p.judge(f"{HOME}/.config/git/ignore") is None
    assert p.judge(f"{HOME}/.config/gitx/y") is not None  # a prefix is not a folder
    # The table still wins inside an allowed path: credentials stay credentials.
    assert p.judge(f"{HOME}/.config/git/credentials").kind is P
    # Allowed for reads, still persistence for writes (git config runs programs).
    assert p.judge(f"{HOME}/.gitconfig", write=True).kind is W
    mine = policy(private_allow=["~/.dotfiles"])
    assert mine.judge(f"{HOME}/.dotfiles/vimrc") is None
    assert mine.judge(f"{HOME}/.gitconfig") is not None  # a list replaces the default


def test_app_data_folders_are_hidden_only_as_whole_names():
    p = policy()
    assert p.judge(f"{HOME}/library-books/a.txt") is None
    assert p.judge(f"{HOME}/proj/Library/a.txt") is None
    assert p.judge(f"{HOME}/Library/LaunchAgents/x.plist", write=True).kind is W


def test_other_users_homes_are_private():
    p = policy()
    esc = p.judge("/home/bob/notes.txt")
    assert esc is not None and esc.kind is P and esc.category == OTHER_HOME
    assert p.judge_entry("/home/bob/x") is not None
    assert p.judge(f"{HOME}/notes.txt") is None


@pytest.mark.parametrize(
    "rel",
    [
        "proj/.git",  # a .git FILE (gitdir: elsewhere) is the first step of the indirection
        "proj/.git/config",
        "proj/.git/info/attributes",
        "proj/sub/.git",
        "proj/.vscode/settings.json",
        "proj/.idea/workspace.xml",
        "proj/.envrc",
        "proj/.direnv/x",
        "proj/.venv/lib/python3.11/site-packages/x.pth",
        "proj/sitecustomize.py",
        "proj/src/usercustomize.py",
        "bin/ls",
        "Library/LaunchAgents/x.plist",
        "AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup/x.bat",
    ],
)
def test_persistence_anywhere_asks_for_writes(rel):
    for base in (HOME, "/srv/work"):
        if not rel.startswith("proj/") and base != HOME:
            continue
        p = PathPolicy([base], home=HOME, scan_identities=False, other_homes=[])
        esc = p.judge(f"{base}/{rel}", write=True)
        assert esc is not None and esc.always_asks and esc.kind in (P, W), (base, rel, esc)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        (".envrc", True),
        (".env.local", True),
        (".env-prod", True),
        (".env.example", False),
        ("terraform.tfstate", True),
        ("terraform.tfstate.backup", True),
        ("credentials", True),
        ("credentials.json", True),
        ("credentials.py", False),
        ("id_work", True),
        ("id_work.pub", False),
        ("id_card.py", False),
        ("vault.kdbx", True),
        ("putty.ppk", True),
        ("README.md", False),
    ],
)
def test_secret_looking_names_anywhere(name, secret):
    p = PathPolicy(["/srv/w"], home=HOME, scan_identities=False, other_homes=[])
    assert (p.judge(f"/srv/w/proj/{name}") is not None) is secret, name


def test_known_places_outside_the_home():
    p = policy()
    for path in ("/etc/shadow", "/etc/sudoers.d/x", "/etc/ssh/ssh_host_ed25519_key"):
        esc = p.judge(path)
        assert esc is not None and esc.kind is P, path


def test_walks_prune_the_hidden_tree_but_reach_allowed_paths(tmp_path):
    home = tmp_path / "home"
    for rel in (".ssh", ".config/git", ".config/gh", ".claude", "proj/.cache"):
        (home / rel).mkdir(parents=True)
    (home / ".gitconfig").write_text("x")
    (home / ".netrc").write_text("x")
    scope = PrivateScope(str(home), [str(home / ".gitconfig"), str(home / ".config/git")], [])
    under = scope.dirs_under(str(home))
    for rel in (".ssh", ".config/gh", ".claude", ".netrc"):
        assert str(home / rel) in under, rel
    for rel in (".config", ".config/git", ".gitconfig", "proj", "proj/.cache"):
        assert str(home / rel) not in under, rel
    assert scope.dirs_under(str(home / "proj")) == []


def test_git_dir_of_finds_folders_that_are_git_dirs(tmp_path):
    gd = tmp_path / "gd"
    (gd / "objects").mkdir(parents=True)
    assert git_dir_of(str(gd / "config")) is None  # not a git dir yet
    (gd / "HEAD").write_text("ref: refs/heads/main")
    assert git_dir_of(str(gd / "config")) is None  # still no refs
    # The write that would complete it is judged as a write into it.
    assert git_dir_of(str(gd / "refs" / "heads" / "x")) == str(gd)
    (gd / "refs").mkdir()
    assert git_dir_of(str(gd / "config")) == str(gd)
    assert git_dir_of(str(gd / "hooks" / "pre-commit")) == str(gd)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "HEAD").write_text("x")
    assert git_dir_of(str(wt / "commondir")) == str(wt)  # a worktree's git dir
    assert git_dir_of(str(tmp_path / "plain" / "a.py")) is None
    p = PathPolicy([str(tmp_path)], home=HOME, scan_identities=False, other_homes=[])
    assert p.judge(str(gd / "config"), write=True) is None  # string rules only
    esc = p.judge(str(gd / "config"), write=True, probe=True)
    assert esc is not None and esc.kind is W and esc.always_asks


def test_private_allow_config_is_validated_and_names_its_key():
    cfg = parse_config("/c.json", {})
    assert cfg.private_allow == DEFAULT_PRIVATE_ALLOW
    cfg = parse_config("/c.json", {"private": {"allow": ["~/.dotfiles", "/opt/x"]}})
    assert cfg.private_allow == ("~/.dotfiles", "/opt/x")
    assert parse_config("/c.json", {"private": {"allow": []}}).private_allow == ()
    for raw, words in (
        ({"private": []}, "field 'private' must be"),
        ({"private": {"deny": []}}, "unknown key 'private.deny'"),
        ({"private": {"allow": "~/.x"}}, "field 'private.allow' must be an array"),
        ({"private": {"allow": ["rel/x"]}}, "field 'private.allow' must be paths"),
        ({"private": {"allow": [""]}}, "field 'private.allow' must be an array"),
    ):
        with pytest.raises(ConfigError) as e:
            parse_config("/c.json", raw)
        assert words in str(e.value), (raw, str(e.value))


def test_other_homes_never_include_this_users_home(tmp_path):
    from omp_a2a_bridge.server.policy.private import other_homes

    real_home = os.path.realpath(os.path.expanduser("~"))
    assert real_home not in other_homes(real_home)
    assert all(not real_home.startswith(h + "/") for h in other_homes(real_home))


def test_a_write_to_what_the_git_config_names_is_persistence(tmp_path):
    """``include.path``, ``core.hooksPath`` and a filter's script are the config (round 2)."""
    home = tmp_path / "home"
    app = home / "app"
    git_repo(
        app,
        "[include]\n\tpath = ../.gitconfig\n[core]\n\thooksPath = tools/hooks\n"
        '[filter "tidy"]\n\tclean = ./scripts/tidy.sh\n',
    )
    (app / "scripts").mkdir()
    (app / "scripts" / "tidy.sh").write_text("cat\n")
    pol = PathPolicy([str(home)], home=str(home), scan_identities=False)
    for rel in (".gitconfig", "tools/hooks/pre-commit", "scripts/tidy.sh"):
        esc = pol.judge(str(app / rel), write=True, probe=True)
        assert esc is not None and esc.kind is EscalationKind.PERSISTENCE, rel
    assert pol.judge(str(app / "scripts" / "other.sh"), write=True, probe=True) is None
    assert pol.judge(str(app / ".gitconfig"), write=False) is None  # reading it is fine


def test_a_write_to_a_hooks_path_an_included_global_file_sets_is_persistence(tmp_path):
    """attack5: the write tools ask the same reader as the box (``git_named``), so a hooks
    folder set in a file ``~/.gitconfig`` includes is the config for a write too."""
    home = tmp_path / "home"
    app = home / "app"
    git_repo(app, "")
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text('[includeIf "gitdir:~/work/"]\n\tpath = .config/git/w.inc\n')
    (home / ".config" / "git" / "w.inc").write_text("[core]\n\thooksPath = .hooks\n")
    pol = PathPolicy([str(home)], home=str(home), scan_identities=False)
    esc = pol.judge(str(app / ".hooks" / "pre-commit"), write=True, probe=True)
    assert esc is not None and esc.kind is EscalationKind.PERSISTENCE
    assert "named by git config" in esc.category
    assert pol.judge(str(app / "hooks" / "pre-commit"), write=True, probe=True) is None
