"""The box's look at the disk (``server/box/host.py``): the parts a plan's safety rests on."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.box.host import (
    _hidden,
    _is_git_dir,
    _linked_out,
    _realpath,
    _scan,
    _secrets_allowed,
)
from omp_a2a_bridge.server.box.policy import HostEntry
from omp_a2a_bridge.server.policy.private import (
    MAX_INCLUDE_DEPTH,
    SYSTEM_GIT_CONFIGS,
    _config_entries,
    git_config_files,
    git_named,
)

from ..support.helpers import git_repo


def test_config_entries_read_sections_quotes_and_comments(tmp_path):
    config = tmp_path / "config"
    config.write_text(
        '[core]\n\thooksPath = "my hooks" ; a comment\n[includeIf "gitdir:~/w/"]\n'
        '  path = ../shared.cfg\n[filter "tidy"] clean = ./tidy.sh # inline\n\tbare\n'
    )
    assert _config_entries(str(config)) == [
        ("core", "hookspath", "my hooks"),
        ("includeif", "path", "../shared.cfg"),
        ("filter", "clean", "./tidy.sh"),
    ]
    assert _config_entries(str(tmp_path / "absent")) == []


def test_git_named_finds_hooks_includes_and_scripts(tmp_path):
    home, top = tmp_path / "home", tmp_path / "home" / "app"
    git = git_repo(
        top,
        "[core]\n\thooksPath = .husky\n\tsshCommand = tools/wrap -o X=1\n"
        '[include]\n\tpath = ../.gitconfig\n[remote "o"]\n\turl = https://x/y.git\n'
        "\tfetch = +refs/heads/*:refs/remotes/o/*\n",
    )
    (top / "tools").mkdir()
    (top / "tools" / "wrap").write_text("#!/bin/sh\n")
    (home / ".gitconfig").write_text("[core]\n\thooksPath = ~/hooks\n")
    assert _is_git_dir(str(git)) and not _is_git_dir(str(top))
    named = git_named([(str(top), str(git))], str(home))
    assert set(named) == {
        str(home / "hooks"),
        str(top / ".husky"),
        str(top / "tools" / "wrap"),
        os.path.normpath(str(git / ".." / ".gitconfig")),
    }


def test_git_named_follows_every_include_of_the_global_config(tmp_path):
    """attack5: ``core.hooksPath`` set in a file ``~/.gitconfig`` includes (a dotfiles split)
    made ``.hooks`` in every repository the hooks folder; only the two global files were read.
    Every ``include.path`` and ``includeIf.*.path`` is followed (any condition: fail closed),
    ``~/`` expanded, relative to the including file, a cycle read once."""
    home, top = tmp_path / "home", tmp_path / "home" / "app"
    git = git_repo(top, "[user]\n\tname = x\n")
    inc = home / ".config" / "git"
    inc.mkdir(parents=True)
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[include]\n\tpath = ~/.config/git/work.inc\n")
    (inc / "work.inc").write_text(
        '[includeIf "gitdir:~/elsewhere/"]\n\tpath = sub/more.inc\n[include]\n\tpath = work.inc\n'
    )
    (inc / "sub").mkdir()
    (inc / "sub" / "more.inc").write_text(
        "[include]\n\tpath = ../../../.gitconfig\n[core]\n\thooksPath = .hooks\n"
    )
    named = git_named([(str(top), str(git))], str(home), [str(gitconfig)])
    assert str(top / ".hooks") in named
    assert {str(inc / "work.inc"), str(inc / "sub" / "more.inc")} <= set(named)


def test_git_named_reads_includes_to_gits_depth_and_no_further(tmp_path):
    home, top = tmp_path / "home", tmp_path / "app"
    git = git_repo(top, "")
    home.mkdir()
    chain = [home / f"c{i}" for i in range(MAX_INCLUDE_DEPTH + 2)]
    for i, config in enumerate(chain):
        text = f"[core]\n\thooksPath = hooks{i}\n"
        if i + 1 < len(chain):
            text += f"[include]\n\tpath = c{i + 1}\n"
        config.write_text(text)
    named = git_named([(str(top), str(git))], str(home), [str(chain[0])])
    assert str(top / f"hooks{MAX_INCLUDE_DEPTH}") in named  # git reads this deep...
    assert str(top / f"hooks{MAX_INCLUDE_DEPTH + 1}") not in named  # ...and stops, as git does


def test_git_named_joins_a_relative_include_to_the_links_and_the_real_folder(tmp_path):
    """Git joins a relative include to the folder of the path it opened (a symlinked
    ``~/.gitconfig`` includes from ``~``); the file's real folder is read too."""
    home, top, dots = tmp_path / "home", tmp_path / "app", tmp_path / "dotfiles"
    git = git_repo(top, "[include]\n\tpath = ../../repo.inc\n")
    home.mkdir()
    dots.mkdir()
    (dots / "gitconfig").write_text("[include]\n\tpath = hooks.inc\n")
    (dots / "hooks.inc").write_text("[core]\n\thooksPath = from-dots\n")
    (home / "hooks.inc").write_text("[core]\n\thooksPath = from-home\n")
    (tmp_path / "repo.inc").write_text("[core]\n\thooksPath = ~/repo-hooks\n")
    (home / ".gitconfig").symlink_to(dots / "gitconfig")
    named = git_named([(str(top), str(git))], str(home), [str(home / ".gitconfig")])
    assert {str(top / "from-dots"), str(top / "from-home"), str(home / "repo-hooks")} <= set(named)


def test_the_git_config_files_are_the_systems_and_every_global_one():
    home = "/home/alice"
    env = {"XDG_CONFIG_HOME": "/home/alice/xdg", "GIT_CONFIG_GLOBAL": "~/dots/git"}
    files = git_config_files(home, env)
    assert set(SYSTEM_GIT_CONFIGS) <= set(files)
    assert {
        "/home/alice/xdg/git/config",
        "/home/alice/dots/git",
        "/home/alice/.config/git/config",
        "/home/alice/.gitconfig",
    } <= set(files)
    assert os.devnull not in git_config_files(home, {"GIT_CONFIG_SYSTEM": os.devnull})
    assert not [f for f in git_config_files(home, {"XDG_CONFIG_HOME": "rel"}) if "rel" in f]


def test_folders_on_the_bridges_path_are_never_a_project(tmp_path, monkeypatch):
    """``~/tools/bin`` on the human's PATH: a ``git`` planted there by a boxed call in it runs
    outside the box at the human's next ``git`` (round 2 of the outside review)."""
    from omp_a2a_bridge.server.box.host import gather
    from omp_a2a_bridge.server.box.policy import BoxConfig, build_plan

    home = tmp_path / "home"
    tools, proj = home / "tools" / "bin", home / "proj"
    tools.mkdir(parents=True)
    (proj / "node_modules" / ".bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{tools}:{proj}/node_modules/.bin:/usr/bin:/:{home}")
    view = gather(str(tools), [str(home)], BoxConfig(), [])
    assert build_plan(view, BoxConfig()).write == ()
    plan = build_plan(gather(str(proj), [str(home)], BoxConfig(), []), BoxConfig())
    assert plan.write == (str(proj),)
    assert f"{proj}/node_modules/.bin" in plan.write_protected


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_gitlinks_are_read_from_every_index_version(tmp_path, version):
    import subprocess

    from omp_a2a_bridge.server.box.host import _gitlinks

    env = {**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*argv: str) -> str:
        return subprocess.run(
            ["git", *argv], cwd=tmp_path, env=env, check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q")
    sha = "1" * 40
    names = ["a.txt", "deps/lib-one", "deps/lib-two", "node_modules/x/y"]
    (tmp_path / "a.txt").write_text("a")
    git("add", "a.txt")
    for name in names[1:]:
        git("update-index", "--add", "--cacheinfo", f"160000,{sha},{name}")
    if version == "3":
        git("update-index", "--index-version", "3")
        git("update-index", "--skip-worktree", "a.txt")  # an extended flag: v3's extra bytes
    else:
        git("update-index", "--index-version", version)
    assert _gitlinks(str(tmp_path / ".git" / "index")) == names[1:]
    assert _gitlinks(str(tmp_path / "absent")) == []


def test_gitlinks_are_read_again_whenever_the_index_changed(tmp_path, monkeypatch):
    """The answer is kept per index file, but any change (even one that restores the size
    and the mtime, as an agent could with ``touch -d``) makes it read again."""
    import subprocess

    from omp_a2a_bridge.server.box.host import _gitlinks, _parse_gitlinks

    here = "omp_a2a_bridge.server.box.host"
    monkeypatch.setattr(f"{here}.RACY_NS", 0)  # keep answers at once (no clock-tick guard)
    env = {**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*argv: str) -> None:
        subprocess.run(["git", *argv], cwd=tmp_path, env=env, check=True, capture_output=True)

    git("init", "-q")
    git("update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},deps/aaa")
    index = tmp_path / ".git" / "index"
    assert _gitlinks(str(index)) == ["deps/aaa"]
    reads: list[bytes] = []
    monkeypatch.setattr(
        f"{here}._parse_gitlinks", lambda data: reads.append(data) or _parse_gitlinks(data)
    )
    assert _gitlinks(str(index)) == ["deps/aaa"] and reads == []  # unchanged: kept
    before = index.stat()
    data = index.read_bytes()
    with open(index, "r+b") as f:  # the same size, in place, then the old mtime put back
        f.write(data.replace(b"deps/aaa", b"deps/bbb"))
    os.utime(index, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert _gitlinks(str(index)) == ["deps/bbb"] and len(reads) == 1


def test_top_level_folders_no_os_makes_are_hidden_unless_the_call_needs_them(tmp_path):
    from omp_a2a_bridge.server.box.host import _foreign_tops

    for name in ("usr", "etc", "opt", "var", "home", "srv", "mnt", "media", "data", "work"):
        (tmp_path / name).mkdir()
    (tmp_path / "backup").symlink_to(tmp_path / "mnt")  # a link leads to a folder judged alone
    (tmp_path / "swapfile").write_text("")
    proj = str(tmp_path / "work" / "me" / "proj")
    needed = [proj, str(tmp_path / "usr" / "bin"), str(tmp_path / "data")]
    masks, reopened = _foreign_tops(needed, root=str(tmp_path))
    # /data is needed whole (a root there); /work only holds what is needed: hidden, and
    # the project alone re-opened (its siblings on that disk are not the call's)
    dirs = sorted(os.path.basename(e.path) for e in masks if e.is_dir)
    assert dirs == ["media", "mnt", "srv", "work"] and reopened == [proj]
    # a readable file straight in / is data too: masked as a file
    files = [os.path.basename(e.path) for e in masks if not e.is_dir]
    assert files == (["swapfile"] if os.access(tmp_path / "swapfile", os.R_OK) else [])


def test_a_program_folder_inside_a_hidden_top_reopens_its_install_prefix(tmp_path):
    """``/srv/tools/node/bin`` on PATH (or a link leading there) re-opens ``/srv/tools/node``
    (its ``lib`` beside ``bin``), never ``/`` nor the whole top."""
    from omp_a2a_bridge.server.box.host import _foreign_tops

    node_bin = tmp_path / "srv" / "tools" / "node" / "bin"
    node_bin.mkdir(parents=True)
    (tmp_path / "mnt" / "x").mkdir(parents=True)
    programs = [str(node_bin), str(tmp_path / "mnt" / "x"), "/"]
    masks, reopened = _foreign_tops(["/"], programs, root=str(tmp_path))
    assert sorted(os.path.basename(e.path) for e in masks) == ["mnt", "srv"]
    assert reopened == sorted([str(tmp_path / "mnt" / "x"), str(node_bin.parent)])


def test_programs_linked_from_path_keep_their_folder(tmp_path):
    from omp_a2a_bridge.server.box.host import _path_link_targets

    bin_dir, tools = tmp_path / "bin", tmp_path / "srv" / "tools"
    bin_dir.mkdir()
    tools.mkdir(parents=True)
    (tools / "x").write_text("#!/bin/sh\n")
    (bin_dir / "plain").write_text("")
    assert _path_link_targets((str(bin_dir),)) == ()
    (bin_dir / "x").symlink_to(tools / "x")  # the folder's mtime changes: looked at again
    assert _path_link_targets((str(bin_dir),)) == (str(tools),)


def test_read_allow_reopens_a_folder_inside_a_hidden_top_level_folder_not_the_whole(tmp_path):
    """``box.read_allow: ["/srv/tools"]`` shows /srv/tools, and /srv stays hidden around it."""
    from omp_a2a_bridge.server.box.host import gather
    from omp_a2a_bridge.server.box.policy import BoxConfig, build_plan

    from ..support.boxworld import top_level_folder

    with top_level_folder("a2a-srv-") as top:
        tools = os.path.join(top, "tools")
        os.makedirs(tools)
        root = tmp_path / "root"
        root.mkdir()
        config = BoxConfig(read_allow=(tools,))
        plan = build_plan(gather(str(root), [str(root)], config, []), config)
        assert top in plan.read_private
        assert tools in plan.read_allow


def test_a_folder_the_index_did_not_look_into_that_holds_the_cwd_is_looked_into(tmp_path):
    """An outside review: a folder the index left out is hidden whole, but not one that
    holds the call's project: then nothing in it was masked. It is looked into per call: its
    secrets masked, each folder beside the project hidden whole, the project left to the
    project scan; a folder too big to look into refuses the box."""
    from omp_a2a_bridge.server.box.host import SCAN_MAX_MASKS, TooManySecrets, _outside
    from omp_a2a_bridge.server.box.policy import HostEntry

    top = tmp_path / "top"
    (top / "work" / "app" / "src").mkdir(parents=True)
    (top / "other" / "x").mkdir(parents=True)
    (top / "node_modules" / "m").mkdir(parents=True)
    for rel in (".env", "README.md", "work/id_ed25519", "work/app/.env"):
        (top / rel).write_text("x")
    project, home = str(top / "work" / "app"), str(tmp_path)
    masks = _outside([], [str(top)], [], [project, project, home, home], [])
    assert {(os.path.relpath(m.path, top), m.is_dir) for m in masks} == {
        (".env", False),
        ("other", True),
        ("work/id_ed25519", False),
    }
    # one it may hide is looked into too (a folder made a moment ago, while the index's
    # budget is full): its secret-looking files masked, the rest shown
    elsewhere = str(tmp_path / "elsewhere")
    out = _outside([], [str(top)], [], [elsewhere, elsewhere, home, home], [])
    assert {(os.path.relpath(m.path, top), m.is_dir) for m in out} == {
        (".env", False),
        ("work/id_ed25519", False),
        ("work/app/.env", False),
    }
    assert HostEntry(str(top), True) not in out
    for i in range(SCAN_MAX_MASKS + 1):
        (top / f"k{i}.pem").write_text("x")
    with pytest.raises(TooManySecrets):
        _outside([], [str(top)], [], [project, project, home, home], [])


def test_folders_the_index_left_out_are_looked_into_within_bounds(tmp_path, monkeypatch):
    """Per call, the newest folders the index did not look into are looked into (a folder
    made a moment ago shows at once); one too big, one that may not be listed, or one past
    the per-call bounds is hidden whole, as the index alone does; one gone is no mount."""
    from omp_a2a_bridge.server.box import host
    from omp_a2a_bridge.server.box.host import _TOO_BIG, _unindexed_masks
    from omp_a2a_bridge.server.box.policy import HostEntry

    _TOO_BIG.clear()
    small, big, gone = tmp_path / "small", tmp_path / "big", tmp_path / "gone"
    (small / "cfg").mkdir(parents=True)
    (small / "cfg" / "id_rsa").write_text("x")
    (small / "notes.txt").write_text("x")
    (small / "node_modules" / "m").mkdir(parents=True)  # skipped, as the index skips it
    (small / "node_modules" / "m" / ".env").write_text("x")
    big.mkdir()
    for i in range(host.FRESH_MAX_ENTRIES + 1):
        (big / f"f{i}").write_text("x")
    out = _unindexed_masks([str(small), str(big), str(gone)], ())
    key = HostEntry(str(small / "cfg" / "id_rsa"), False)
    assert out == [key, HostEntry(str(big), True)]
    assert str(big) in _TOO_BIG  # not looked through again while it is unchanged
    # past the number of folders a call looks into: the older ones hidden whole
    many = [tmp_path / f"m{i}" for i in range(host.FRESH_MAX_FOLDERS + 1)]
    for m in many:
        m.mkdir()
    out = _unindexed_masks([str(m) for m in many], ())
    assert out == [HostEntry(str(many[-1]), True)]
    # past the entries a call looks through over all of them: the rest hidden whole
    monkeypatch.setattr(host, "FRESH_CALL_MAX_ENTRIES", 3)
    (many[0] / "a").write_text("x")
    (many[0] / "b").write_text("x")
    (many[1] / "c").write_text("x")
    (many[1] / "d").write_text("x")
    out = _unindexed_masks([str(m) for m in many[:3]], ())
    assert out == [HostEntry(str(many[1]), True), HostEntry(str(many[2]), True)]
    assert str(many[1]) not in _TOO_BIG  # too big for what was left, not on its own


def test_what_a_secret_looking_link_points_to_is_masked(tmp_path):
    """An outside review: ``~/svc/.env -> ~/vault/svc-settings`` was read through in the box
    (the scan and the index judged only regular files)."""
    from omp_a2a_bridge.server.box.host import _link_targets

    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "settings").write_text("x")
    os.symlink(tmp_path / "vault" / "settings", tmp_path / ".env")
    os.symlink(tmp_path / "vault", tmp_path / "credentials")  # a folder: not a file's name
    os.symlink(tmp_path / "gone", tmp_path / ".env.old")  # dangling: nothing to mask
    os.symlink("/dev/null", tmp_path / "id_rsa")  # not in the roots (and no file)
    links = [str(tmp_path / n) for n in (".env", "credentials", ".env.old", "id_rsa")]
    assert _link_targets(links, [str(tmp_path)]) == [str(tmp_path / "vault" / "settings")]
    assert _link_targets(links, ["/elsewhere"]) == []  # only what lies in the roots


def test_a_folder_not_looked_into_inside_what_the_box_reads_whole_never_refuses(tmp_path):
    """A ``read_allow`` folder (or a git dir) the index left out is looked into, bounded, and
    never refuses the box: that would refuse every call in every project."""
    from omp_a2a_bridge.server.box.host import SCAN_MAX_MASKS, _outside

    shown = tmp_path / "datasets"
    (shown / "a").mkdir(parents=True)
    (shown / "a" / ".env").write_text("x")
    for i in range(SCAN_MAX_MASKS + 5):
        (shown / f"k{i}.pem").write_text("x")
    project, home = str(tmp_path / "proj"), str(tmp_path)
    masks = _outside([], [str(shown)], [], [project, project, home, home], [str(shown)])
    assert len(masks) == SCAN_MAX_MASKS and all(not m.is_dir for m in masks)


def test_var_shows_what_programs_read_and_hides_its_data_folders(tmp_path):
    """/var: state, caches and the links into /run show; the mail spool, backups, logs,
    crash dumps, web sites and other programs' /var/tmp are hidden whole, and what the call
    needs in one (a root under /var/tmp, a site under /var/www) is re-opened on its own."""
    from omp_a2a_bridge.server.box.host import _foreign_tops
    from omp_a2a_bridge.server.box.policy import VAR_SHOWN

    for name in ("lib", "cache", "empty", "mail", "spool", "backups", "log", "crash", "www", "tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "run").symlink_to("/run")
    (tmp_path / "dump.sql").write_text("")
    site = str(tmp_path / "www" / "site")
    masks, reopened = _foreign_tops([site], root=str(tmp_path), system=VAR_SHOWN)
    dirs = sorted(os.path.basename(e.path) for e in masks if e.is_dir)
    assert dirs == ["backups", "crash", "log", "mail", "spool", "tmp", "www"]
    assert reopened == [site]
    assert [os.path.basename(e.path) for e in masks if not e.is_dir] == ["dump.sql"]


def test_var_folders_a_system_top_links_to_are_the_system(tmp_path):
    """Fedora Silverblue: ``/opt -> var/opt``, ``/usr/local -> ../var/usrlocal`` (here a top
    folder), ``/home -> var/home``: those folders of /var show; ``/var/mail`` does not."""
    from omp_a2a_bridge.server.box.host import _var_shown

    for name in ("opt", "home", "mail", "lib", "usrlocal"):
        (tmp_path / "var" / name).mkdir(parents=True)
    (tmp_path / "usr").mkdir()
    (tmp_path / "opt").symlink_to("var/opt")
    (tmp_path / "home").symlink_to("var/home")
    (tmp_path / "usr" / "local").symlink_to("../var/usrlocal")
    shown = _var_shown(str(tmp_path))
    assert {"opt", "home", "lib", "usrlocal"} <= shown and "mail" not in shown


def test_system_secrets_become_masks_but_never_in_a_root_a_path_folder_or_a_walked_top(
    monkeypatch,
):
    """The walk's files are masks, except in a root (the index judges those), straight in a
    PATH folder (a program), or in a folder hidden already; past the limit, folders holding
    several become one mask, never /etc itself nor one holding what the call needs."""
    from omp_a2a_bridge.server.box import host
    from omp_a2a_bridge.server.box.host import _system_masks
    from omp_a2a_bridge.server.box.policy import HostView

    found = (
        "/opt/app/.env",
        "/home/me/w/.env",  # in a root
        "/usr/local/bin/credentials-helper",  # a program on PATH
        "/var/lib/hidden/x.key",  # in a folder hidden already
        *(f"/etc/many/d{i}/secret.key" for i in range(70)),
        *(f"/etc/x{i}.key" for i in range(3)),
    )
    monkeypatch.setattr(host, "system_found", lambda is_secret: found)
    gone = "/etc/x0.key"  # listed by the kept walk, removed since: no mount point, no mask
    monkeypatch.setattr(host.os.path, "lexists", lambda p: p != gone)
    view = HostView(cwd="/home/me/w", home="/home/me", roots=("/home/me",))
    masks = _system_masks(view, ["/var/lib/hidden"], ["/usr/local/bin"], ["/home/me"])
    paths = {m.path for m in masks}
    assert "/opt/app/.env" in paths and "/etc/many" in paths
    assert {f"/etc/x{i}.key" for i in (1, 2)} <= paths  # straight in /etc: never /etc whole
    assert gone not in paths
    assert not paths & {"/home/me/w/.env", "/usr/local/bin/credentials-helper", "/etc"}
    assert not any(p.startswith("/var/lib/hidden") for p in paths)


def test_the_box_hides_snap_whole_as_the_homes_hidden_tree(tmp_path):
    """attack5: ``~/snap/<app>/<revision|common>`` are the snap apps' homes (Ubuntu's Firefox
    and Chromium profiles, Slack's cookies): the box hides ``~/snap`` beside ``~/.*``."""
    home = tmp_path / "home"
    for rel in (".ssh", "snap/firefox/common/.mozilla", "snap/code/172/.config", "proj"):
        (home / rel).mkdir(parents=True)
    hidden = _hidden(str(home), [str(home / "proj")])
    assert set(hidden) == {HostEntry(str(home / ".ssh"), True), HostEntry(str(home / "snap"), True)}


def test_a_root_inside_snap_keeps_each_snap_homes_hidden_tree_hidden(tmp_path):
    home = tmp_path / "home"
    for rel in ("snap/firefox/common/.mozilla", "snap/code/172/.config", "snap/code/172/proj"):
        (home / rel).mkdir(parents=True)
    (home / "snap/code/172/.env").write_text("x")
    (home / "snap/code/current").symlink_to("172")
    (home / "snap/code/out").symlink_to("/")  # a link out of ~/snap is no snap home
    hidden = {e.path for e in _hidden(str(home), [str(home / "snap/code/172/proj")])}
    assert hidden == {
        str(home / "snap/firefox/common/.mozilla"),
        str(home / "snap/code/172/.config"),
        str(home / "snap/code/172/.env"),
    }


def test_links_inside_the_hidden_tree_make_their_targets_hidden(tmp_path):
    """GNU Stow: ``~/.config/autostart/x.desktop`` and ``~/.config/fish`` live in
    ``~/dotfiles``; their targets are the hidden tree's files (attack6)."""
    home = tmp_path / "home"
    dots = home / "dotfiles"
    (dots / "fish").mkdir(parents=True)
    (dots / "x.desktop").write_text("[Desktop Entry]")
    (home / ".config" / "autostart").mkdir(parents=True)
    (home / ".config" / "autostart" / "x.desktop").symlink_to(dots / "x.desktop")
    (home / ".config" / "fish").symlink_to(dots / "fish")
    (home / ".config" / "inside").symlink_to(home / ".config" / "autostart")  # stays hidden
    (home / ".cache" / "deep").mkdir(parents=True)
    (home / ".cache" / "deep" / "l").symlink_to(dots)  # a cache is not looked into
    found = _linked_out(str(home))
    assert sorted(found) == sorted([str(dots / "x.desktop"), str(dots / "fish")])
    hidden = {e.path for e in _hidden(str(home), [str(home)])}
    assert str(dots / "x.desktop") in hidden and str(dots / "fish") in hidden


def test_the_fast_realpath_answers_what_realpath_answers(tmp_path):
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "f").write_text("x")
    (tmp_path / "link").symlink_to(real)
    (real / "loop").symlink_to(real / "loop")
    (real / "dangling").symlink_to(tmp_path / "nowhere")
    names = [
        "real",
        "real/sub",
        "real/sub/f",
        "link",
        "link/sub/f",
        "real/none",
        "link/none",
        "real/none/deeper",
        "real/loop",
        "real/dangling",
        "real/sub/../sub/f",
        "real/sub/",
        "real/./sub",
        "nowhere",
        "real/sub/f/below",
    ]
    for name in names:
        path = os.path.join(str(tmp_path), name)
        assert _realpath(path) == os.path.realpath(path), name


def test_a_secret_written_into_a_read_allow_folder_is_found_on_the_next_call(tmp_path, monkeypatch):
    monkeypatch.setattr("omp_a2a_bridge.server.box.secrets.RACY_NS", 0)
    top = tmp_path / "git"
    (top / "sub").mkdir(parents=True)
    (top / "config").write_text("[user]\n")
    assert _secrets_allowed([str(top)]) == []
    (top / "sub" / "credentials").write_text("https://u:p@example.com\n")
    found = [e.path for e in _secrets_allowed([str(top)])]
    assert found == [str(top / "sub" / "credentials")]


def test_a_file_given_a_second_name_elsewhere_after_its_folders_look_is_masked(
    tmp_path, monkeypatch
):
    """A kept look does not keep a file's link count (attack8 #1): ``ln proj/src/notes
    ~/.bash_history`` adds no name to ``src``, and what is written through the other name is
    read through this one."""
    monkeypatch.setattr("omp_a2a_bridge.server.box.secrets.RACY_NS", 0)
    src = tmp_path / "proj" / "src"
    src.mkdir(parents=True)
    (src / "notes.txt").write_text("notes")
    (tmp_path / "elsewhere").mkdir()
    project = str(tmp_path / "proj")
    assert _scan(project, "/nonexistent").masks == []
    assert _scan(project, "/nonexistent").masks == []  # from the kept look
    os.link(src / "notes.txt", tmp_path / "elsewhere" / "history")
    assert [m.path for m in _scan(project, "/nonexistent").masks] == [str(src / "notes.txt")]


def test_persistence_found_under_another_case_on_a_folding_file_system(tmp_path, monkeypatch):
    """On a file system that folds case (APFS, an ext4 casefold folder) ``.VSCode`` is what
    ``.vscode`` names: it exists, so the sweep must not take it for one a call made (attack8
    note). Simulated: the listing shows ``.VSCode`` and ``lexists`` answers as such a file
    system does."""
    from omp_a2a_bridge.server.box import host

    (tmp_path / ".VSCode").mkdir()
    wanted = str(tmp_path / ".vscode")
    real = os.path.lexists
    monkeypatch.setattr(
        host.os.path, "lexists", lambda p: real(p) or p == wanted
    )  # the folding file system's answer
    assert host._existing([wanted, str(tmp_path / ".idea")]) == frozenset({wanted})  # noqa: SLF001
