"""Outside review (attack7) of the box's cheaper planning (``server/box/host.py``): the kept
folder listings (``_listing``) and the fast ``realpath`` (``_realpath``).

These are the planning functions themselves, called on folders made here: the two holes need
a machine shape a test cannot make over the real bridge without replacing ``/var`` (a
symlinked ``/var``) or the human's ``PATH``/``user-dirs.dirs`` (a ``//`` in a path).

1. ``_listing`` takes the folder's key with ``os.stat(..., follow_symlinks=False)``: a folder
   that is a *symlink* has no key, so no listing. ``_foreign_tops`` lists ``/`` and ``/var``
   with it; the old code was ``os.scandir(root)``, which follows a link. On a machine whose
   ``/var`` is a link (``/var -> /opt/var``, ``/var -> /usr/var``: a ``/var`` moved to
   another disk or a read-only-root layout), the box hid ``/var/mail``, ``/var/backups``,
   ``/var/www``... and now hides none of them: the box reads the mail spool and the backups.
2. ``_realpath``'s second shortcut (the parent is link-free and nothing is at the name)
   returns the path as given. ``os.path.split`` drops the slashes *between* the parent and
   the name, and ``symlink_free`` checks only the parent, so ``/a/b//c`` comes back as is
   while ``os.path.realpath`` says ``/a/b/c``: the docstring's "realpath's answer too" is not
   so. It reaches the plan through the absent ``PATH`` folders (``later``) and the absent
   home data folders; ``within`` tolerates the ``//`` where it lies (just before the last
   name), so no box was found to change with it.

Both fixed: ``_foreign_tops`` lists the real path of its root; ``_realpath`` takes the
shortcut only when the path is its parent and name joined.
"""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.box.host import _foreign_tops, _realpath


def test_a_symlinked_var_still_hides_its_data_folders(tmp_path) -> None:
    real = tmp_path / "opt-var"
    for name in ("lib", "cache", "backups", "mail"):
        (real / name).mkdir(parents=True)
    var = tmp_path / "var"
    var.symlink_to(real)
    masks, _ = _foreign_tops([], [], str(var), frozenset({"lib", "cache"}))
    hidden = sorted(os.path.basename(m.path) for m in masks)
    assert hidden == ["backups", "mail"], f"a symlinked /var hid {hidden}"


def test_guard_a_real_var_hides_its_data_folders(tmp_path) -> None:
    """Guard (holds): the same folder, not a link, hides what it should."""
    real = tmp_path / "var"
    for name in ("lib", "cache", "backups", "mail"):
        (real / name).mkdir(parents=True)
    masks, _ = _foreign_tops([], [], str(real), frozenset({"lib", "cache"}))
    assert sorted(os.path.basename(m.path) for m in masks) == ["backups", "mail"]


def test_fast_realpath_is_realpath_for_a_double_slash_before_an_absent_name(tmp_path) -> None:
    (tmp_path / "b").mkdir()
    path = f"{tmp_path}/b//absent"
    assert _realpath(path) == os.path.realpath(path)


@pytest.mark.parametrize(
    "tail",
    [
        "b/absent",
        "b/absent/",
        "b/./absent",
        "b/../b/absent",
        "b/.",
        "b/..",
        "link/absent",
        "link",
        "dangling",
        "loop",
        "b/\udcff",
        "b/" + "x" * 300,
    ],
)
def test_guard_fast_realpath_agrees_with_realpath(tmp_path, tail: str) -> None:
    """Guard (holds): links, ``.``/``..``, trailing slashes, dangling and looping links,
    non-UTF-8 and over-long names give realpath's answer."""
    (tmp_path / "b").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "b")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    path = f"{tmp_path}/{tail}"
    assert _realpath(path) == os.path.realpath(path)
