"""Config validation and saving, the token store (keyring, fallback, env, rotation), binding."""

from __future__ import annotations

import json
import os
import socket
import stat

import pytest

from omp_a2a_bridge.server.core.runner import BridgeRunner, RunnerOptions, StartupError
from omp_a2a_bridge.server.infra.config import ConfigError, load_config, update_config
from omp_a2a_bridge.server.infra.tokens import (
    KeyringStore,
    KeyringUnavailable,
    TokenStore,
    generate_token,
)

from ..conftest import write_config
from ..support.helpers import Mcp, read_text

GOOD_TOKEN = "g" * 43


@pytest.mark.parametrize(
    ("raw", "field", "what"),
    [
        ({"port": "80"}, "port", "an integer in [0, 65535]"),
        ({"port": 70000}, "port", "an integer in [0, 65535]"),
        ({"port": True}, "port", "an integer in [0, 65535]"),
        ({"host": ""}, "host", "a non-empty string"),
        ({"token_store": "vault"}, "token_store", "one of 'keyring', 'file'"),
        ({"token": "letmein"}, "token", "at least 32 characters, no whitespace"),
        ({"token": "a" * 20 + " " + "b" * 20}, "token", "at least 32 characters, no whitespace"),
        ({"deny": "bash"}, "deny", "an array of non-empty strings"),
        ({"deny_mcp_tools": "yes"}, "deny_mcp_tools", "a boolean"),
        ({"allowed_origins": [1]}, "allowed_origins", "an array of non-empty strings"),
        ({"roots": [""]}, "roots", "an array of non-empty strings"),
        ({"approval": []}, "approval", "an object"),
        (
            {"approval": {"tiers": {"bash": "sometimes"}}},
            "approval.tiers",
            "an object mapping tool names to allow|box|prompt|deny",
        ),
        (
            {"approval": {"default_tier": "maybe"}},
            "approval.default_tier",
            "one of 'allow', 'box', 'prompt', 'deny'",
        ),
        ({"approval": {"timeout_s": -1}}, "approval.timeout_s", "a number >= 0 (0 = wait forever)"),
        ({"audit": {"max_bytes": 10}}, "audit.max_bytes", "an integer >= 4096"),
        ({"audit": {"keep": 0}}, "audit.keep", "an integer in [1, 100]"),
        ({"limits": {"output_max_bytes": 0}}, "limits.output_max_bytes", "a positive integer"),
        ({"limits": {"bash_timeout_s": "x"}}, "limits.bash_timeout_s", "a positive number"),
    ],
)
def test_invalid_field_refuses_with_exact_message_and_leaves_file(tmp_path, raw, field, what):
    path = tmp_path / "config.json"
    text = json.dumps(raw)
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value) == f"invalid config at {path}: field '{field}' must be {what}"
    assert path.read_text() == text


def test_not_json_and_not_object(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("{nope")
    with pytest.raises(ConfigError, match=rf"^invalid config at {p}: not valid JSON"):
        load_config(str(p))
    p.write_text("[1]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_config(str(p))


def test_defaults_when_absent(tmp_path):
    cfg = load_config(str(tmp_path / "none.json"))
    assert (cfg.host, cfg.port, cfg.token_store, cfg.default_tier) == (
        "127.0.0.1",
        0,
        "keyring",
        "prompt",
    )
    assert cfg.approval_timeout_s == 55 and cfg.roots == (os.path.expanduser("~"),)
    assert not (tmp_path / "none.json").exists()


def test_update_preserves_other_keys_and_is_private(tmp_path):
    p = tmp_path / "sub" / "c.json"
    write_config(str(p), {"deny": ["find"], "approval": {"timeout_s": 9}})
    os.chmod(p, 0o644)
    update_config(str(p), {"approval.tiers.bash": "allow", "port": 4242})
    data = json.loads(p.read_text())
    assert data == {
        "deny": ["find"],
        "approval": {"timeout_s": 9, "tiers": {"bash": "allow"}},
        "port": 4242,
    }
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    with pytest.raises(ConfigError):
        update_config(str(p), {"port": -5})  # never writes a file the next start would refuse
    assert json.loads(p.read_text())["port"] == 4242
    assert [f for f in os.listdir(p.parent) if f.startswith(".tmp")] == []


# -- token -----------------------------------------------------------------------------------


class BrokenKeyring(KeyringStore):
    def get(self):
        raise KeyringUnavailable("locked collection")

    def set(self, token):
        raise KeyringUnavailable("locked collection")


def test_generate_token_shape():
    tokens = {generate_token() for _ in range(50)}
    assert len(tokens) == 50
    assert all(len(t) == 43 and "=" not in t and "+" not in t and "/" not in t for t in tokens)


def test_keyring_store_and_reuse(tmp_path, memory_keyring, monkeypatch):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN", raising=False)
    cfg = load_config(str(tmp_path / "c.json"))
    s = TokenStore(cfg)
    state = s.resolve()
    assert state.source == "keyring" and len(state.token) == 43
    assert memory_keyring.store[("omp-a2a-bridge", "token")] == state.token
    assert not (tmp_path / "c.json").exists()  # nothing written to the file
    assert TokenStore(cfg).resolve().token == state.token


def test_keyring_unusable_falls_back_to_file_with_warning(tmp_path, monkeypatch, log_records):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN", raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    import keyring.core

    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    path = tmp_path / "c.json"
    state = TokenStore(load_config(str(path))).resolve()
    assert state.source == "file" and "keyring unavailable" in state.warning
    assert json.loads(path.read_text())["token"] == state.token
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert any("keyring unavailable" in m for m in log_records.messages)
    assert all(state.token not in m for m in log_records.messages)
    # Stable across restarts.
    assert TokenStore(load_config(str(path)), BrokenKeyring()).resolve().token == state.token


def test_fallback_token_moves_into_keyring_when_it_works_again(
    tmp_path, memory_keyring, monkeypatch
):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN", raising=False)
    path = tmp_path / "c.json"
    write_config(str(path), {"token": GOOD_TOKEN, "deny": ["find"]})
    state = TokenStore(load_config(str(path))).resolve()
    assert state.token == GOOD_TOKEN and state.source == "keyring"
    assert memory_keyring.store[("omp-a2a-bridge", "token")] == GOOD_TOKEN
    assert json.loads(path.read_text()) == {"deny": ["find"]}


def test_env_override_is_never_persisted(tmp_path, memory_keyring, monkeypatch):
    monkeypatch.setenv("A2A_BRIDGE_TOKEN", GOOD_TOKEN)
    s = TokenStore(load_config(str(tmp_path / "c.json")))
    assert s.resolve().source == "env"
    assert memory_keyring.store == {} and not (tmp_path / "c.json").exists()
    with pytest.raises(ConfigError, match="A2A_BRIDGE_TOKEN"):
        s.rotate()
    monkeypatch.setenv("A2A_BRIDGE_TOKEN", "short")
    with pytest.raises(ConfigError, match="at least 32 characters"):
        TokenStore(load_config(str(tmp_path / "c.json"))).resolve()


def test_file_store_and_rotation_persist_first(tmp_path, monkeypatch):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN", raising=False)
    path = tmp_path / "c.json"
    write_config(str(path), {"token_store": "file", "token": GOOD_TOKEN})
    s = TokenStore(load_config(str(path)))
    assert s.resolve().token == GOOD_TOKEN
    new = s.rotate()
    assert new != GOOD_TOKEN and json.loads(path.read_text())["token"] == new
    # A failed write keeps the old token live (a directory where the file was: fails as root too).
    path.unlink()
    path.mkdir()
    (path / "keep").write_text("x")
    with pytest.raises(OSError):
        s.rotate()
    assert s.token == new


def test_rotation_failure_keeps_old_token(tmp_path, memory_keyring, monkeypatch):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN", raising=False)
    s = TokenStore(load_config(str(tmp_path / "c.json")))
    old = s.resolve().token

    def refuse(*a):
        raise RuntimeError("collection locked")

    monkeypatch.setattr(memory_keyring, "set_password", refuse)
    with pytest.raises(KeyringUnavailable):
        s.rotate()
    assert s.token == old


def test_rotation_takes_effect_at_once_over_http(env, memory_keyring, monkeypatch):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN")
    write_config(env["config"], {"roots": [env["root"]]})
    runner = BridgeRunner(RunnerOptions(port=0, discover_tools=False))
    runner.start()
    try:
        old = runner.token
        c = Mcp(runner.bridge.port, token=old)
        c.initialize()
        assert runner.rotate_token() == "keyring"
        new = runner.token
        assert memory_keyring.store[("omp-a2a-bridge", "token")] == new
        assert c.rpc("ping").status == 401
        c.token = new
        assert c.rpc("ping").status == 200  # the session outlives the rotation
    finally:
        runner.stop()


# -- binding ---------------------------------------------------------------------------------


def test_first_start_picks_and_saves_a_port(env):
    write_config(env["config"], {"roots": [env["root"]], "port": 0})
    r = BridgeRunner(RunnerOptions(discover_tools=False))
    r.start()
    try:
        saved = json.loads(read_text(env["config"]))["port"]
        assert saved == r.bridge.port != 0
    finally:
        r.stop()


def test_a_busy_port_the_bridge_picked_moves_and_is_saved(env, log_records):
    """``port`` equal to ``picked_port`` was the bridge's own pick: busy, it moves (and the new
    pick is saved, so the URL stays stable from then on)."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    write_config(env["config"], {"roots": [env["root"]], "port": port, "picked_port": port})
    r = BridgeRunner(RunnerOptions(discover_tools=False))
    try:
        snap = r.start()
        moved = r.bridge.port
        assert moved != port
        assert any(f"port {port} (picked by the bridge) is busy" in w for w in snap.warnings)
        assert any("is busy" in m for m in log_records.messages)
        assert Mcp(moved).initialize().status == 200
        saved = json.loads(read_text(env["config"]))
        assert (saved["port"], saved["picked_port"]) == (moved, moved)
    finally:
        r.stop()
        busy.close()


@pytest.mark.parametrize("how", ["config", "--port"])
def test_a_busy_port_the_user_chose_stops_the_start_naming_its_holder(env, how):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    # A "port" the bridge did not pick (picked_port says another), or --port.
    config = {"roots": [env["root"]], "port": port, "picked_port": 1}
    if how == "--port":
        config = {"roots": [env["root"]]}
    write_config(env["config"], config)
    before = read_text(env["config"])
    opts = RunnerOptions(discover_tools=False, port=port if how == "--port" else None)
    try:
        with pytest.raises(StartupError) as e:
            BridgeRunner(opts).start()
        text = str(e.value)
        assert text.startswith(f"port {port} is already in use by ")
        assert f"(pid {os.getpid()})" in text  # this very process holds it
        assert ("--port chose it" if how == "--port" else f"'port' in {env['config']}") in text
        assert read_text(env["config"]) == before
    finally:
        busy.close()


def test_other_bind_errors_are_reported_not_retried(env):
    # 192.0.2.1 (TEST-NET-1) is not an address of this machine: binding fails at once.
    write_config(env["config"], {"roots": [env["root"]], "host": "192.0.2.1", "port": 4567})
    with pytest.raises(StartupError, match=r"cannot listen on 192\.0\.2\.1:4567"):
        BridgeRunner(RunnerOptions(discover_tools=False)).start()


def test_malformed_config_does_not_start(env):
    write_config(env["config"], {"port": "x"})
    with pytest.raises(StartupError, match="field 'port' must be"):
        BridgeRunner(RunnerOptions(discover_tools=False)).start()
