"""Outside review (attack7) of the sweep's shortcut (``server/box/run.py`` ``sweep``): a
persistence path that ``os.path.lexists`` calls absent is skipped before the careful walk.

``lexists`` is an ``lstat`` that answers False on *any* error, not only "no such file": a
folder on the way without search permission (``EACCES``) makes an existing path look absent.
The call and the bridge are the same user, and the project is writable, so the call can take
the search permission off the folder that holds what it planted (``chmod 600 .`` in the
project) after planting it. The sweep then skips every persistence path in that folder: the
``.envrc``/``.vscode`` the call made stay, and the result says nothing (no "COULD NOT be
removed"). The human sees a folder they cannot enter, gives it its mode back (``chmod 755``),
and the planted ``.envrc``/``.vscode/tasks.json`` is live the next time they enter it / open it.

Before the shortcut, ``chmod 600`` (read, no search) made the walk's ``fstatat`` raise
``PermissionError`` out of the sweep: the call failed with "tool 'bash' failed:
PermissionError" and nothing after that path was swept (loud, still not removed); ``chmod
000`` was silent already (the walk's own fallback is ``lexists`` again). So: a hole of the
sweep in general, which the shortcut made silent in the ``600`` case too.

Fixed for the paths the sweep knows (``_absent``: only "no such file" skips; a path it cannot
look at is reported as not removed). Still open (xfail below): a persistence path only the
scan after the call would find, in a subfolder the call made unreadable.

The bridge runs as the desktop user (root reads through any mode, so nothing fails for it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, world_fixture


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    yield from world_fixture(True)


PLANT = "echo 'echo PWNED' > .envrc; mkdir -p .vscode; echo '{}' > .vscode/tasks.json; "


@pytest.mark.parametrize("mode", ["600", "000"])
def test_persistence_behind_a_folder_without_search_permission_is_swept_or_reported(
    world: World, mode: str
) -> None:
    envrc = os.path.join(world.project, ".envrc")
    vscode = os.path.join(world.project, ".vscode")
    try:
        _, text = world.bash(PLANT + f"chmod {mode} .")
        os.chmod(world.project, 0o755)  # noqa: S103 - what the human does when the folder will not open
        left = [p for p in (envrc, vscode) if os.path.lexists(p)]
        reported = "COULD NOT be removed" in text and all(p in text for p in left)
        assert not left or reported, f"planted persistence survived the sweep unreported: {left}"
    finally:
        os.chmod(world.project, 0o755)  # noqa: S103 - its mode before the call
        if os.path.lexists(envrc):
            os.unlink(envrc)
        shutil.rmtree(vscode, ignore_errors=True)


NESTED = (
    "mkdir -p lib/.vscode && echo '{}' > lib/.vscode/tasks.json && echo 'echo PWNED' > lib/.envrc; "
)


@pytest.mark.parametrize("mode", ["000", "300"])
def test_persistence_in_a_subfolder_made_unreadable_is_swept_or_reported(
    world: World, mode: str
) -> None:
    """The same move one folder down: ``lib/.envrc`` is found only by the project scan after
    the call (``made_by_call``), and ``_scan`` passes over a folder it cannot list
    (``except OSError: continue``), so the sweep never hears of it. (``600``, list but not
    search, is reported since the fix above.) The human's ``cd lib`` fails, they give it its
    mode back, and direnv/VS Code find what the agent planted."""
    lib = os.path.join(world.project, "lib")
    try:
        _, text = world.bash(NESTED + f"chmod {mode} lib")
        os.chmod(lib, 0o755)  # noqa: S103 - what the human does when the folder will not open
        left = [p for p in (f"{lib}/.envrc", f"{lib}/.vscode") if os.path.lexists(p)]
        assert not left or "COULD NOT be removed" in text, f"survived unreported: {left}"
    finally:
        if os.path.isdir(lib):
            os.chmod(lib, 0o755)  # noqa: S103 - its mode before the call
            shutil.rmtree(lib)


def test_guard_the_same_plant_without_the_chmod_is_swept(world: World) -> None:
    """Guard (holds): the plant alone is removed and said."""
    _, text = world.bash(PLANT + "true")
    assert not os.path.lexists(os.path.join(world.project, ".envrc"))
    assert not os.path.lexists(os.path.join(world.project, ".vscode"))
    assert "now removed" in text


def test_a_folder_already_unlistable_before_the_call_is_not_reported(world: World) -> None:
    """The human's own ``chmod 000`` drop folder is nothing the call did: no alarm."""
    drop = os.path.join(world.project, "drop")
    os.makedirs(drop)
    os.chmod(drop, 0o000)
    try:
        _, text = world.bash("echo ran")
        assert "ran" in text and "COULD NOT" not in text, text
    finally:
        os.chmod(drop, 0o755)  # noqa: S103 - so the world can be removed
