"""An outside review of the roots' index (``server/box/secrets.py``, ``host._outside``).

A real bridge process in the box world (``tests/support/boxworld.py``, roots = the home), real
HTTP, real bubblewrap. The human (this test) makes, moves and links secret-looking files
elsewhere in the home; the agent (a boxed ``bash`` call, run unasked) tries to read them. Each
test is one attack the review found or tried; a secret returned is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.box import secrets

from ..support.boxworld import World, world_fixture
from ..support.boxworld import put as _put


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    yield from world_fixture(False)


def _reads(world: World, *paths: str, cwd: str | None = None) -> str:
    words = " ".join(f"'{p}'" for p in paths)
    _, text = world.bash(f"cat {words} 2>&1; grep -rh FAKESECRET ~ 2>/dev/null | head -20", cwd)
    return text


def _chain(top: str, prefix: str, levels: int) -> str:
    """A folder ``levels`` below ``top`` (``top/prefix1/prefix2/...``)."""
    return os.path.join(top, *[f"{prefix}{i}" for i in range(1, levels + 1)])


def test_a_folder_moved_up_a_level_is_still_watched(world: World) -> None:
    """The human moves ``~/downloads/newapp`` to ``~/newapp``: the index looks the moved
    folder up again at its new path (its inode keeps its watch: the same descriptor), then
    forgets the old path and with it dropped that shared watch; ``~/newapp`` went deaf, and a
    ``.env`` made in it later was readable."""
    os.makedirs(os.path.join(world.home, "downloads", "newapp", "config"))
    world.bash("true")  # the index watches ~/downloads/newapp and its config folder
    os.rename(os.path.join(world.home, "downloads", "newapp"), os.path.join(world.home, "newapp"))
    world.bash("true")  # the move is seen
    made = [
        _put(os.path.join(world.home, "newapp", ".env"), "KEY=FAKESECRET-moved-up-1a1a"),
        _put(os.path.join(world.home, "newapp", "config", "id_rsa"), "FAKESECRET-moved-up-2b2b"),
    ]
    text = _reads(world, *made)
    assert world.leaks(text) == [], text


def test_a_call_in_a_folder_the_index_did_not_look_into_reads_nothing_beside_it(
    world: World,
) -> None:
    """A folder past the index's depth is hidden whole, unless it holds the call's cwd (the
    box must show the project): then nothing in it was masked, and the agent picks its cwd.
    The same holds for a folder past the budget (an agent can fill the budget)."""
    deep = _chain(world.home, "d", secrets.MAX_DEPTH + 1)  # not looked into
    work = os.path.join(deep, "work", "app")
    os.makedirs(work)
    made = [
        _put(os.path.join(deep, ".env"), "K=FAKESECRET-unlooked-top-3c3c"),
        _put(os.path.join(deep, "other", "credentials"), "FAKESECRET-unlooked-sib-4d4d"),
        _put(os.path.join(deep, "work", "id_ed25519"), "FAKESECRET-unlooked-up-5e5e"),
    ]
    world.bash("true")
    _, text = world.bash(
        "cat ../../.env ../../other/credentials ../id_ed25519 2>&1; ls ../..; "
        "grep -rh FAKESECRET ../.. 2>/dev/null | head; echo done-$((6*7))",
        cwd=work,
    )
    assert world.leaks(text) == [], text
    assert "done-42" in text, text
    assert world.leaks(_reads(world, *made)) == []


def test_a_folder_made_at_the_depth_bound_later_is_hidden(world: World) -> None:
    """A folder made below one at the last indexed level, after the index was built, was
    neither looked into nor listed as unlooked-at (so never hidden): its secrets were
    readable."""
    last = _chain(world.home, "e", secrets.MAX_DEPTH)
    os.makedirs(last)
    world.bash("true")  # the chain is indexed down to the last level
    made = _put(os.path.join(last, "late", ".env"), "K=FAKESECRET-past-depth-6f6f")
    assert world.leaks(_reads(world, made)) == []


def test_a_secret_looking_link_hides_what_it_points_to(world: World) -> None:
    """``~/svc/.env -> ~/vault/svc-settings``: the name the human gave the secret is the
    link's; the file it points to has a plain name. The index and the project scan judged
    only regular files (a link "is judged where it points"), so neither path was masked. In
    the project too (``.env.production`` a link the human made)."""
    vault = os.path.join(world.home, "vault")
    _put(os.path.join(vault, "svc-settings"), "K=FAKESECRET-linked-7a7a")
    _put(os.path.join(vault, "proj-settings"), "K=FAKESECRET-linked-proj-8b8b")
    os.makedirs(os.path.join(world.home, "svc"))
    os.symlink(os.path.join(vault, "svc-settings"), os.path.join(world.home, "svc", ".env"))
    os.symlink("../vault/proj-settings", os.path.join(world.project, ".env.production"))
    text = _reads(
        world,
        os.path.join(world.home, "svc", ".env"),
        os.path.join(world.project, ".env.production"),
        os.path.join(vault, "svc-settings"),
    )
    assert world.leaks(text) == [], text


def test_a_secret_deeper_in_the_project_than_its_scan_looks_is_private(world: World) -> None:
    """The project scan looks 6 levels deep, the index 16; the index's secrets inside the
    project were left to the scan, so a ``.env`` 7 levels down the project was readable
    (and the call could move it anywhere)."""
    deep = _chain(world.project, "p", 7)
    made = _put(os.path.join(deep, ".env"), "K=FAKESECRET-deep-in-project-9c9c")
    world.bash("true")
    _, text = world.bash(f"cat '{made}' 2>&1; mv '{made}' moved.txt 2>&1; cat moved.txt 2>&1")
    assert world.leaks(text) == [], text
    assert os.path.exists(made)


def test_a_link_to_a_folder_in_the_roots_reads_the_masked_real_path(world: World) -> None:
    """Held: the index does not follow links, but a link resolves to the real path in the
    box, and that is where the mask is."""
    target = os.path.join(world.home, "deep", "place")
    made = _put(os.path.join(target, ".env"), "K=FAKESECRET-via-link-0d0d")
    os.symlink(target, os.path.join(world.home, "shortcut"))
    text = _reads(world, os.path.join(world.home, "shortcut", ".env"), made)
    assert world.leaks(text) == [], text


def test_any_spelling_of_a_secret_name_and_odd_folder_names_are_private(world: World) -> None:
    """Held: names are folded (``.ENV``, ``ID_RSA``); a folder named with a newline or bytes
    that are not UTF-8 is masked like any other (and the box still starts)."""
    world.bash("true")
    made = [
        _put(os.path.join(world.home, "caps", ".ENV"), "K=FAKESECRET-caps-1e1e"),
        _put(os.path.join(world.home, "caps", "ID_RSA"), "FAKESECRET-caps-2f2f"),
        _put(os.path.join(world.home, "new\nline", ".env"), "K=FAKESECRET-newline-3a3a"),
    ]
    odd = os.path.join(os.fsencode(world.home), b"bad\xffname")
    os.makedirs(odd)
    with open(os.path.join(odd, b".env"), "w") as f:
        f.write("K=FAKESECRET-not-utf8-4b4b\n")
    _, text = world.bash(
        "cat ~/caps/.ENV ~/caps/ID_RSA ~/new*line/.env ~/bad*name/.env 2>&1; "
        "grep -rh FAKESECRET ~ 2>/dev/null | head; echo done-$((6*7))"
    )
    assert world.leaks(text) == [] and "done-42" in text, text
    assert world.leaks(_reads(world, *made)) == []


def test_a_folder_replaced_by_a_new_one_of_the_same_name_is_watched_anew(world: World) -> None:
    """``mv ~/app ~/app.old && git clone … ~/app``: the new ``~/app`` holds folders with the
    old names, so the index saw nothing gone and nothing new below it and kept the old
    folders' watches, which follow the old inodes to ``~/app.old``: the new ``~/app/cfg``
    went deaf, and a ``.env`` made in it later was readable."""
    os.makedirs(os.path.join(world.home, "app", "cfg", "sub"))
    world.bash("true")
    os.rename(os.path.join(world.home, "app"), os.path.join(world.home, "app.old"))
    os.makedirs(os.path.join(world.home, "app", "cfg", "sub"))
    world.bash("true")  # the swap is seen
    made = [
        _put(os.path.join(world.home, "app", "cfg", ".env"), "K=FAKESECRET-swapped-5c5c"),
        _put(os.path.join(world.home, "app", "cfg", "sub", "id_rsa"), "FAKESECRET-swapped-6d6d"),
    ]
    assert world.leaks(_reads(world, *made)) == []


def _mount_tmpfs(path: str) -> bool:
    """A filesystem mounted on ``path`` the way a vault or a network drive appears in a home
    (Cryptomator, VeraCrypt, sshfs, rclone): root only, which these tests are when they can."""
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "vault", path], check=False).returncode == 0


def test_a_filesystem_mounted_in_the_roots_is_looked_into(world: World) -> None:
    """A vault mounted on ``~/Vault`` after the index was built: its watch is on the folder
    under the mount, so nothing in the vault made an event or was ever looked into."""
    vault = os.path.join(world.home, "Vault")
    os.makedirs(vault)
    world.bash("true")  # ~/Vault is indexed (empty, watched)
    if not _mount_tmpfs(vault):
        if os.environ.get("CI"):
            pytest.fail("mounting a tmpfs needs root here")
        pytest.skip("mounting a tmpfs needs root here")
    try:
        world.bash("true")
        made = [
            _put(os.path.join(vault, "prod", ".env"), "K=FAKESECRET-vault-7e7e"),
            _put(os.path.join(vault, "id_ed25519"), "FAKESECRET-vault-8f8f"),
        ]
        assert world.leaks(_reads(world, *made)) == []
    finally:
        subprocess.run(["umount", "-l", vault], check=False)


@pytest.fixture(scope="module")
def user_world() -> Iterator[World]:
    """The bridge as a desktop user: file modes bind it (root reads every folder)."""
    yield from world_fixture(True)


def test_a_folder_the_bridge_cannot_list_is_hidden_until_it_can(user_world: World) -> None:
    """A folder the bridge may enter but not list (``--x``: another user's drop folder) was
    left out of the index and not hidden: the box read ``~/drop/.env`` by its name. One it
    could not even enter, opened later (``chmod 700``), was never looked into."""
    world = user_world
    drop, later = os.path.join(world.home, "drop"), os.path.join(world.home, "later-open")
    made = [
        _put(os.path.join(drop, ".env"), "K=FAKESECRET-drop-9a9a"),
        _put(os.path.join(later, "svc", ".env"), "K=FAKESECRET-later-open-0b0b"),
    ]
    os.chmod(drop, 0o100)
    os.chmod(later, 0o000)
    try:
        world.bash("true")
        assert world.leaks(_reads(world, made[0])) == []
        os.chmod(later, 0o700)
        assert world.leaks(_reads(world, *made)) == []
    finally:
        os.chmod(drop, 0o700)
        os.chmod(later, 0o700)


def test_links_the_agent_makes_to_a_secret_elsewhere_read_nothing(world: World) -> None:
    """Held: a hard link from the project or the box's /tmp crosses a mount (refused), and a
    symlink resolves to the masked real path."""
    secret = os.path.join(world.home, "otherproj", ".env")  # planted by the box world
    _, text = world.bash(
        f"ln '{secret}' stolen 2>&1; ln '{secret}' /tmp/stolen 2>&1; ln -s '{secret}' sym; "
        "cat stolen /tmp/stolen sym 2>&1; cp sym copied 2>&1; cat copied; rm -f stolen sym copied"
    )
    assert world.leaks(text) == [], text


@pytest.fixture(scope="module")
def linked_root_world() -> Iterator[World]:
    """A second root outside the home, configured by a symlink's path."""
    base = tempfile.mkdtemp(prefix="a2a-root-", dir="/var/tmp")
    real = os.path.join(base, "data")
    _put(os.path.join(real, "svc", "api", ".env"), "K=FAKESECRET-other-root-1c1c")
    os.symlink(real, os.path.join(base, "link"))
    try:
        yield from world_fixture(False, {"roots": ["~", os.path.join(base, "link")]})
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_root_outside_the_home_named_by_a_link_is_indexed(linked_root_world: World) -> None:
    """Held: a root is indexed by its real path, and the box resolves the link to it."""
    world = linked_root_world
    with open(world.config) as f:
        link = json.load(f)["roots"][1]
    made = os.path.join(os.path.realpath(link), "svc", "api", ".env")
    text = _reads(world, os.path.join(link, "svc", "api", ".env"), made)
    assert world.leaks(text) == [] and "No such file" not in text, text
    _, listing = world.bash(f"ls -a '{link}/svc/api'")
    assert ".env" in listing, listing  # there, and empty in the box


def _serve_fifo(path: str, text: str) -> threading.Thread:
    """A named pipe that hands out a secret to whoever opens it (how a password manager can
    "mount" a ``.env``): the writer waits for a reader."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path, 0o600)

    def serve() -> None:
        with contextlib.suppress(OSError), open(path, "w") as f:
            f.write(text + "\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _release(path: str, thread: threading.Thread) -> None:
    """Open the pipe ourselves (nonblocking) so a writer nobody read from ends."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        thread.join(60)
        os.close(fd)
    thread.join(60)
    os.unlink(path)


def test_a_secret_looking_named_pipe_is_masked(world: World) -> None:
    """A ``.env`` that is a named pipe (not a regular file) was judged no file at all, by the
    index and by the project scan: the box opened it and got the secret."""
    pipes = [os.path.join(world.home, "piped", ".env"), os.path.join(world.project, ".env.local")]
    threads = [_serve_fifo(p, f"K=FAKESECRET-fifo-{i}-2d2d") for i, p in enumerate(pipes)]
    try:
        world.bash("true")
        _, text = world.bash(
            "for p in " + " ".join(f"'{p}'" for p in pipes) + '; do timeout 5 cat "$p"; done'
        )
        assert world.leaks(text) == [], text
    finally:
        for path, thread in zip(pipes, threads, strict=True):
            _release(path, thread)


def test_the_agent_cannot_move_a_secret_into_a_folder_the_index_skips(world: World) -> None:
    """Held: a call in another project (the agent may pick any cwd in the roots) cannot carry
    the human's ``.env`` into ``node_modules`` or a ``cache`` folder, where the index does not
    look: a masked file and the folders holding it are mount points."""
    other = os.path.join(world.home, "otherproj")  # its .env is planted by the box world
    _put(os.path.join(other, "cfg", "credentials"), "FAKESECRET-cfg-3e3e")
    world.bash(
        "mkdir -p node_modules/x my-cache; mv .env node_modules/x/ 2>&1; "
        "mv cfg node_modules/x/ 2>&1; mv cfg/credentials my-cache/ 2>&1; "
        "cp .env my-cache/copy 2>&1; ln cfg/credentials my-cache/link 2>&1; true",
        cwd=other,
    )
    _, text = world.bash(
        "cat ~/otherproj/node_modules/x/.env ~/otherproj/node_modules/x/cfg/credentials "
        "~/otherproj/my-cache/* 2>&1; grep -rh FAKESECRET ~/otherproj 2>/dev/null"
    )
    assert world.leaks(text) == [], text
    assert os.path.exists(os.path.join(other, ".env"))
    assert os.path.exists(os.path.join(other, "cfg", "credentials"))


def test_a_project_named_like_a_cache_or_a_toolchain_is_indexed(world: World) -> None:
    """The index skipped every folder whose name held "cache" and every ``go``, ``snap``,
    ``AppData`` anywhere: ``~/work/cache-service/.env`` and ``~/work/api/go/.env`` (a
    project's Go tree) were readable. Toolchain names are skipped straight in a root or the
    home now (``~/go``), cache names only as caches name themselves (``.mypy_cache``,
    ``cache``, ``Caches``)."""
    world.bash("true")
    made = [
        _put(os.path.join(world.home, "work", "cache-service", ".env"), "K=FAKESECRET-c-4f4f"),
        _put(os.path.join(world.home, "work", "api", "go", ".env"), "K=FAKESECRET-go-5a5a"),
        _put(os.path.join(world.home, "work", "memcached-ops", "id_rsa"), "FAKESECRET-m-6b6b"),
    ]
    assert world.leaks(_reads(world, *made)) == []
