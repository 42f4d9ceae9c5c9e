"""Outside review of "outside the roots the box shows the system, not data" (a top-level folder
no OS makes is hidden whole unless it holds what the call needs), over a real bridge process.

A folder the call needs inside such a top (a root on a data disk, ``/srv/www/app``) used to
keep the *whole* top visible: every sibling of the root on that disk (``/srv/backup``) was
readable from the box. Only the path to what is needed may show.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, require_bwrap, serve, stop, top_level_folder
from ..support.boxworld import put as _put


@pytest.fixture(scope="module")
def disk_world() -> Iterator[tuple[World, str]]:
    """The box world with a second root on a top-level data folder (as ``/srv`` or a disk at
    ``/data`` is): made as root, removed after."""
    require_bwrap()
    with top_level_folder("a2a-data-") as top:
        world = make_world()
        try:
            projects = os.path.join(top, "projects")
            os.makedirs(os.path.join(projects, "app"))
            with open(world.config, encoding="utf-8") as f:
                config = json.load(f)
            config["roots"] = [world.home, projects]
            with open(world.config, "w", encoding="utf-8") as f:
                json.dump(config, f)
            serve(world, False)
            yield world, top
        finally:
            stop(world)


def test_a_root_on_a_data_folder_does_not_show_the_rest_of_that_folder(
    disk_world: tuple[World, str],
) -> None:
    """The root ``/data/projects`` is needed; ``/data/backup`` beside it is not a root and
    holds no secret-looking name (the index never looks there): it stays hidden. The call
    still reads and writes its project on that disk."""
    world, top = disk_world
    _put(os.path.join(top, "backup", "home", "notes.txt"), "FAKESECRET-disk-sibling-5e5e")
    _put(os.path.join(top, "loose.txt"), "FAKESECRET-disk-loose-6f6f")
    app = os.path.join(top, "projects", "app")
    _, text = world.bash(
        f"cat {top}/backup/home/notes.txt {top}/loose.txt 2>&1; grep -r FAKESECRET {top} 2>&1; "
        "echo made > made.txt && cat made.txt && git --version >/dev/null && echo still-works",
        cwd=app,
    )
    assert world.leaks(text) == [] and "still-works" in text and "made" in text, text
    assert os.path.exists(os.path.join(app, "made.txt"))


def test_a_call_in_the_home_does_not_see_the_data_folder_either(
    disk_world: tuple[World, str],
) -> None:
    """A call in the home's project needs nothing on the disk but its other root is there:
    the root stays readable (it is shared), what lies beside it does not."""
    world, top = disk_world
    _put(os.path.join(top, "backup2", "dump.sql"), "FAKESECRET-disk-dump-7a7a")
    _put(os.path.join(top, "projects", "app", "README"), "shared readme")
    _, text = world.bash(f"cat {top}/backup2/dump.sql {top}/projects/app/README 2>&1")
    assert world.leaks(text) == [] and "shared readme" in text, text


def test_a_cwd_chosen_in_a_data_folder_does_not_open_it_unasked(
    disk_world: tuple[World, str],
) -> None:
    """The agent names a ``cwd`` in the hidden folder, outside every root, to make it "what
    the call needs": the path policy asks a human for that (none here: denied), so nothing
    there is read."""
    world, top = disk_world
    _put(os.path.join(top, "backup3", "notes.txt"), "FAKESECRET-disk-cwd-8b8b")
    c = world.client()
    try:
        r = c.call("bash", {"command": "cat notes.txt", "cwd": os.path.join(top, "backup3")})
    finally:
        c.close()
    assert r.status == 200, r
    assert r.result["isError"] and world.leaks(r.text) == [], r.text


def test_a_git_file_naming_a_repository_in_a_data_folder_opens_nothing_there(
    disk_world: tuple[World, str],
) -> None:
    """A git dir is "what the call needs": one call writes ``sub/.git`` naming a repository
    in the hidden folder (a backup of one), the next runs in ``sub`` and reads that
    repository's history through git."""
    import subprocess

    world, top = disk_world
    repo = os.path.join(top, "backup4", "repo")
    _put(os.path.join(repo, "notes.txt"), "FAKESECRET-disk-gitdir-9c9c")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", repo]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    project = os.path.join(world.home, "gitfile")
    os.makedirs(os.path.join(project, "sub"), exist_ok=True)
    world.bash(f"printf 'gitdir: {repo}/.git\\n' > sub/.git; cat sub/.git", cwd=project)
    sub = os.path.join(project, "sub")
    _, text = world.bash(
        f"git -c safe.directory='*' log -p 2>&1 | head -40; cat {repo}/notes.txt 2>&1; "
        f"grep -r FAKESECRET {repo}/.git 2>&1 | head",
        cwd=sub,
    )
    assert world.leaks(text) == [], text


@pytest.fixture(scope="module")
def path_world() -> Iterator[tuple[World, str]]:
    """The box world whose bridge has a ``PATH`` folder that does not exist yet, inside a
    folder the agent may write (``~/tools/bin``: ``export PATH=$PATH:~/tools/bin`` in a
    profile, made later), and a top-level data folder."""
    require_bwrap()
    with top_level_folder("a2a-data-") as top:
        world = make_world()
        before = os.environ["PATH"]
        try:
            os.makedirs(os.path.join(world.home, "tools"))
            os.environ["PATH"] = f"{before}{os.pathsep}{os.path.join(world.home, 'tools', 'bin')}"
            serve(world, False)
            os.environ["PATH"] = before
            yield world, top
        finally:
            os.environ["PATH"] = before
            stop(world)


def test_a_path_folder_made_in_the_project_is_swept_and_opens_nothing(
    path_world: tuple[World, str],
) -> None:
    """The agent makes the missing ``PATH`` folder in its project: a program there runs
    outside the box the next time the human types its name (persistence), and a link there is
    "where a program on PATH leads" for the next call (a hidden data folder re-opened)."""
    world, top = path_world
    _put(os.path.join(top, "backup5", "notes.txt"), "FAKESECRET-disk-pathlink-adad")
    tools = os.path.join(world.home, "tools")
    world.bash(
        f"mkdir -p bin && printf '#!/bin/sh\\necho owned\\n' > bin/git && chmod +x bin/git && "
        f"ln -s {top}/backup5/notes.txt bin/notes",
        cwd=tools,
    )
    assert not os.path.lexists(os.path.join(tools, "bin", "git"))
    _, text = world.bash(f"cat {top}/backup5/notes.txt 2>&1", cwd=tools)
    assert world.leaks(text) == [], text


def test_a_data_file_at_the_top_level_is_private(disk_world: tuple[World, str]) -> None:
    """A file straight in ``/`` (a dump a script left there: ``/backup.sql``) is data no OS
    makes, like a top-level folder: hidden (an empty file in its place)."""
    world, top = disk_world
    dump = f"{top}.sql"  # /a2a-data-xxxx.sql
    _put(dump, "FAKESECRET-top-file-bebe")
    os.chmod(dump, 0o644)
    try:
        _, text = world.bash(f"cat {dump} 2>&1; ls / >/dev/null && echo still-works")
    finally:
        os.unlink(dump)
    assert world.leaks(text) == [] and "still-works" in text, text


def test_a_repository_in_a_root_on_a_data_folder_keeps_its_hooks_read_only(
    disk_world: tuple[World, str],
) -> None:
    """A project re-opened inside a hidden data folder (``/data/projects/repo``) counted as
    "under a mask" (``/data``), so its persistence was never bound read-only: a call wrote
    ``.git/hooks/pre-commit`` and ``.git/config``, which run at the human's next commit."""
    import subprocess

    world, top = disk_world
    repo = os.path.join(top, "projects", "repo")
    subprocess.run(["git", "init", "-q", repo], check=True)
    hook = os.path.join(repo, ".git", "hooks", "pre-commit")
    with open(os.path.join(repo, ".git", "config"), encoding="utf-8") as f:
        config = f.read()
    _, text = world.bash(
        "echo evil > .git/hooks/pre-commit; git config core.fsmonitor evil; "
        "echo made > made.txt && echo still-works",
        cwd=repo,
    )
    assert "still-works" in text and not os.path.exists(hook), text
    with open(os.path.join(repo, ".git", "config"), encoding="utf-8") as f:
        assert f.read() == config
