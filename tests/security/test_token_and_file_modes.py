"""The security checklist that is not covered elsewhere: constant-time compare, 0600 files.

The token-leak scan runs for every test (``no_token_leaks`` in conftest.py).
"""

from __future__ import annotations

import hmac
import json
import os
import stat
import subprocess

import pytest

from omp_a2a_bridge.server.core.runner import BridgeRunner, RunnerOptions
from omp_a2a_bridge.server.errors import ConfigError
from omp_a2a_bridge.server.infra.config import load_config
from omp_a2a_bridge.server.mcp import protocol

from ..conftest import write_config
from ..support.control_client import Api
from ..support.helpers import TOKEN, Http, Mcp, read_text, serve_fails


def test_token_compare_is_constant_time(start_bridge, monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((type(a), type(b)))
        return real(a, b)

    monkeypatch.setattr(protocol.hmac, "compare_digest", spy)
    running = start_bridge()
    assert Http(running.port, token="x" * 10).request(body={"jsonrpc": "2.0"}).status == 401
    assert running.client().rpc("ping").status == 200
    assert calls and all(t == (bytes, bytes) for t in calls)


def test_every_file_the_bridge_creates_is_private(start_bridge, env, monkeypatch):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    import keyring.core

    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    running = start_bridge(
        {"approval": {"tiers": {"ls": "allow"}}, "audit": {"max_bytes": 4096, "keep": 3}},
        control=True,
    )
    c = Mcp(running.port, token=running.runner.token)
    c.initialize()
    for _ in range(40):  # enough to rotate the audit log
        c.call("ls", {})
    assert running.runner.bridge.audit.flush(60), "the audit writer fell behind"
    created = []
    for base in (env["config"], env["audit"], os.path.join(env["runtime"], "control.json")):
        directory = os.path.dirname(base)
        created += [os.path.join(directory, f) for f in os.listdir(directory)]
    assert any(p.endswith(".jsonl.1") for p in created)  # a rotated generation exists
    assert any(p.endswith("control.json") for p in created)
    for path in created:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_no_secret_in_the_control_file_listing_or_status(start_bridge):
    running = start_bridge(control=True)
    status = Api(running.runner.control).call("GET", "/api/status")
    assert (
        TOKEN not in status.raw.decode()
        and running.runner.control.secret not in status.raw.decode()
    )


def test_config_written_by_the_bridge_is_private_even_if_loose_before(env):
    write_config(env["config"], {"roots": [env["root"]]})
    os.chmod(env["config"], 0o644)
    from omp_a2a_bridge.server.infra.config import update_config

    update_config(env["config"], {"port": 1234})
    assert stat.S_IMODE(os.stat(env["config"]).st_mode) == 0o600


def _serve_once(env_vars: dict[str, str]) -> subprocess.CompletedProcess:
    """``serve`` as a real process; a bridge that wrongly starts fails the test by timeout
    rather than hanging it."""
    return serve_fails(env_vars)


def _headless_env() -> dict[str, str]:
    e = dict(os.environ)
    e.pop("A2A_BRIDGE_TOKEN", None)
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "PYSTRAY_BACKEND"):
        e.pop(var, None)
    e["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    return e


@pytest.mark.parametrize(
    ("data", "mode", "says"),
    [
        # A hand-written config with the token that others can read: refused like ssh refuses
        # a readable private key (the token may already be copied: chmod, then rotate).
        ({"token_store": "file", "token": "t" * 43}, 0o644, "holds the token and other users"),
        ({"token_store": "file", "token": "t" * 43}, 0o640, "holds the token and other users"),
        # Writable by others: they would decide what runs unattended (rules, tiers, roots).
        ({"roots": ["~"]}, 0o664, "other users can change it (mode 664)"),
        ({"roots": ["~"]}, 0o606, "other users can change it (mode 606)"),
    ],
)
def test_a_loose_config_stops_the_start_and_is_left_alone(env, data, mode, says):
    write_config(env["config"], data)
    os.chmod(env["config"], mode)
    before = read_text(env["config"])
    r = _serve_once(_headless_env())
    assert r.returncode == 1 and r.stdout == "", r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"invalid config at {env['config']}: " in lines[0], r.stderr
    assert says in lines[0] and f"chmod 600 {env['config']}" in lines[0]
    assert "t" * 43 not in r.stderr
    assert stat.S_IMODE(os.stat(env["config"]).st_mode) == mode  # not "healed" behind the user
    assert read_text(env["config"]) == before


def test_a_readable_config_without_the_token_is_accepted(env):
    """Nothing secret in it: 0644 is fine (the bridge's next save makes it 0600 anyway)."""
    write_config(env["config"], {"roots": [env["root"]]})
    os.chmod(env["config"], 0o644)
    assert load_config().roots == (env["root"],)


def test_a_config_in_a_folder_others_can_write_is_refused(env):
    write_config(env["config"], {"roots": [env["root"]]})
    folder = os.path.dirname(env["config"])
    os.chmod(folder, 0o777)  # noqa: S103 - the loose folder under test
    with pytest.raises(ConfigError, match=r"its folder .* can be changed by other users"):
        load_config()
    os.chmod(folder, 0o777 | stat.S_ISVTX)  # noqa: S103 - sticky, like /tmp: safe
    assert load_config().roots == (env["root"],)


def test_a_config_symlinked_into_a_folder_others_can_write_is_refused(env, tmp_path):
    """The private folder holds only a link; the file it names lives where others write."""
    pub = tmp_path / "pub"
    pub.mkdir()
    real = pub / "real.json"
    write_config(str(real), {"roots": [env["root"]]})
    os.makedirs(os.path.dirname(env["config"]), mode=0o700, exist_ok=True)
    os.symlink(real, env["config"])
    assert load_config().roots == (env["root"],)  # a private folder: fine
    os.chmod(pub, 0o777)  # noqa: S103 - the loose folder under test
    with pytest.raises(ConfigError, match=rf"its folder {pub} can be changed by other users"):
        load_config()


def test_the_bridge_creates_its_folders_0700_and_files_0600(tmp_path, monkeypatch):
    """Config folder and file (the token lands there when the keyring refuses), audit folder,
    log and rotations, runtime folder and control file: none of them exists before."""
    import keyring.core

    paths = {
        "config": tmp_path / "new-cfg" / "config.json",
        "audit": tmp_path / "new-log" / "audit.jsonl",
        "runtime": tmp_path / "new-run",
    }
    monkeypatch.setenv("A2A_BRIDGE_CONFIG", str(paths["config"]))
    monkeypatch.setenv("A2A_BRIDGE_AUDIT", str(paths["audit"]))
    monkeypatch.setenv("A2A_BRIDGE_RUNTIME_DIR", str(paths["runtime"]))
    monkeypatch.delenv("A2A_BRIDGE_TOKEN", raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    old = os.umask(0o002)  # a loose umask: the bridge must not depend on the user's
    try:
        runner = BridgeRunner(RunnerOptions(port=0, control=True, discover_tools=False))
        runner.start()
        try:
            c = Mcp(runner.bridge.port, token=runner.token)
            c.initialize()
            c.call("ls", {"path": str(tmp_path)})
            assert runner.bridge.audit.flush(60), "the audit writer fell behind"
            assert json.loads(read_text(str(paths["config"])))["token"] == runner.token
            folders = [paths["config"].parent, paths["audit"].parent, paths["runtime"]]
            for folder in folders:
                assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
            files = [folder / name for folder in folders for name in os.listdir(folder)]
            assert {f.name for f in files} >= {"config.json", "audit.jsonl", "control.json"}
            for f in files:
                assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f
        finally:
            runner.stop()
    finally:
        os.umask(old)
