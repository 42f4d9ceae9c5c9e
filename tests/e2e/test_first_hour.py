"""The first hour, as a newcomer meets it: real ``a2a-bridge`` processes with no display and no
session bus. The start says what is exposed, how to approve and where the log is; a config typo
stops the start; a port the user chose never moves; the log file keeps what stderr said.

Commands that need no process of their own (``status``, ``url``, ``client-config``, ``config
check``, ``logs``) run in process through the ``cli`` fixture, against the real serve process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys

import pytest

from ..conftest import write_config
from ..support.helpers import TOKEN, Mcp, read_text, serve_fails, wait_for

SERVER = [sys.executable, "-m", "omp_a2a_bridge.server"]
PLAIN = [sys.executable, "-m", "omp_a2a_bridge.tray"]  # what the installed `a2a-bridge` runs


@pytest.fixture
def headless(env):
    """The environment of a start on a machine with no display and no session bus."""
    e = dict(os.environ)
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "PYSTRAY_BACKEND"):
        e.pop(var, None)
    e["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    return e


def start(argv, env):
    """A bridge process and the first line it printed on stdout."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("a2a-bridge listening on http://127.0.0.1:"), (
        line,
        p.stderr.read() if p.poll() is not None else "",
    )
    return p, int(line.rsplit(":", 1)[1].strip("/\n"))


def stop(p) -> tuple[str, str]:
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    return out, err


@pytest.mark.parametrize("argv", [[*SERVER, "serve"], PLAIN], ids=["serve", "plain a2a-bridge"])
def test_a_headless_start_says_what_is_exposed_how_to_approve_and_where_the_log_is(
    env, headless, cli, argv
):
    write_config(env["config"], {"roots": [env["root"]], "approval": {"tiers": {"write": "allow"}}})
    p, port = start(argv, headless)
    try:
        status = json.loads(cli("status", "--json").stdout)
    finally:
        out, err = stop(p)
    assert out == ""  # stdout: the one URL line scripts parse, nothing else
    lines = [x for x in err.splitlines() if x.startswith("  ")]
    assert len(lines) == 3, err
    exposed, approve, log = lines
    assert f"exposed: {env['root']}" in exposed
    assert "tiers changed: write=allow" in exposed
    box = status["box"]
    assert ("box: bubblewrap" if box["available"] else "box: none") in exposed
    assert "'a2a-bridge watch'" in approve and "'a2a-bridge open'" in approve
    assert log.strip().startswith(f"log: {env['log']}")
    # status --json carries the same: roots, the changed tiers, the box.
    assert status["roots"] == [env["root"]]
    assert status["tiers"] == [{"tool": "write", "tier": "allow", "default": "prompt"}]
    assert {"available", "mechanism", "allows", "text"} <= set(box)
    assert status["log_path"] == env["log"]
    assert [(m["name"], m["sessions"], m["tunnel"]) for m in status["machines"]] == [
        ("default", 0, None)
    ]
    assert status["mcp_url"] == f"http://127.0.0.1:{port}/"


def test_the_text_status_says_what_is_exposed(env, headless, cli):
    write_config(env["config"], {"roots": [env["root"]], "deny": ["bash"]})
    p, _ = start([*SERVER, "serve"], headless)
    try:
        text = cli("status").stdout
    finally:
        stop(p)
    assert f"exposed: {env['root']}" in text and "not exposed: bash" in text
    assert f"log: {env['log']}" in text
    assert "  machines: default\n" in text


@pytest.mark.parametrize(
    ("config", "key", "hint"),
    [
        ({"aproval": {"tiers": {"bash": "prompt"}}}, "aproval", "approval"),
        ({"root": ["/srv/project"]}, "root", "roots"),
        ({"tier": {"bash": "prompt"}}, "tier", "approval.tiers"),
        ({"approval": {"tier": {"bash": "prompt"}}}, "approval.tier", "approval.tiers"),
    ],
    ids=["aproval", "root", "tier", "nested"],
)
def test_an_unknown_key_stops_the_start_and_leaves_the_file_untouched(
    env, headless, cli, config, key, hint
):
    write_config(env["config"], config)
    with open(env["config"], "rb") as f:
        before = f.read()
    r = serve_fails(headless)
    assert r.returncode == 1 and r.stdout == ""
    want = (
        f"a2a-bridge: failed to start: invalid config at {env['config']}: "
        f"unknown key '{key}' (did you mean '{hint}'?)"
    )
    assert r.stderr.strip().splitlines() == [want], r.stderr
    with open(env["config"], "rb") as f:
        assert f.read() == before  # byte for byte
    # The log file has the line too (under autostart nobody reads stderr).
    assert want in read_text(env["log"])
    # `config check` says the same without starting.
    r = cli("config", "check")
    assert r.returncode == 1 and r.stderr.strip() == want.replace("failed to start: ", "")


def test_config_check_passes_a_good_file_and_names_the_file_it_checked(env, cli, tmp_path):
    write_config(env["config"], {"roots": [env["root"]], "log": {"max_bytes": 8192}})
    r = cli("config", "check")
    assert (r.returncode, r.stdout.strip()) == (0, f"ok: {env['config']}")
    other = str(tmp_path / "other.json")
    write_config(other, {"limits": {"read_max_byte": 1}})
    r = cli("config", "check", "--file", other)
    assert r.returncode == 1
    assert "unknown key 'limits.read_max_byte' (did you mean 'limits.read_max_bytes'?)" in r.stderr


@pytest.mark.parametrize("argv", [[*SERVER, "serve"], PLAIN], ids=["serve", "plain a2a-bridge"])
def test_the_log_file_is_private_and_holds_what_stderr_said_and_no_token(env, headless, cli, argv):
    write_config(env["config"], {"roots": [env["root"]]})
    p, port = start(argv, headless)
    try:
        Mcp(port, token="w" * 40).rpc("ping")  # a wrong token: a warning on stderr
        Mcp(port).initialize()
    finally:
        _, err = stop(p)
    assert "unauthorized attempt" in err
    assert stat.S_IMODE(os.stat(env["log"]).st_mode) == 0o600
    logged = read_text(env["log"])
    for line in err.splitlines():
        assert line in logged, line  # every line stderr showed, in order of arrival
    assert f"a2a-bridge listening on http://127.0.0.1:{port}/" in logged
    assert TOKEN not in logged and "w" * 40 not in logged
    # `a2a-bridge logs` shows it; --path says where.
    assert cli("logs", "--path").stdout.strip() == env["log"]
    assert cli("logs", "-n", "3").stdout.splitlines() == logged.splitlines()[-3:]


def test_the_log_file_rotates_at_its_configured_size(env, headless, tmp_path):
    """Driven past ``log.max_bytes`` by an upstream server whose env would carry the token:
    one warning per withheld variable, at every (re)start of the server."""
    names = {f"PASTED_BY_MISTAKE_{'X' * 60}_{i:03}": TOKEN for i in range(40)}
    server = {"command": sys.executable, "args": ["-c", "pass"], "env": names}
    write_config(
        env["config"],
        {
            "roots": [env["root"]],
            "log": {"max_bytes": 4096, "keep": 2},
            "mcp_servers": {"pasted": server},
        },
    )
    p, _ = start([*SERVER, "serve"], headless)
    try:
        wait_for(lambda: os.path.exists(env["log"] + ".1"), timeout=60, interval=0.2)
    finally:
        stop(p)
    generations = [env["log"], env["log"] + ".1"]
    for name in generations:
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
        assert os.path.getsize(name) <= 4096 + 1024  # a line past the size ends a generation
        assert TOKEN not in read_text(name)
    assert not os.path.exists(env["log"] + ".3")  # keep: 2
    assert "withheld from its environment" in read_text(env["log"] + ".1")


def _busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


@pytest.mark.parametrize("how", ["--port", "config"])
def test_a_busy_port_the_user_chose_stops_serve_in_one_clear_line(env, headless, how):
    sock, busy = _busy_port()
    try:
        config = {"roots": [env["root"]]}
        if how == "config":
            config["port"] = busy
        write_config(env["config"], config)
        r = serve_fails(headless, args=("--port", str(busy)) if how == "--port" else ())
    finally:
        sock.close()
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"a2a-bridge: failed to start: port {busy} is already in use by ")
    assert f"(pid {os.getpid()})" in line  # the holder, found where the OS says (this test)
    chose = "--port chose it" if how == "--port" else f"'port' in {env['config']} chose it"
    assert chose in line and "does not move it" in line


@pytest.mark.reveals_token
def test_a_port_the_bridge_picked_moves_and_url_and_client_config_follow(env, headless, cli):
    """First start: port 0 -> picked and saved. Taken by someone else before the next start,
    it moves; ``url`` and ``client-config`` read the live port from the running bridge."""
    write_config(env["config"], {"roots": [env["root"]]})
    p, first = start([*SERVER, "serve"], headless)
    stop(p)
    saved = json.loads(read_text(env["config"]))
    assert (saved["port"], saved["picked_port"]) == (first, first)
    sock = socket.socket()
    sock.bind(("127.0.0.1", first))  # someone else takes it meanwhile
    sock.listen(1)
    try:
        p, live = start([*SERVER, "serve"], headless)
        try:
            assert live != first
            assert cli("url").stdout.strip() == f"http://127.0.0.1:{live}/"
            server = json.loads(cli("client-config").stdout)["mcpServers"]["omp-host"]
            assert server["url"] == f"http://127.0.0.1:{live}/"
            assert f":{live}/" in cli("client-config", "--for", "claude-code").stdout
        finally:
            _, err = stop(p)
    finally:
        sock.close()
    assert f"port {first} (picked by the bridge) is busy - moved to {live}" in err
    assert json.loads(read_text(env["config"]))["port"] == live  # stable from now on


def test_logs_follow_prints_new_lines_as_the_bridge_writes_them(env, headless):
    write_config(env["config"], {"roots": [env["root"]]})
    p, port = start([*SERVER, "serve"], headless)
    follow = subprocess.Popen(
        [*SERVER, "logs", "-n", "0", "--follow"],
        env=headless,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stderr.readline().startswith(f"following {env['log']}")
        Mcp(port, token="w" * 40).rpc("ping")  # the bridge logs a warning
        line = follow.stdout.readline()
        assert "unauthorized attempt" in line and "w" * 40 not in line
    finally:
        follow.send_signal(signal.SIGINT)
        follow.wait(30)
        stop(p)
