"""The ``a2a-bridge`` command as a user runs it: real processes, real signals, real files.

Commands that need no process of their own run in process (the ``cli`` fixture).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import keyring
import pytest
from keyring.backends.fail import Keyring as FailKeyring

from ..conftest import write_config
from ..support.helpers import STOP_LIMIT_S, Mcp, read_text, serve_fails

EXE = [sys.executable, "-m", "omp_a2a_bridge.server"]


@pytest.fixture
def cli_env(env, monkeypatch):
    """Subprocess environment: private paths, a keyring that refuses (headless CI)."""
    e = dict(os.environ)
    e.pop("A2A_BRIDGE_TOKEN", None)
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "PYSTRAY_BACKEND"):  # never a real tray here
        e.pop(var, None)
    e["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    write_config(env["config"], {"roots": [env["root"]]})
    return e


def start_serve(env, *extra):
    p = subprocess.Popen(
        [*EXE, "serve", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    return p, line


def test_serve_prints_one_line_and_exits_cleanly_on_sigterm(cli_env, env):
    p, line = start_serve(cli_env, "--port", "0")
    try:
        assert line.startswith("a2a-bridge listening on http://127.0.0.1:")
        assert line.endswith("/\n")
        port = int(line.rsplit(":", 1)[1].strip("/\n"))
        token = json.loads(read_text(env["config"]))["token"]
        c = Mcp(port, token=token)
        c.initialize()
        assert c.rpc("ping").status == 200
        Mcp(port, token="w" * 40).rpc("ping")  # a wrong token, to have a warning logged
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
        assert time.monotonic() - t0 < STOP_LIMIT_S
        assert p.returncode == 0
        assert out == ""  # exactly one line on stdout in total
        assert "unauthorized attempt" in err
        assert token not in err and "w" * 40 not in err
        assert "Traceback" not in err
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_sigint(cli_env):
    p, line = start_serve(cli_env, "--port", "0")
    assert "listening" in line
    p.send_signal(signal.SIGINT)
    assert p.wait(10) == 0


def test_serve_refuses_malformed_config_exactly(env, cli):
    write_config(env["config"], {"approval": {"timeout_s": "soon"}})
    before = read_text(env["config"])
    r = cli("serve")
    assert r.returncode == 1
    assert r.stdout == ""
    assert (
        f"invalid config at {env['config']}: field 'approval.timeout_s' must be a number >= 0"
        in r.stderr
    )
    assert read_text(env["config"]) == before


def test_token_url_and_client_config(cli_env, env, cli, monkeypatch):
    p, line = start_serve(cli_env)  # port 0 in config: picked and saved
    p.send_signal(signal.SIGTERM)
    p.wait(10)
    url = line.split()[-1]
    # The commands that follow run in this process, with the same surroundings as the server
    # had: no token in the environment and a keyring that refuses.
    monkeypatch.delenv("A2A_BRIDGE_TOKEN")
    previous = keyring.get_keyring()
    keyring.set_keyring(FailKeyring())
    try:
        _token_commands(cli, url)
    finally:
        keyring.set_keyring(previous)


def _token_commands(cli, url: str) -> None:
    r = cli("url")
    assert r.returncode == 0 and r.stdout.strip() == url
    token = cli("token", "show").stdout.strip()
    assert len(token) == 43
    cfg = json.loads(cli("client-config").stdout)
    assert cfg == {
        "mcpServers": {
            "omp-host": {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer {token}"},
            }
        }
    }
    r = cli("token", "rotate")
    assert r.returncode == 0 and token not in r.stdout + r.stderr
    assert cli("token", "show").stdout.strip() not in ("", token)


def test_url_before_first_start_says_so(env, cli):
    write_config(env["config"], {"roots": [env["root"]]})
    r = cli("url")
    assert r.returncode == 1 and "no port chosen yet" in r.stderr


def test_audit_command_pairs_calls(cli_env, env, cli):
    write_config(env["config"], {"roots": [env["root"]], "approval": {"tiers": {"ls": "allow"}}})
    p, line = start_serve(cli_env, "--port", "0")
    port = int(line.rsplit(":", 1)[1].strip("/\n"))
    token = json.loads(read_text(env["config"]))["token"]
    c = Mcp(port, token=token, client="cli-test")
    c.initialize()
    c.call("ls", {})
    c.call("nope", {})
    p.send_signal(signal.SIGTERM)
    p.wait(10)
    r = cli("audit")
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    assert " ok " in lines[0] and " ls " in lines[0] and "(cli-test)" in lines[0]
    assert "not_exposed" in lines[1] and " nope " in lines[1]


def test_plain_command_without_tray_serves_and_says_so(cli_env):
    p = subprocess.Popen(
        [sys.executable, "-m", "omp_a2a_bridge.tray"],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().startswith("a2a-bridge listening on ")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=10)
        assert "running headless" in err
    finally:
        if p.poll() is None:
            p.kill()


def test_the_installed_command_runs():
    """The console script the Quick start runs (``a2a-bridge``, from the namespaced entry point
    ``omp_a2a_bridge.tray.cli:main``) starts from a plain ``pip install``."""
    exe = os.path.join(os.path.dirname(sys.executable), "a2a-bridge")
    assert os.path.exists(exe), "pip install -e . installs the a2a-bridge command"
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for verb in ("serve", "tray", "watch", "rules", "machines", "client-config"):
        assert verb in r.stdout, (verb, r.stdout)


def _busy_port() -> tuple[object, int]:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


@pytest.mark.reveals_token
def test_url_and_client_config_report_the_live_port_when_the_configured_one_was_busy(env, cli):
    """The port the bridge picked (and saved) is busy, so it binds another and warns: ``url``
    and ``client-config`` must print where it really listens, not the configured port."""
    from omp_a2a_bridge.server.core.runner import BridgeRunner, RunnerOptions

    sock, busy = _busy_port()
    try:
        write_config(env["config"], {"roots": [env["root"]], "port": busy, "picked_port": busy})
        runner = BridgeRunner(RunnerOptions(control=True, discover_tools=False))
        runner.start()
        try:
            assert runner.bridge.port != busy
            live = runner.url
            r = cli("url")
            assert r.returncode == 0 and r.stdout.strip() == live, r
            cfg = json.loads(cli("client-config").stdout)
            server = cfg["mcpServers"]["omp-host"]
            assert server["url"] == live
            assert server["headers"]["Authorization"] == f"Bearer {runner.token}"
            r = cli("client-config", "--for", "claude-code")
            assert live in r.stdout and f":{busy}/" not in r.stdout
            r = cli("client-config", "--ssh", "me@box")
            port = runner.bridge.port
            assert f"-R 127.0.0.1:{port}:127.0.0.1:{port}" in r.stdout, r
        finally:
            runner.stop()
        # Nothing runs: the configured URL (the moved port was saved: the bridge picked it),
        # and a short note on stderr saying so.
        r = cli("url")
        assert r.returncode == 0 and r.stdout.strip() == live
        assert "no bridge is running" in r.stderr
    finally:
        sock.close()


def test_url_follows_serve_port_override(env, cli, start_bridge):
    """``serve --port P`` (here: a runner with a port override) is what ``url`` prints."""
    running = start_bridge({"port": 1}, control=True)  # the override: port 0, a free one
    r = cli("url")
    assert r.returncode == 0 and r.stdout.strip() == running.runner.url != "http://127.0.0.1:1/"


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"sensitive_paths": ["work/secrets"]}, "sensitive_paths"),
        ({"limits": {"bash_timeout_s": 7200}}, "limits.bash_timeout_s"),
        ({"roots": ["relative/dir"]}, "roots"),
    ],
)
def test_serve_refuses_config_that_would_fail_later(cli_env, env, config, field):
    """Each of these used to start: a relative sensitive path or root resolved against the
    bridge's working directory, and a default bash timeout above the maximum failed every
    bash call with a message about an argument the agent never sent. (A real process with a
    timeout: a bridge that wrongly starts must fail the test, not hang it.)"""
    write_config(env["config"], config)
    before = read_text(env["config"])
    r = serve_fails(cli_env)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(
        f"a2a-bridge: failed to start: invalid config at {env['config']}: field '{field}' must be"
    ), lines[0]
    assert read_text(env["config"]) == before
