"""server/machines/store.py: minting, revoking and reading machine secrets (config + keyring).

The keyring is the OS edge: an in-memory stand-in (KeyringStore with a dict) and a locked one.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from omp_a2a_bridge.server.infra.config import load_config
from omp_a2a_bridge.server.infra.tokens import KeyringStore, KeyringUnavailable
from omp_a2a_bridge.server.machines.identity import MachineError, MachineNotFound, digest
from omp_a2a_bridge.server.machines.store import add_machine, remove_machine, token_for
from omp_a2a_bridge.server.vocab import TokenSource

MAIN = "main-token-" + "m" * 40


class DictKeyring(KeyringStore):
    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[str, str] = {}

    def get(self, user: str = "token") -> str | None:
        return self.entries.get(user)

    def set(self, token: str, user: str = "token") -> None:
        self.entries[user] = token

    def delete(self, user: str) -> bool:
        return self.entries.pop(user, None) is not None


class LockedKeyring(KeyringStore):
    def get(self, user: str = "token") -> str | None:
        raise KeyringUnavailable("locked")

    def set(self, token: str, user: str = "token") -> None:
        raise KeyringUnavailable("locked")

    def delete(self, user: str) -> bool:
        raise KeyringUnavailable("locked")


KEPT = {"rules": {"allow": ["bash(ls)"]}, "audit": {"keep": 2}}  # other settings, untouched


@pytest.fixture
def config(tmp_path, monkeypatch):
    path = tmp_path / "cfg" / "config.json"
    path.parent.mkdir(mode=0o700)
    path.write_text(json.dumps({"port": 4000, **KEPT}))
    path.chmod(0o600)
    monkeypatch.setenv("A2A_BRIDGE_TOKEN", MAIN)
    return str(path)


def test_add_keeps_a_digest_in_the_config_and_the_secret_in_the_keyring(config):
    kr = DictKeyring()
    minted = add_machine(config, "laptop", kr, clock=lambda: 100.0)
    assert minted.source is TokenSource.KEYRING and minted.warning is None
    assert kr.entries == {"machine:laptop": minted.token}
    with open(config) as f:
        raw = json.load(f)
    assert raw["machines"] == {"laptop": {"created": 100.0, "sha256": digest(minted.token).hex()}}
    assert {k: raw[k] for k in KEPT} == KEPT  # the rest is kept
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
    assert token_for("laptop", load_config(config), kr) == minted.token


def test_a_locked_keyring_is_said_and_the_config_keeps_the_secret(config):
    minted = add_machine(config, "laptop", LockedKeyring())
    assert minted.source is TokenSource.FILE
    assert minted.warning and "keyring unavailable (locked)" in minted.warning
    assert load_config(config).machines[0].token == minted.token
    assert token_for("laptop", load_config(config), LockedKeyring()) == minted.token
    assert remove_machine(config, "laptop", LockedKeyring()) is None  # gone with the record
    assert load_config(config).machines == ()


def test_token_store_file_never_asks_the_keyring(config):
    with open(config) as f:
        raw = json.load(f)
    raw["token_store"] = "file"
    with open(config, "w") as f:
        json.dump(raw, f)
    minted = add_machine(config, "laptop", LockedKeyring())
    assert minted.source is TokenSource.FILE and minted.warning is None


def test_rm_drops_the_record_then_the_keyring_entry(config):
    kr = DictKeyring()
    add_machine(config, "laptop", kr)
    add_machine(config, "desk", kr)
    assert remove_machine(config, "laptop", kr) is None
    assert [m.name for m in load_config(config).machines] == ["desk"]
    assert list(kr.entries) == ["machine:desk"]
    with pytest.raises(MachineNotFound):
        remove_machine(config, "laptop", kr)
    with pytest.raises(MachineNotFound):
        token_for("laptop", load_config(config), kr)


def test_rm_with_a_locked_keyring_still_revokes(config):
    kr = DictKeyring()
    add_machine(config, "laptop", kr)
    warning = remove_machine(config, "laptop", LockedKeyring())
    assert warning and "no longer works" in warning
    assert load_config(config).machines == ()


def test_names_taken_invalid_or_default_are_refused(config):
    kr = DictKeyring()
    add_machine(config, "laptop", kr)
    first = kr.entries["machine:laptop"]
    with pytest.raises(MachineError, match="exists"):
        add_machine(config, "laptop", kr)
    assert kr.entries["machine:laptop"] == first  # the existing secret is untouched
    with pytest.raises(MachineError, match="token rotate"):
        add_machine(config, "default", kr)
    with pytest.raises(MachineError, match="token rotate"):
        remove_machine(config, "default", kr)
    with pytest.raises(MachineError, match="machine name"):
        add_machine(config, "Bad", kr)


def test_token_for_default_is_the_main_token(config):
    assert token_for("default", load_config(config), DictKeyring()) == MAIN


def test_token_for_a_lost_secret_says_what_to_do(config):
    kr = DictKeyring()
    add_machine(config, "laptop", kr)
    kr.entries["machine:laptop"] = "something-else-" + "x" * 30
    with pytest.raises(MachineError, match="machines rm laptop"):
        token_for("laptop", load_config(config), kr)
    with pytest.raises(MachineError, match="cannot be read"):
        token_for("laptop", load_config(config), LockedKeyring())


def test_last_seen_is_saved_for_machines_still_there(config):
    from omp_a2a_bridge.server.machines.store import save_last_seen

    kr = DictKeyring()
    add_machine(config, "laptop", kr)
    save_last_seen(config, {"laptop": 1234.5678, "gone": 99.0})
    [laptop] = load_config(config).machines
    assert laptop.last_seen == 1234.568
    assert [m.name for m in load_config(config).machines] == ["laptop"]  # "gone" not revived
