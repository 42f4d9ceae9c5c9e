"""The box's pure parts: HostView -> BoxPlan, BoxPlan -> bwrap argv, the refusal note, config."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omp_a2a_bridge.server.box.bwrap import (
    STATUS_FD,
    BwrapHost,
    render,
    render_outside,
    schedule,
    with_status_fd,
)
from omp_a2a_bridge.server.box.plan import BoxPlan, BoxStatus, Mechanism
from omp_a2a_bridge.server.box.policy import (
    BoxConfig,
    HostEntry,
    HostView,
    box_gate,
    build_plan,
    home_data_folders,
    missing_persistence,
    project_of,
)
from omp_a2a_bridge.server.box.run import refused_note
from omp_a2a_bridge.server.errors import ConfigError
from omp_a2a_bridge.server.infra.config import parse_config

H = "/home/u"


def view(**kw) -> HostView:
    base = {"cwd": f"{H}/proj/src", "home": H, "roots": (H,), "git_top": f"{H}/proj"}
    base.update(kw)
    if base.get("git_top") and "git_dirs" not in kw and not kw.get("git_file"):
        base["git_dirs"] = (f"{base['git_top']}/.git",)
    return HostView(**base)


@pytest.mark.parametrize(
    ("kw", "project"),
    [
        ({}, f"{H}/proj"),  # the git top-level
        ({"git_top": None}, f"{H}/proj/src"),  # else the cwd
        ({"git_top": None, "cwd": H}, None),  # never the home
        ({"git_top": H, "cwd": f"{H}/notes"}, f"{H}/notes"),  # a dotfiles repo in the home
        ({"roots": ("/srv",)}, None),  # outside every root: nothing writable
        ({"git_top": "/", "cwd": f"{H}/x", "roots": ("/",)}, f"{H}/x"),  # never holds the home
    ],
)
def test_project_of(kw, project):
    assert project_of(view(**kw)) == project


def test_hidden_entries_are_private_except_read_allow():
    v = view(
        hidden=(
            HostEntry(f"{H}/.ssh", True),
            HostEntry(f"{H}/.netrc", False),
            HostEntry(f"{H}/.config", True),
            HostEntry(f"{H}/.gitconfig", False),
        ),
        allowed=(f"{H}/.gitconfig", f"{H}/.config/git"),
        others=("/home/other", "/root"),
        own=("/run/user/1000", "/var/run/a2a"),
    )
    plan = build_plan(v, BoxConfig())
    assert f"{H}/.ssh" in plan.read_private and f"{H}/.netrc" in plan.read_private
    assert f"{H}/.gitconfig" not in plan.read_private  # readable as it is
    assert plan.private_files == (f"{H}/.netrc",)
    assert plan.read_allow == (f"{H}/.config/git",)  # re-opened under the masked ~/.config
    assert {"/home/other", "/root", "/run/user/1000", "/var/run/a2a"} <= set(plan.read_private)
    # the project, and its git dir bound onto itself (a mount point: no rename, no swap)
    assert plan.write == (f"{H}/proj", f"{H}/proj/.git")
    assert plan.tmpdir == "/tmp" and plan.network is False


def test_persistence_in_the_project_stays_read_only_when_it_exists():
    p = f"{H}/proj"
    existing = frozenset({f"{p}/.git/hooks", f"{p}/.git/config", f"{p}/.vscode"})
    v = view(existing=existing)
    plan = build_plan(v, BoxConfig())
    assert set(plan.write_protected) == existing
    missing = missing_persistence(v, project_of(v))
    assert f"{p}/.envrc" in missing and f"{p}/.idea" in missing and f"{p}/.direnv" in missing
    assert f"{p}/.git/hooks" not in missing


def test_a_worktree_writes_its_git_dirs_but_not_their_hooks_config_or_the_git_file():
    wt, main = f"{H}/wt", f"{H}/proj/.git"
    gd = f"{main}/worktrees/wt"
    existing = frozenset({f"{wt}/.git", f"{main}/hooks", f"{main}/config"})
    v = view(cwd=wt, git_top=wt, git_file=f"{wt}/.git", git_dirs=(gd, main), existing=existing)
    plan = build_plan(v, BoxConfig())
    assert set(plan.write) == {wt, gd, main}
    assert set(plan.write_protected) == existing


def test_git_dirs_outside_the_roots_stay_read_only():
    v = view(
        cwd="/srv/wt",
        git_top="/srv/wt",
        git_file="/srv/wt/.git",
        roots=("/srv",),
        git_dirs=("/elsewhere/.git/worktrees/wt", "/elsewhere/.git"),
    )
    assert build_plan(v, BoxConfig()).write == ("/srv/wt",)


def test_roots_under_tmp_stay_visible_and_come_before_the_masks():
    v = view(
        cwd="/tmp/r/p",
        git_top=None,
        home="/tmp/r",
        roots=("/tmp/r", "/srv"),
        hidden=(HostEntry("/tmp/r/.ssh", True),),
    )
    plan = build_plan(v, BoxConfig())
    assert plan.read_visible == ("/tmp/r",)
    argv = render(plan, HOST, ["true"])
    assert argv.index("/tmp") < argv.index("/tmp/r") < argv.index("/tmp/r/.ssh")
    assert argv.index("/tmp/r") < argv.index("/tmp/r/p")


def test_write_allow_and_network_from_the_config():
    v = view(write_allow=("/data/cache",))
    plan = build_plan(v, BoxConfig(write_allow=("/data/cache",), network=True))
    assert set(plan.write) == {f"{H}/proj", f"{H}/proj/.git", "/data/cache"}
    assert plan.network is True


HOST = BwrapHost("/usr/bin/bwrap", "/x/empty")


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_render_orders_mounts_from_widest_to_narrowest():
    plan = BoxPlan(
        cwd=f"{H}/proj",
        read_private=(f"{H}/.config", f"{H}/.netrc", "/run/user/1"),
        write=(f"{H}/proj",),
        write_protected=(f"{H}/proj/.git/hooks",),
        tmpdir="/tmp",
        private_files=(f"{H}/.netrc",),
        read_allow=(f"{H}/.config/git",),
    )
    argv = render(plan, HOST, ["bash", "-c", "true"])
    assert argv[0] == "/usr/bin/bwrap" and argv[-3:] == ["bash", "-c", "true"]
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    order = [
        argv.index(x) for x in ("/", f"{H}/.config", f"{H}/.config/git", f"{H}/proj/.git/hooks")
    ]
    assert order == sorted(order)
    tmpfs = _pairs(argv, "--tmpfs")
    assert {"/tmp", "/dev/shm"} <= set(tmpfs) and argv.index("/dev") < argv.index("/dev/shm")
    assert f"{H}/.config" in _pairs(argv, "--tmpfs") and f"{H}/.netrc" not in _pairs(
        argv, "--tmpfs"
    )
    i = argv.index(f"{H}/.netrc")
    assert argv[i - 2 : i] == ["--ro-bind", "/x/empty"]  # a private file: an empty file
    assert _pairs(argv, "--bind") == [f"{H}/proj"]
    assert argv[argv.index("--chdir") + 1] == f"{H}/proj"
    assert argv[argv.index("TMPDIR") + 1] == "/tmp"


def test_a_mask_inside_the_writable_project_comes_after_its_bind():
    plan = BoxPlan(
        cwd="/p",
        read_private=("/p/.env",),
        write=("/p",),
        write_protected=(),
        tmpdir="/tmp",
        private_files=("/p/.env",),
    )
    argv = render(plan, HOST, ["true"])
    assert argv.index("--bind") < argv.index("/p/.env")


def test_render_with_network_on_keeps_the_network():
    plan = BoxPlan(
        cwd="/p", read_private=(), write=(), write_protected=(), tmpdir="/tmp", network=True
    )
    assert "--unshare-net" not in render(plan, HOST, ["true"])


def test_render_names_the_status_descriptor_only_when_asked():
    """bash's box reports on a descriptor its supervisor provides (whether the command
    started); other boxes (walks, servers, the bench) are started without one."""
    plan = BoxPlan(cwd="/p", read_private=(), write=(), write_protected=(), tmpdir="/tmp")
    argv = render(plan, HOST, ["true"], STATUS_FD)
    at = argv.index("--json-status-fd")
    assert argv[at + 1] == str(STATUS_FD) and at < argv.index("--")
    assert "--json-status-fd" not in render(plan, HOST, ["true"])
    # a launcher that knows the number only once its pipe is made (rg's walks) adds it after
    later = with_status_fd(render(plan, HOST, ["rg", "--die-with-parent"]), 7)
    assert later[later.index("--json-status-fd") + 1] == "7"
    assert later.index("--json-status-fd") < later.index("--") and later[-1] == "--die-with-parent"


PLAN = BoxPlan(
    cwd=f"{H}/proj",
    read_private=(f"{H}/.bashrc",),
    write=(f"{H}/proj",),
    write_protected=(),
    tmpdir="/tmp",
    private_files=(f"{H}/.bashrc",),
)


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("bash: line 1: .git/hooks/x: Read-only file system", "writing .git/hooks/x"),
        ("touch: cannot touch '/etc/x': Read-only file system", "writing /etc/x"),
        ("OSError: [Errno 30] Read-only file system: '/opt/y'", "writing /opt/y"),
        (f"bash: {H}/.bashrc: Permission denied", f"writing {H}/.bashrc"),
        ("curl: (7) Failed to connect to 127.0.0.1 port 1: Couldn't connect", "the network"),
        ("ssh: Could not resolve hostname github.com", "the network"),
    ],
)
def test_refused_note_names_what_the_box_refused(output, said):
    note = refused_note(output, PLAN)
    assert note is not None and said in note and '"box": false' in note


def test_refused_note_is_silent_for_ordinary_failures():
    assert refused_note("AssertionError: 1 != 2\nbash: /x: Permission denied", PLAN) is None
    assert "now removed" in (refused_note("", PLAN, (f"{H}/proj/.envrc",)) or "")


def test_box_gate():
    there = BoxStatus(True, Mechanism.BWRAP, "bwrap")
    gone = BoxStatus(False, Mechanism.NONE, "bubblewrap is missing")
    assert box_gate({"command": "x"}, there) is None
    assert "bubblewrap is missing" in (box_gate({"command": "x"}, gone) or "")
    assert "needs the network" in (
        box_gate({"box": False, "reason": "needs the network"}, there) or ""
    )


@pytest.mark.parametrize(
    ("box", "key"),
    [
        ("on", "box"),
        ({"network": True}, "box.network"),
        ({"read_allow": ["relative/path"]}, "box.read_allow"),
        ({"write_allow": "~/x"}, "box.write_allow"),
        ({"write_allow": ["~"]}, "box.write_allow"),
        ({"write_allow": ["/."]}, "box.write_allow"),  # attack7: / by another spelling
        ({"write_allow": ["/.."]}, "box.write_allow"),
        ({"write_allow": ["~/."]}, "box.write_allow"),
        ({"write_allow": ["~/x/.."]}, "box.write_allow"),
    ],
)
def test_bad_box_config_names_the_key(box, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        parse_config("/c.json", {"box": box})


def test_good_box_config_and_tier():
    cfg = parse_config(
        "/c.json",
        {
            "box": {"network": "on", "write_allow": ["~/.cache/x"], "read_allow": []},
            "approval": {"tiers": {"bash": "box"}},
        },
    )
    assert cfg.box.network is True and cfg.box.read_allow == () and cfg.tiers["bash"] == "box"
    assert parse_config("/c.json", {}).box == BoxConfig()


def test_too_many_masks_coalesce_into_their_folders_never_the_project():
    from omp_a2a_bridge.server.box.host import TooManySecrets, coalesce
    from omp_a2a_bridge.server.box.policy import HostEntry

    top = "/p"
    many = [HostEntry(f"/p/many/d{i:03}/credentials", False) for i in range(600)]
    few = [HostEntry("/p/.env", False), HostEntry("/p/src/key.pem", False)]
    out = coalesce(many + few, top, 256)
    assert {(m.path, m.is_dir) for m in out} == {
        ("/p/many", True),  # 600 masks become one folder mask
        ("/p/.env", False),  # the others stay as narrow as they were
        ("/p/src/key.pem", False),
    }
    assert all(m.path != top for m in out)
    # Under the limit nothing changes.
    assert coalesce(few, top, 256) == few
    # Secrets straight in the project beyond the limit: refused, not leaked.
    flat = [HostEntry(f"/p/k{i}.pem", False) for i in range(300)]
    try:
        coalesce(flat, top, 256)
    except TooManySecrets:
        pass
    else:
        raise AssertionError("300 masks in the project's top must refuse the box")


def test_the_scans_name_matcher_says_what_the_whole_table_says():
    """The project scan compiles only the table's bare-name entries, once: the same answer for
    every name as the full table compiled for a home (which resolves real paths, per call)."""
    from omp_a2a_bridge.server.box.host import _name_matcher
    from omp_a2a_bridge.server.policy.protected import TABLE, Matcher, fold

    full = Matcher(TABLE, "/home/u")
    names = [loc.pattern.replace("*", "x").replace("?", "y") for loc in TABLE]
    names += [n for loc in TABLE for n in loc.unless]
    names += ["README.md", "main.py", ".env", ".env.example", "id_rsa.pub", "server.pem", "x.KEY"]
    for name in names:
        key = fold(name.rsplit("/", 1)[-1])
        assert _name_matcher().name(key) == full.name(key), name
        # A tail (``.kube/config``) needs the folder's name: the same answer for a path.
        path = fold("/home/u/proj/" + name.lstrip("~/*"))
        assert _name_matcher().file(path) == full.file(path), name


def test_a_file_that_runs_commands_later_is_persistence_by_its_folder_and_name():
    """``settings.json`` is persistence in ``.claude`` only; the hook managers' files and a
    workspace file by their names, anywhere in the tree (attack5)."""
    from omp_a2a_bridge.server.box.policy import is_nested_persistence

    for path in (
        f"{H}/proj/.claude/settings.json",
        f"{H}/proj/pkg/.cursor/mcp.json",
        f"{H}/proj/.gemini/settings.json",
        f"{H}/proj/.mcp.json",
        f"{H}/proj/.pre-commit-config.yaml",
        f"{H}/proj/web/lefthook.yml",
        f"{H}/proj/.config/lefthook.toml",
        f"{H}/proj/app.code-workspace",
        f"{H}/proj/.zed",
        f"{H}/proj/.devcontainer",
    ):
        assert is_nested_persistence(path), path
    for path in (
        f"{H}/proj/settings.json",
        f"{H}/proj/.claude/commands/review.md",
        f"{H}/proj/.vscode2/settings.json",
        f"{H}/proj/config/lefthook.yml.bak",
        f"{H}/proj/mcp.json",
    ):
        assert not is_nested_persistence(path), path


def test_files_that_run_commands_later_stay_read_only_or_are_swept():
    v = view(existing=frozenset({f"{H}/proj/.mcp.json", f"{H}/proj/.claude/settings.json"}))
    plan = build_plan(v, BoxConfig())
    assert {f"{H}/proj/.mcp.json", f"{H}/proj/.claude/settings.json"} <= set(plan.write_protected)
    assert f"{H}/proj/.claude" in plan.pinned  # cannot be renamed away with its settings
    missing = missing_persistence(v, project_of(v))
    assert f"{H}/proj/lefthook.yml" in missing and f"{H}/proj/.gemini/settings.json" in missing


def test_persistence_anywhere_in_the_project_stays_read_only_and_nested_git_dirs_too():
    """An outside review (round 2): a cwd of ``~/src`` made every repository below writable."""
    src = f"{H}/src"
    v = view(
        cwd=src,
        git_top=None,
        git_dirs=(f"{src}/app/.git", f"{src}/lib/.git"),
        nested=(f"{src}/app/web/.vscode", f"{src}/app/sub/.git"),
        hooks=(f"{src}/app/.husky", f"{src}/app/tools/hooks"),
        existing=frozenset(
            {f"{src}/app/.git/config", f"{src}/lib/.git/hooks", f"{src}/app/web/.vscode"}
            | {f"{src}/app/sub/.git", f"{src}/app/.husky"}
        ),
    )
    plan = build_plan(v, BoxConfig())
    assert set(plan.write) == {src, f"{src}/app/.git", f"{src}/lib/.git"}
    assert set(plan.write_protected) == {
        f"{src}/app/.git/config",
        f"{src}/lib/.git/hooks",
        f"{src}/app/web/.vscode",
        f"{src}/app/sub/.git",
        f"{src}/app/.husky",
    }
    # Every folder between the project and what it protects is its own mount point.
    assert set(plan.pinned) == {f"{src}/app", f"{src}/lib", f"{src}/app/web", f"{src}/app/sub"}
    # The configured hooks path that does not exist yet, and the nested repos' hooks: swept.
    missing = missing_persistence(v, project_of(v))
    assert f"{src}/app/tools/hooks" in missing and f"{src}/app/.git/hooks" in missing
    assert f"{src}/app/web/.vscode" not in missing


def test_pins_cover_masks_and_render_before_them():
    v = view(hidden=(HostEntry(f"{H}/proj/conf/prod/.env", False),))
    plan = build_plan(v, BoxConfig())
    assert set(plan.pinned) == {f"{H}/proj/conf", f"{H}/proj/conf/prod"}
    argv = render(plan, BwrapHost("/usr/bin/bwrap", "/e"), ["true"])
    pin = argv.index(f"{H}/proj/conf/prod") - 1
    mask = argv.index(f"{H}/proj/conf/prod/.env") - 1
    assert argv[pin] == "--bind" and pin < mask and argv[mask - 1] == "--ro-bind"


def test_a_program_folder_on_path_is_never_the_project_and_read_only_inside_one():
    on_path = (f"{H}/bin", f"{H}/go/bin")
    assert project_of(view(cwd=f"{H}/bin", git_top=None, on_path=on_path)) is None
    assert project_of(view(cwd=f"{H}/bin/sub", git_top=None, on_path=on_path)) is None
    v = view(cwd=f"{H}/go", git_top=None, on_path=on_path, existing=frozenset({f"{H}/go/bin"}))
    plan = build_plan(v, BoxConfig())
    assert plan.write == (f"{H}/go",) and f"{H}/go/bin" in plan.write_protected


def test_nothing_a_mask_hides_is_bound_again():
    """``.envrc`` is secret-looking and persistence: its read-only bind came after its mask
    and showed the real file (round 2 of the outside review)."""
    envrc, many = f"{H}/proj/.envrc", f"{H}/proj/many"
    v = view(
        hidden=(HostEntry(envrc, False), HostEntry(many, True)),
        nested=(envrc, f"{many}/x/.vscode"),
        git_dirs=(f"{H}/proj/.git", f"{many}/y/.git"),
        existing=frozenset({envrc, f"{many}/x/.vscode"}),
    )
    plan = build_plan(v, BoxConfig())
    assert envrc in plan.read_private and envrc not in plan.write_protected
    bound = [*plan.write, *plan.write_protected, *plan.pinned]
    assert not [p for p in bound if p == many or p.startswith(many + "/")]
    argv = render(plan, BwrapHost("/usr/bin/bwrap", "/e"), ["true"])
    assert [argv[i - 1] for i, a in enumerate(argv) if a == envrc] == ["/e"]


@pytest.mark.parametrize(
    ("git_dir", "writable"),
    [
        (f"{H}/proj/.git/worktrees/wt", True),  # a worktree's git dir in the main repository
        (H, False),  # `gitdir: ~` in a planted .git file: the whole home
        (f"{H}/bin", False),  # a program folder on PATH
        ("/", False),  # holds the home
        (f"{H}/src", False),  # holds the project
        ("/srv/repo/.git", False),  # outside every root
    ],
)
def test_a_git_dir_outside_the_project_is_writable_only_where_a_project_could_be(git_dir, writable):
    v = view(
        cwd=f"{H}/src/wt/sub",
        git_top=f"{H}/src/wt",
        git_file=f"{H}/src/wt/.git",
        git_dirs=(git_dir,),
        on_path=(f"{H}/bin",),
    )
    assert (git_dir in build_plan(v, BoxConfig()).write) is writable


def test_sweep_removes_deep_trees_and_follows_no_link(tmp_path):
    from omp_a2a_bridge.server.box.run import sweep

    proj, home = tmp_path / "proj", tmp_path / "home"
    (home / ".vscode").mkdir(parents=True)
    (home / ".vscode" / "keep.json").write_text("{}")
    deep = proj / "a" / ".vscode"
    d = deep
    for _ in range(300):
        d = d / "d"
    d.mkdir(parents=True)
    (proj / "a" / ".envrc").write_text("evil")
    (proj / "b").symlink_to(home)  # a folder swapped for a link to the home
    (proj / "c").mkdir()
    (proj / "c" / ".idea").symlink_to(home / ".vscode")  # a link as the last component
    missing = [str(p) for p in (deep, proj / "a" / ".envrc", proj / "b" / ".vscode")]
    missing += [str(proj / "c" / ".idea"), str(proj / "gone" / ".vscode")]
    out = sweep(missing)
    assert out == (
        str(deep),
        str(proj / "a" / ".envrc"),
        "!" + str(proj / "b" / ".vscode"),
        str(proj / "c" / ".idea"),
    )
    assert not deep.exists() and not (proj / "a" / ".envrc").exists()
    assert (home / ".vscode" / "keep.json").read_text() == "{}"
    assert not os.path.lexists(proj / "c" / ".idea")


def test_what_the_call_needs_in_a_hidden_top_is_reopened_alone():
    """A root at /srv/www/app in a hidden /srv: re-bound read-only on its own (then written
    as the project); one a mask below the top hides too (a secret folder there) stays hidden."""
    v = view(
        cwd="/srv/www/app",
        git_top=None,
        roots=(H, "/srv/www"),
        hidden=(HostEntry("/srv", True), HostEntry("/srv/www/.keys", True)),
        reopened=("/srv/www", "/srv/www/.keys/tool"),
    )
    plan = build_plan(v, BoxConfig())
    assert "/srv" in plan.read_private and plan.read_allow == ("/srv/www",)
    assert plan.write == ("/srv/www/app",)
    argv = render(plan, BwrapHost("/usr/bin/bwrap", "/e"), ["true"])
    joined = " ".join(argv)
    assert joined.index("--tmpfs /srv ") < joined.index("--ro-bind /srv/www /srv/www")
    assert joined.index("--ro-bind /srv/www /srv/www") < joined.index("--tmpfs /srv/www/.keys")


def test_outside_the_box_is_only_a_pid_namespace():
    argv = render_outside(HOST, "/home/u/proj", ["bash", "-c", "npm install"])
    assert argv[:4] == [HOST.bwrap, "--die-with-parent", "--new-session", "--unshare-pid"]
    assert argv[argv.index("--dev-bind") : argv.index("--dev-bind") + 3] == ["--dev-bind", "/", "/"]
    assert "--proc" in argv and argv[argv.index("--chdir") + 1] == "/home/u/proj"
    assert argv[-4:] == ["--", "bash", "-c", "npm install"]
    # Nothing else of the box: the network, the user's rights and every path stay as they are.
    for flag in ("--unshare-net", "--unshare-user", "--cap-drop", "--ro-bind", "--tmpfs"):
        assert flag not in argv


def test_the_homes_data_folders_are_no_project():
    home = "/home/u"
    text = (
        '# written by xdg-user-dirs-update\nXDG_DOCUMENTS_DIR="$HOME/Dokumente"\n'
        'XDG_MUSIC_DIR="$HOME/"\nXDG_PICTURES_DIR="/media/photos"\nXDG_VIDEOS_DIR="Videos2"\n'
        'XDG_DESKTOP_DIR="$HOME/../../etc"\n'
    )
    data = home_data_folders(home, text)
    assert "/home/u/Dokumente" in data and "/home/u/Documents" in data
    assert home not in data  # a disabled folder is "$HOME/": never the home itself
    assert "/media/photos" not in data and "/etc" not in data  # only the home's own
    assert not any(d.endswith("Videos2") for d in data)  # relative: not a path
    view = HostView(cwd="/home/u/Dokumente/letters", home=home, roots=(home,), home_data=data)
    assert project_of(view) is None
    repo = HostView(
        cwd="/home/u/Dokumente/code/app/src",
        home=home,
        roots=(home,),
        git_top="/home/u/Dokumente/code/app",
        home_data=data,
    )
    assert project_of(repo) == "/home/u/Dokumente/code/app"  # a repository there still is one
    plain = HostView(cwd="/home/u/scratch", home=home, roots=(home,), home_data=data)
    assert project_of(plain) == "/home/u/scratch"


def test_what_the_call_needs_in_a_hidden_var_folder_is_reopened():
    """A root under /var/tmp (hidden whole: a private, writable one in the box) is re-bound
    like a root in a hidden top-level folder; /var/lib is no data folder."""
    from omp_a2a_bridge.server.box.policy import data_folder

    assert data_folder("/srv") and data_folder("/var/tmp") and data_folder("/var/mail")
    assert not data_folder("/var/lib") and not data_folder("/var/tmp/x") and not data_folder("/")
    v = view(
        cwd="/var/tmp/w/app",
        git_top=None,
        roots=("/var/tmp/w",),
        hidden=(HostEntry("/var/tmp", True),),
        reopened=("/var/tmp/w",),
    )
    plan = build_plan(v, BoxConfig())
    assert "/var/tmp" in plan.read_private and plan.read_allow == ("/var/tmp/w",)
    assert plan.write == ("/var/tmp/w/app",)


def test_a_box_with_network_starts_scoped_away_from_abstract_sockets():
    """With network the box shares the bridge's network namespace (X11's and an abstract
    session bus's sockets): bwrap runs under the Landlock scope. Without, its own namespace
    has none of them, and no interpreter start is paid."""
    scoped = BwrapHost("/usr/bin/bwrap", "/e", scope=("/py", "-I", "-S", "/scope.py"))
    plan = build_plan(view(), BoxConfig())
    assert render(plan, scoped, ["true"])[0] == "/usr/bin/bwrap"
    on = render(dataclasses.replace(plan, network=True), scoped, ["true"])
    assert on[:5] == ["/py", "-I", "-S", "/scope.py", "/usr/bin/bwrap"]
    assert "--unshare-net" not in on


def test_a_root_named_by_a_link_in_a_hidden_data_folder_is_linked_again():
    """``/var/tmp/x/link -> /var/tmp/x/data`` as a root: /var/tmp is hidden whole and the
    real path re-opened; the human's path (the link) is made again in the box, after the
    mounts. A link the box shows anyway (in the home) is left alone."""
    v = view(
        cwd="/var/tmp/x/data/app",
        git_top=None,
        roots=(H, "/var/tmp/x/data"),
        hidden=(HostEntry("/var/tmp", True),),
        reopened=("/var/tmp/x/data",),
        root_links=(("/var/tmp/x/link", "/var/tmp/x/data"), (f"{H}/w", "/var/tmp/x/data")),
    )
    plan = build_plan(v, BoxConfig())
    assert plan.symlinks == (("/var/tmp/x/link", "/var/tmp/x/data"),)
    argv = render(plan, BwrapHost("/usr/bin/bwrap", "/e"), ["true"])
    joined = " ".join(argv)
    assert joined.index("--tmpfs /var/tmp ") < joined.index(
        "--symlink /var/tmp/x/data /var/tmp/x/link"
    )


def test_a_data_folder_is_no_project_even_as_a_repository_top():
    home = "/home/u"
    data = home_data_folders(home)
    docs = HostView(
        cwd="/home/u/Documents",
        home=home,
        roots=(home,),
        git_top="/home/u/Documents",
        home_data=data,
    )
    assert project_of(docs) is None  # a .git planted in ~/Documents
    fake = HostView(
        cwd="/home/u/Documents/letters",
        home=home,
        roots=(home,),
        git_top="/home/u/Documents/letters",
        home_data=data,
        git_real=False,
    )
    assert project_of(fake) is None  # an empty .git folder: git never made it
    assert "/home/u/Nextcloud" in data and "/home/u/Sync" in data  # synced everywhere


def _dests(argv: list[str]) -> list[tuple[str, str]]:
    """(flag, dest) of every mount after the root, in argv order."""
    arity = {"--ro-bind": 2, "--bind": 2, "--tmpfs": 1, "--dev": 1, "--proc": 1}
    out, i = [], argv.index("/") + 2
    while argv[i] in arity:
        n = arity[argv[i]]
        out.append((argv[i], argv[i + n]))
        i += n + 1
    return out


def test_render_puts_binds_before_unrelated_tmpfs_masks_and_keeps_nesting():
    plan = BoxPlan(
        cwd=f"{H}/proj",
        read_private=(f"{H}/.config", f"{H}/.cache", f"{H}/.netrc", "/run", "/etc/shadow"),
        write=(f"{H}/proj",),
        write_protected=(f"{H}/proj/.git/hooks",),
        tmpdir="/tmp",
        private_files=(f"{H}/.netrc", "/etc/shadow"),
        read_allow=(f"{H}/.cache/pip",),
    )
    mounts = _dests(render(plan, HOST, ["true"]))
    flags = [f for f, _ in mounts]
    assert flags[:2] == ["--dev", "--proc"]  # bubblewrap binds inside them: early is cheaper
    first_cheap = flags.index("--tmpfs")
    before = [d for f, d in mounts[:first_cheap]]
    # the two file masks and the project come before any tmpfs; ~/.cache only where pip needs it
    assert {f"{H}/.netrc", "/etc/shadow", f"{H}/proj"} <= set(before)
    where = {d: i for i, (_, d) in enumerate(mounts)}
    assert where[f"{H}/.cache"] == where[f"{H}/.cache/pip"] - 1
    assert where[f"{H}/proj"] < where[f"{H}/proj/.git/hooks"]
    assert where["/dev"] < where["/dev/shm"]
    assert set(flags[where[f"{H}/.cache/pip"] + 1 :]) <= {"--tmpfs", "--dev", "--proc", "--ro-bind"}


_MOUNT = st.tuples(
    st.sampled_from(["--tmpfs", "--bind", "--ro-bind", "--dev", "--proc"]),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map("/".join),
)


def _holds(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder + "/")


@given(st.lists(_MOUNT, max_size=14))
def test_schedule_keeps_every_nested_pair_in_order_and_puts_binds_first(raw):
    # a tag in the middle makes each mount unique; schedule reads only the flag and the dest
    mounts = [[flag, f"#{i}", "/" + dest] for i, (flag, dest) in enumerate(raw)]
    mounts.sort(key=lambda m: m[-1].count("/"))  # the contract: a holder before what it holds
    out = schedule(mounts)
    assert sorted(out) == sorted(mounts)
    at = {m[1]: i for i, m in enumerate(out)}
    for x, a in enumerate(mounts):
        for b in mounts[x + 1 :]:
            if _holds(a[-1], b[-1]):
                assert at[a[1]] < at[b[1]], (out, a, b)
    cheap = {"--tmpfs"}
    for i, m in enumerate(out):
        binds_after = [n for n in out[i + 1 :] if n[0] not in cheap]
        if m[0] in cheap and binds_after:  # it came early only because a bind inside needs it
            assert any(_holds(m[-1], n[-1]) for n in out[i + 1 :]), out
