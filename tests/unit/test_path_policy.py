"""PathPolicy as a pure unit: containment is by real path and whole components."""

from __future__ import annotations

import os

from omp_a2a_bridge.server.policy.paths import PathPolicy, is_within


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
    p = PathPolicy(
        [str(root)], sensitive=[str(secret)], own_files=[str(own)], scan_identities=False
    )

    def why(path: str) -> str | None:
        esc = p.escalation(path)
        return None if esc is None else esc.text

    assert why("sub/file.txt") is None
    assert why(str(root)) is None
    assert why("") is None
    assert why(str(tmp_path / "rootless")).endswith("outside the configured roots")
    assert why(str(root) + "x/y").endswith("outside the configured roots")
    assert "protected location" in why(str(secret / "notes"))
    assert "protected location" in why(str(secret))
    assert "own files" in why(str(own))
    assert "own files" in why(str(own) + ".1")
    os.symlink(secret, root / "keys")
    assert "protected location" in why("keys/notes")  # the real path decides
    assert why("sub/../../root/sub") is None
    assert why("../outside").endswith("outside the configured roots")
