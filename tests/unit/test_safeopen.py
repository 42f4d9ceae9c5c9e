"""server/policy/safeopen.py: the one-syscall check that a path has no symlink, which lets
``PathPolicy.resolve`` skip ``realpath`` (docs/design/performance.md)."""

from __future__ import annotations

import os

from omp_a2a_bridge.server.policy import safeopen
from omp_a2a_bridge.server.policy.paths import PathPolicy
from omp_a2a_bridge.server.policy.safeopen import symlink_free


def _tree(tmp_path) -> dict[str, str]:
    base = os.path.realpath(tmp_path)
    os.makedirs(f"{base}/sub")
    with open(f"{base}/sub/f", "w") as f:
        f.write("x")
    os.symlink(f"{base}/sub", f"{base}/dirlink")
    os.symlink(f"{base}/sub/f", f"{base}/sub/filelink")
    os.symlink(f"{base}/nowhere", f"{base}/dangling")
    os.mkfifo(f"{base}/fifo")
    return {"base": base, "file": f"{base}/sub/f", "dir": f"{base}/sub", "fifo": f"{base}/fifo"}


def test_a_path_without_links_is_told_in_one_check_and_only_such_a_path(tmp_path):
    t = _tree(tmp_path)
    base = t["base"]
    works = safeopen.HAS_OPENAT2  # elsewhere realpath answers every path
    for plain in (t["file"], t["dir"], t["fifo"]):  # a FIFO is not opened, only named
        assert symlink_free(plain) is works
        assert os.path.realpath(plain) == plain
    for other in (
        f"{base}/dirlink/f",  # a link on the way
        f"{base}/sub/filelink",  # the file itself a link
        f"{base}/dangling",
        f"{base}/missing",  # realpath still answers for a path that does not exist
        f"{base}/sub/",  # not in normal form: realpath normalises
        f"{base}//sub/f",
        f"{base}/sub/../sub/f",
        f"{base}/sub/./f",
        "sub/f",  # relative
        f"{base}/sub/f\0/etc/passwd",  # a C string would stop at the NUL
        f"{base}/sub/\udcff",  # a name that is not UTF-8
    ):
        assert symlink_free(other) is False, other


def test_resolve_answers_what_realpath_answers(tmp_path):
    t = _tree(tmp_path)
    base = t["base"]
    policy = PathPolicy([base], scan_identities=False)
    for arg in (
        "sub/f",
        t["file"],
        "dirlink/f",
        "sub/filelink",
        "dangling",
        "missing/x",
        "sub/../dirlink/./f",
        "",
    ):
        expected = os.path.realpath(os.path.join(base, arg)) if arg else base
        assert policy.resolve(arg) == expected, arg
    assert policy.resolve("dirlink/f") == t["file"]
