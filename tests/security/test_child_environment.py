"""No secret of the user's environment reaches what the agent runs.

A real ``a2a-bridge serve`` is started with fake secrets planted in *its* environment (a
desktop session's: forge and cloud tokens, an API key, the SSH agent socket, the session bus)
and a ``bash`` tier of ``allow``. The agent then tries every way to read them over real HTTP:
``env``, ``printenv``, ``sh -c env``, ``env -i``, ``/proc/self/environ``, the supervisor's
``/proc/$PPID/environ`` and the bridge's own ``/proc/<pid>/environ`` (those three approved by
a human through the control API, the worst case), and an upstream stdio server dumps the
environment it was given. No planted value may appear anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from omp_a2a_bridge.server.control.controlfile import ControlInfo, read_control
from omp_a2a_bridge.server.infra.childenv import (
    SAFE_NAMES,
    EnvSpec,
    build_env,
    looks_secret,
)
from omp_a2a_bridge.server.infra.config import ConfigError, parse_config

from ..conftest import require_system
from ..support.control_client import Api, WsApprover
from ..support.helpers import (
    TOKEN,
    Mcp,
    Response,
    serve_fails,
    serve_process,
    stop_process,
    wait_for,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Planted in the bridge's environment; none may reach bash or an upstream server.
SECRETS = {
    "GITHUB_TOKEN": "FAKE-SECRET-ghp-0001",
    "AWS_SECRET_ACCESS_KEY": "FAKE-SECRET-aws-0002",
    "AWS_ACCESS_KEY_ID": "FAKE-SECRET-akid-0003",
    "OPENAI_API_KEY": "FAKE-SECRET-openai-0004",
    "SSH_AUTH_SOCK": "/tmp/FAKE-SECRET-ssh-agent.0005",
    "GPG_AGENT_INFO": "/tmp/FAKE-SECRET-gpg.0006",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/tmp/FAKE-SECRET-bus-0007",
    "CARGO_REGISTRIES_CRATES_IO_TOKEN": "FAKE-SECRET-cargo-0008",  # reached by a pass glob
    "MY_PLAIN_SETTING": "FAKE-SECRET-unlisted-0009",  # harmless-looking but never listed
    "XAUTHORITY": "/tmp/FAKE-SECRET-xauth-0010",
}
# Passed on purpose by the config below.
PASSED = {
    "GOPATH": "/planted/go",
    "CARGO_HOME": "/planted/cargo",
    "EXACT_API_KEY": "listed-exactly-so-it-passes",
}
BASH_ENV = {"pass": ["GOPATH", "CARGO_*", "EXACT_API_KEY"], "set": {"FOO": "bar"}}
SHELL_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}  # bash sets these itself


@dataclass
class Serve:
    proc: subprocess.Popen[str]
    port: int
    env: dict[str, str]
    state: Path
    log: Path

    def client(self) -> Mcp:
        c = Mcp(self.port)
        c.initialize()
        return c

    def control(self) -> ControlInfo:
        info = read_control(os.path.join(self.env["A2A_BRIDGE_RUNTIME_DIR"], "control.json"))
        assert info is not None
        return info


def _leaks(text: str) -> list[str]:
    return [k for k, v in SECRETS.items() if v in text] + (["token"] if TOKEN in text else [])


def _as_a_desktop_user() -> list[str]:
    """Root reads any process's environ, so a suite run as root (containers, CI) runs the
    bridge as an unprivileged user in a user namespace, as on a desktop; else as itself."""
    if os.geteuid() != 0:
        return []
    argv = ["unshare", "--user", "--map-user=1000", "--map-group=1000"]
    try:
        ok = subprocess.run([*argv, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        if os.environ.get("CI"):
            pytest.fail("running as root and 'unshare --user' does not work here")
        pytest.skip("running as root and 'unshare --user' does not work here")
    return argv


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Serve]:
    base = tmp_path_factory.mktemp("childenv")
    root = base / "root"
    root.mkdir()
    state = base / "upstream-state"
    state.mkdir()
    runtime = base / "run"
    config = base / "config.json"
    config.write_text(
        json.dumps(
            {
                "roots": [str(root)],
                "approval": {"tiers": {"bash": "allow", "mcp__t__env": "allow"}},
                "bash": {"env": BASH_ENV},
                "mcp_servers": {
                    "t": {
                        "command": sys.executable,
                        "args": ["-m", "tests.support.upstream_server", "--state", str(state)],
                        "cwd": REPO,
                        # The test reads the env.json it writes into ``state`` (outside the
                        # roots: in the box it would land in the box's private /tmp).
                        "box": False,
                    }
                },
            }
        )
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("A2A_BRIDGE_") and not looks_secret(k)
    }
    env.update(SECRETS)
    env.update(PASSED)
    env.update(
        A2A_BRIDGE_CONFIG=str(config),
        A2A_BRIDGE_AUDIT=str(base / "audit.jsonl"),
        A2A_BRIDGE_LOG=str(base / "bridge.log"),
        A2A_BRIDGE_TOKEN=TOKEN,
        A2A_BRIDGE_RUNTIME_DIR=str(runtime),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
    )
    log = base / "serve.log"
    with open(log, "w") as err:  # module-scoped: the helper, not the serve_process fixture
        proc, port = serve_process(env, err, prefix=_as_a_desktop_user())
    yield Serve(proc, port, env, state, log)
    stop_process(proc)


def _bash(s: Serve, command: str) -> Response:
    return s.client().call("bash", {"command": command})


def _names(env_output: str) -> set[str]:
    return {line.split("=", 1)[0] for line in env_output.splitlines() if "=" in line}


def test_env_and_printenv_show_only_safe_and_configured_variables(served):
    r = _bash(served, "env")
    assert not r.result["isError"], r
    assert _leaks(r.text) == [], r.text
    names = _names(r.text)
    extra = names - SAFE_NAMES - SHELL_OWN - set(PASSED) - {"FOO", "OMP_A2A_TOOL"}
    assert {n for n in extra if not n.startswith("LC_")} == set(), r.text
    assert "PATH" in names and "HOME" in names
    # What the config passes or sets is there, exactly as given.
    for k, v in {**PASSED, "FOO": "bar"}.items():
        assert f"{k}={v}" in r.text.splitlines(), (k, r.text)
    assert not [n for n in names if n.startswith("A2A_BRIDGE_")]

    for name in SECRETS:
        p = _bash(served, f"printenv {name}")
        assert p.result["isError"] and p.text == "[exit code 1]", (name, p.text)
    for command in ("sh -c env", "bash -lc env", "env -i sh -c env", "export -p", "set"):
        r = _bash(served, command)
        assert _leaks(r.text) == [], (command, r.text)
    r = _bash(served, 'echo "agent=${SSH_AUTH_SOCK-unset} bus=${DBUS_SESSION_BUS_ADDRESS-unset}"')
    assert r.text == "agent=unset bus=unset"


def test_ssh_agent_is_not_reachable_through_the_environment(served):
    require_system("ssh-add", packages="openssh-client")  # any PATH folder, not /usr/bin only
    r = _bash(served, "ssh-add -L")
    assert r.result["isError"], r
    assert "Could not open a connection to your authentication agent" in r.text, r.text


@pytest.mark.parametrize(
    "command",
    [
        "SSH_AUTH_SOCK=/tmp/ssh-XXXXabcd/agent.1234 ssh-add -L",
        "ls /tmp/ssh-*/agent.*",
        "SSH_AUTH_SOCK=/run/user/1000/keyring/ssh git push",
        "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus secret-tool lookup a b",
        "GNUPGHOME=x gpg-connect-agent -S /run/user/1000/gnupg/S.gpg-agent",
        "curl --unix-socket /var/run/docker.sock http://x/containers/json",
    ],
)
def test_agent_sockets_named_by_path_reach_nothing(served, command):
    """The scrub takes the socket addresses away; naming a socket by path reaches nothing
    either: bash runs in the box, where /tmp, /run and the runtime dirs are private."""
    r = _bash(served, command)
    assert r.result["isError"], r
    assert "approval required" not in r.text, r


def _approved(s: Serve, command: str) -> tuple[dict, Response]:
    """Run ``command`` through a human approval (protected paths always ask): the worst case,
    where the user let it run, outside the box. Returns the pending call as the approver saw
    it and the result."""
    info = s.control()
    api = Api(info)
    approver = WsApprover(info)
    try:
        out: list[Response] = []
        c = s.client()
        t = threading.Thread(
            target=lambda: out.append(c.call("bash", {"command": command, "box": False})),
            daemon=True,
        )
        t.start()
        [p] = wait_for(lambda: api.call("GET", "/api/pending").json["pending"] or None)
        assert api.call("POST", f"/api/pending/{p['id']}", {"decision": "approve"}).status == 200
        t.join(60)
        return p, out[0]
    finally:
        approver.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_proc_environ_of_the_shell_the_supervisor_and_the_bridge(served):
    for command in ("cat /proc/self/environ", "cat /proc/$PPID/environ"):
        p, r = _approved(served, command)
        # The path policy asks a human for any /proc/*/environ, even with bash at allow.
        assert p["escalation"] is not None and p["escalation"]["kind"] == "protected", p
        assert not r.result["isError"], (command, r.text)
        assert "PATH=" in r.text, (command, r.text)  # it really read an environment
        assert _leaks(r.text) == [], (command, r.text)
    # Outside the box the shell still has a PID namespace of its own: its parent is the
    # namespace's first process (bubblewrap), which holds the same scrubbed environment; the
    # supervisor and the bridge are not in it at all.
    _, r = _approved(served, "cat /proc/$PPID/cmdline | tr '\\0' ' '")
    assert "bwrap" in r.text and "--unshare-pid" in r.text, r.text
    # The bridge still holds the secrets: its pid names nothing in the call's /proc (and it is
    # non-dumpable besides: its environ would be root's).
    p, r = _approved(served, f"cat /proc/{served.proc.pid}/environ")
    assert p["escalation"] is not None and p["escalation"]["kind"] == "protected", p
    assert r.result["isError"], r.text
    assert _leaks(r.text) == []
    # A pid computed at run time is not seen by the path check; the OS still says no.
    _, r = _approved(served, f'p=/proc/{served.proc.pid}; cat "$p/environ"')
    assert r.result["isError"], r.text
    assert _leaks(r.text) == []


def test_upstream_stdio_server_gets_the_safe_list_and_its_own_env_only(served):
    wait_for(lambda: (served.state / "env.json").exists() or None, 30)
    env = json.loads((served.state / "env.json").read_text())
    assert _leaks(json.dumps(env)) == [], env
    assert "PATH" in env and "HOME" in env
    assert env.pop("OMP_A2A_TOOL") == "1"  # the marker the control API refuses
    assert not set(env) - SAFE_NAMES - {"PWD"} - {n for n in env if n.startswith("LC_")}, env
    # bash's additions are bash's: the upstream server does not get them.
    assert "GOPATH" not in env and "FOO" not in env
    # And the agent asking the server for its environment sees the same.
    r = served.client().call("mcp__t__env")
    assert _leaks(r.raw.decode()) == [], r


def test_nothing_secret_in_the_bridge_log(served):
    text = served.log.read_text()
    assert _leaks(text) == [], text[-2000:]
    # The glob-reached secret name is reported by name (never its value).
    assert "CARGO_REGISTRIES_CRATES_IO_TOKEN withheld" in text or (
        "CARGO_REGISTRIES_CRATES_IO_TOKEN" in text and "withheld" in text
    ), text[-2000:]


# -- the allow-list and the config, as units ----------------------------------------------------


def test_build_env_allow_list_globs_and_exact_names():
    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_TIME": "C",
        "GITHUB_TOKEN": "t",
        "GITHUB_USER": "u",
        "CARGO_HOME": "/c",
        "CARGO_REGISTRY_TOKEN": "t2",
        "GH_TOKEN": "t3",
        "A2A_BRIDGE_TOKEN": "x",
        "A2A_BRIDGE_OTHER": "y",
        "BASH_FUNC_f%%": "() { echo hi; }",
        "FUNCY": "() { evil; }",
        "HOLDS": "prefix-" + TOKEN,
        "DISPLAY": ":0",
    }
    spec = EnvSpec(passed=("GITHUB_*", "CARGO_*", "GH_TOKEN", "A2A_*", "FUNCY", "HOLDS", "*"))
    built = build_env(spec, TOKEN, environ)
    assert built.env == {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_TIME": "C",
        "GITHUB_USER": "u",
        "CARGO_HOME": "/c",
        "GH_TOKEN": "t3",  # listed exactly: the user's explicit choice
        "OMP_A2A_TOOL": "1",  # a tool child: the control API refuses it (control/peer.py)
    }
    assert set(built.withheld) == {"GITHUB_TOKEN", "CARGO_REGISTRY_TOKEN", "DISPLAY", "HOLDS"}
    # Nothing configured: the safe list alone.
    safe = {"PATH": "/bin", "HOME": "/h", "LC_TIME": "C", "OMP_A2A_TOOL": "1"}
    assert build_env(EnvSpec(), None, environ).env == safe
    # ``set`` is explicit and wins, but never with the token in it.
    built = build_env(EnvSpec(set={"PATH": "/x", "LEAK": TOKEN}), TOKEN, environ)
    assert built.env["PATH"] == "/x" and "LEAK" not in built.env and built.withheld == ("LEAK",)


@pytest.mark.parametrize(
    "name",
    ["GITHUB_TOKEN", "aws_region", "SSH_AUTH_SOCK", "OPENAI_API_KEY", "NPM_AUTH", "PGPASSWORD",
     "GOOGLE_APPLICATION_CREDENTIALS", "DBUS_SESSION_BUS_ADDRESS", "BW_SESSION", "KRB5CCNAME",
     "DISPLAY", "XAUTHORITY", "SENTRY_DSN", "DATABASE_URL", "GPG_AGENT_INFO"],
)  # fmt: skip
def test_secret_looking_names(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["GOPATH", "CARGO_HOME", "GITHUB_USER", "JAVA_HOME", "NODE_ENV"])
def test_ordinary_names(name):
    assert not looks_secret(name)


@pytest.mark.parametrize(
    ("bash", "message"),
    [
        ([], "field 'bash' must be an object"),
        ({"env": []}, "field 'bash.env' must be an object"),
        ({"env": {"passs": []}}, "unknown key 'bash.env.passs' (did you mean 'bash.env.pass'?)"),
        ({"env": {"pass": "GOPATH"}}, "field 'bash.env.pass' must be an array of variable names"),
        ({"env": {"pass": ["GO PATH"]}}, "field 'bash.env.pass' must be an array"),
        ({"env": {"pass": [""]}}, "field 'bash.env.pass' must be an array"),
        ({"env": {"set": {"FOO": 1}}}, "field 'bash.env.set' must be an object mapping"),
        ({"env": {"set": {"A=B": "x"}}}, "field 'bash.env.set' must be an object mapping"),
        ({"env": {"set": ["FOO"]}}, "field 'bash.env.set' must be an object mapping"),
        (
            {"env": {"pass": ["A2A_BRIDGE_TOKEN"]}},
            "field 'bash.env' must be free of the bridge's own A2A_BRIDGE_* variables",
        ),
        (
            {"env": {"set": {"a2a_bridge_x": "1"}}},
            "field 'bash.env' must be free of the bridge's own A2A_BRIDGE_* variables",
        ),
    ],
)
def test_bad_bash_env_config_fails_closed(bash, message):
    with pytest.raises(ConfigError) as e:
        parse_config("/x/config.json", {"bash": bash})
    assert str(e.value).startswith(f"invalid config at /x/config.json: {message}"), str(e.value)


def test_good_bash_env_config():
    cfg = parse_config("/x", {"bash": {"env": {"pass": ["GOPATH", "CARGO_*"], "set": {"A": ""}}}})
    assert cfg.bash_env == EnvSpec(("GOPATH", "CARGO_*"), {"A": ""})
    assert parse_config("/x", {}).bash_env == EnvSpec()
    assert parse_config("/x", {"bash": {}}).bash_env == EnvSpec()


def test_serve_refuses_a_bad_bash_env(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"bash": {"env": {"pass": ["OK", "not ok"]}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_BRIDGE_")}
    env.update(
        A2A_BRIDGE_CONFIG=str(config),
        A2A_BRIDGE_AUDIT=str(tmp_path / "audit.jsonl"),
        A2A_BRIDGE_LOG=str(tmp_path / "bridge.log"),
        A2A_BRIDGE_TOKEN=TOKEN,
        A2A_BRIDGE_RUNTIME_DIR=str(tmp_path / "run"),
    )
    p = serve_fails(env, timeout=60)
    assert p.returncode == 1, p
    assert f"invalid config at {config}: field 'bash.env.pass' must be" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
