"""PathPolicy as a pure unit: containment is by real path and whole components."""

from __future__ import annotations

import os

from server.paths import PathPolicy, is_within


def test_is_within_whole_components():
    assert is_within("/a/b", "/a/b")
    assert is_within("/a/b/c", "/a/b")
    assert not is_within("/a/bc", "/a/b")
    assert is_within("/x", "/")


def test_policy_roots_sensitive_own_files(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    secret = tmp_path / "home" / ".ssh"
    secret.mkdir(parents=True)
    own = tmp_path / "cfg" / "config.json"
    p = PathPolicy([str(root)], sensitive=[str(secret)], own_files=[str(own)])
    assert p.escalation("sub/file.txt") is None
    assert p.escalation(str(root)) is None
    assert p.escalation("") is None
    assert p.escalation(str(tmp_path / "rootless")).endswith("outside the configured roots")
    assert p.escalation(str(root) + "x/y").endswith("outside the configured roots")
    assert "sensitive location" in p.escalation(str(secret / "id_rsa"))
    assert "sensitive location" in p.escalation(str(secret))
    assert "own files" in p.escalation(str(own))
    assert "own files" in p.escalation(str(own) + ".1")
    os.symlink(secret, root / "keys")
    assert "sensitive location" in p.escalation("keys/id_rsa")  # the real path decides
    assert p.escalation("sub/../../root/sub") is None
    assert p.escalation("../outside").endswith("outside the configured roots")
