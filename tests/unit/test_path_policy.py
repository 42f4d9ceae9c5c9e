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


def test_a_git_config_holding_a_credential_is_private_once_read(tmp_path):
    """The loop never reads it: the first judgement names it unread, the pipeline reads it in a
    worker (inspect_git_configs), and the next judgement is by what it holds, per identity."""
    from omp_a2a_bridge.server.policy.paths import GIT_CONFIG_CATEGORY, CallPaths

    root = tmp_path / "root"
    config = root / "proj" / ".git" / "config"
    config.parent.mkdir(parents=True)
    config.write_text('[remote "origin"]\n\turl = https://github.com/a/b.git\n')
    p = PathPolicy([str(root)], home=str(tmp_path / "home"), scan_identities=False)
    first = CallPaths(p)
    assert first.escalation(str(config)) is None
    assert first.unread_git_configs == [str(config)]
    p.inspect_git_configs(first.unread_git_configs)
    again = CallPaths(p)
    assert again.escalation(str(config)) is None and again.unread_git_configs == []
    config.write_text('[remote "origin"]\n\turl = https://x:FAKESECRET@github.com/a/b.git\n')
    changed = CallPaths(p)
    assert changed.escalation(str(config)) is None  # a new identity: read again first
    p.inspect_git_configs(changed.unread_git_configs)
    esc = CallPaths(p).escalation(str(config))
    assert esc is not None and esc.always_asks and esc.category == GIT_CONFIG_CATEGORY
    assert "git config holding a credential" in esc.text
    plain = root / "proj" / "config"  # not git's: never read
    plain.write_text("token = x\n")
    other = CallPaths(p)
    assert other.escalation(str(plain)) is None and other.unread_git_configs == []


def test_a_walk_withholds_the_content_of_a_git_config_holding_a_credential(tmp_path):
    """grep's matches (without a box to show a redacted copy) leave such a file out."""
    from omp_a2a_bridge.server.policy.walk import EntryGate

    root = tmp_path / "root"
    leaky = root / "a" / ".git" / "config"
    plain = root / "b" / ".git" / "config"
    code = root / "a" / "settings.py"
    for path, text in (
        (leaky, "[github]\n\ttoken = FAKESECRET\n"),
        (plain, "[core]\n\tbare = false\n"),
        (code, "token = FAKESECRET\n"),  # no git config: judged by its name alone
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    p = PathPolicy([str(root)], home=str(tmp_path / "home"), scan_identities=False)
    gate = EntryGate.for_base(p, str(root))
    assert gate.withholds(str(leaky)) and not gate.refuses(str(leaky))
    assert not gate.withholds(str(plain)) and not gate.withholds(str(code))
