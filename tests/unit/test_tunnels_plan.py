"""server/tunnels/plan.py: the tunnel's ssh command line, its back-off, its state machine and
the config entry, without ssh (tests/integration/test_tunnels.py runs them for real)."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.present.clientconfig import ClientKind
from omp_a2a_bridge.server.tunnels import plan
from omp_a2a_bridge.server.tunnels.install import READ_SCRIPT, WRITE_SCRIPT, remote_argv
from omp_a2a_bridge.server.tunnels.plan import (
    Status,
    TunnelError,
    TunnelSpec,
    backoff,
    check_spec,
    default_name,
    error_line,
    parse_tunnels,
    ssh_argv,
)
from omp_a2a_bridge.server.vocab import TunnelState

SPEC = TunnelSpec("build", "dev@build-box", 43000, ClientKind.CLAUDE_CODE)


def test_the_ssh_command_line_forwards_the_remote_loopback_port_to_the_live_port():
    argv = ssh_argv(SPEC, 53917)
    assert argv[0] == "ssh" and "-N" in argv
    assert argv[argv.index("-R") + 1] == "127.0.0.1:43000:127.0.0.1:53917"
    options = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {
        "ExitOnForwardFailure=yes",
        "ServerAliveInterval=15",
        "ServerAliveCountMax=3",
        "BatchMode=yes",
    } <= options
    _confined(argv)
    # the target comes last, after '--': a target can never be read as an option
    assert argv[-2:] == ["--", "dev@build-box"]
    assert "-F" not in argv  # the user's own ~/.ssh/config


def _confined(argv: list[str]) -> None:
    """The app's ssh hands the remote nothing the user's config would: no agent, no X11, no
    tun device, no shared (persisting) connection."""
    options = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert "-a" in argv and "-x" in argv
    assert {
        "ForwardAgent=no",
        "ForwardX11=no",
        "Tunnel=no",
        "ControlMaster=no",
        "ControlPath=none",
    } <= options
    assert argv.index("-a") < argv.index("--")


def test_an_ssh_config_file_is_passed_with_dash_f():
    argv = ssh_argv(SPEC, 1, ssh_config="/tmp/cfg")
    assert argv[argv.index("-F") + 1] == "/tmp/cfg"


def test_the_port_in_the_command_is_the_live_one_each_time():
    assert "127.0.0.1:43000:127.0.0.1:1111" in ssh_argv(SPEC, 1111)
    assert "127.0.0.1:43000:127.0.0.1:2222" in ssh_argv(SPEC, 2222)


def test_backoff_doubles_up_to_a_cap():
    assert [backoff(n) for n in range(0, 9)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff(10_000) == plan.BACKOFF_CAP_S


def test_the_state_machine_counts_failures_and_resets_after_a_stable_period():
    s = Status().started(0.0)
    assert s.state is TunnelState.CONNECTING and s.attempts == 1
    s, delay = s.ended(1.0, "Connection refused")
    assert (s.state, s.last_error, delay) == (TunnelState.DOWN, "Connection refused", 1)
    assert s.retry_at == 2
    s, delay = s.started(2.0).ended(3.0, "again")
    assert delay == 2 and s.failures == 2
    s = s.started(5.0).forwarded(6.0)
    assert s.state is TunnelState.UP and s.last_error is None
    s, delay = s.ended(10.0, "short-lived")  # up 4 s: not stable, the count goes on
    assert delay == 4 and s.failures == 3
    s = s.started(14.0).forwarded(15.0)
    s, delay = s.ended(15.0 + plan.STABLE_S, "dropped after a long run")
    assert delay == 1 and s.failures == 1  # stable for STABLE_S: back to the first step
    assert s.attempts == 4


def test_a_restart_skips_the_backoff_and_keeps_the_reason():
    s, _ = Status().started(0).ended(1, "x")
    s = s.restarted(2, "following the bridge to port 9")
    assert s.failures == 0 and s.retry_at is None and s.last_error.startswith("following")


def test_error_line_is_ssh_last_words_made_safe_and_short():
    lines = [
        "OpenSSH_9.2p1 Debian",
        "debug1: Reading configuration data",
        "Permission denied (publickey).",
        "debug1: some debug",
    ]
    assert error_line(lines, 255) == "Permission denied (publickey)."
    assert error_line(["debug1: only debug"], 255) == "ssh exited with status 255"
    assert error_line(["Permission denied (publickey)."], -9) == "ssh was killed by signal 9"
    noise = ['Authenticated to h ([127.0.0.1]:22) using "publickey".', "Transferred: sent 1"]
    assert error_line(noise, 255) == "ssh exited with status 255"
    evil = error_line(["\x1b[31mred\x1b]0;title\x07 " + "x" * 500], 1)
    assert "\x1b" not in evil and "\x07" not in evil
    assert len(evil) <= plan.ERROR_MAX_CHARS


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("dev@build-box", "build-box"),
        ("build-box", "build-box"),
        ("me@10.0.0.7", "10-0-0-7"),
        ("me@[::1]", "1"),
        ("me@Build.Example.COM", "build-example-com"),  # a machine name: what --install enrolls
        ("me@default", "default-host"),  # never the bridge's own token
        ("me@" + "a" * 40 + ".example", "a" * 32),
        ("me@--.x", "x"),
    ],
)
def test_the_default_name_is_the_host_part(target, name):
    assert default_name(target) == name


@pytest.mark.parametrize(
    "target",
    ["-oProxyCommand=evil", "a b", "me@host;rm", "me@host$(x)", "", "me@", "@host", "a\nb"],
)
def test_targets_that_could_be_options_or_shell_are_refused(target):
    with pytest.raises(TunnelError, match="ssh target"):
        check_spec("x", target, 4000)


@pytest.mark.parametrize(
    ("name", "port", "client", "match"),
    [
        ("-x", 4000, None, "tunnel name"),
        ("a" * 64, 4000, None, "tunnel name"),
        ("build.example.com", 4000, None, "machine's name"),
        ("Laptop", 4000, None, "machine's name"),
        ("ok", 0, None, "remote_port"),
        ("ok", 70000, None, "remote_port"),
        ("ok", True, None, "remote_port"),
        ("ok", "4000", None, "remote_port"),
        ("ok", 4000, "vscode", "client must be one of"),
    ],
)
def test_bad_entries_are_refused_with_what_is_wrong(name, port, client, match):
    with pytest.raises(TunnelError, match=match):
        check_spec(name, "me@host", port, client)


def test_the_config_entries_round_trip_and_names_are_unique():
    raw = [SPEC.to_json(), {"name": "b", "target": "b", "remote_port": 5}]
    assert parse_tunnels(raw) == (SPEC, TunnelSpec("b", "b", 5, None))
    assert parse_tunnels(None) == ()
    with pytest.raises(TunnelError, match="two tunnels"):
        parse_tunnels([SPEC.to_json(), SPEC.to_json()])
    with pytest.raises(TunnelError, match="each tunnel"):
        parse_tunnels([{**SPEC.to_json(), "token": "x"}])
    with pytest.raises(TunnelError, match="array"):
        parse_tunnels({"name": "x"})


def test_the_remote_install_commands_name_the_file_never_its_content():
    """The token goes through ssh's stdin: the command lines carry only the fixed script and
    the file's place under $HOME."""
    for script in (READ_SCRIPT, WRITE_SCRIPT):
        argv = remote_argv("dev@box", script, ".claude.json", None)
        assert argv[argv.index("--") + 1] == "dev@box"
        remote = argv[-1]
        assert remote.startswith("sh -c '") and remote.endswith(" sh .claude.json")
        assert "BatchMode=yes" in argv
        assert "ClearAllForwardings=yes" in argv  # not even the user's own forwards
        _confined(argv)
    assert "umask 077" in WRITE_SCRIPT and "mv -f" in WRITE_SCRIPT


def test_switches_the_config_could_turn_on_are_off_on_the_command_line():
    """One-value switches: the command line is read first, so its value wins over the config's
    (forwards add up instead: tests/unit/test_tunnels_sshconfig.py)."""
    argv = ssh_argv(SPEC, 1)
    options = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {"PermitLocalCommand=no", "GatewayPorts=no", "ClearAllForwardings=no"} <= options
    assert "-T" in argv and argv.index("-T") < argv.index("--")
    # options of newer OpenSSH builds only when this ssh knows them (an unknown -o is fatal)
    assert not any(o.startswith(("ForkAfterAuthentication", "GSSAPI")) for o in options)
    known = frozenset({"forkafterauthentication", "gssapidelegatecredentials"})
    argv = ssh_argv(SPEC, 1, known=known)
    options = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {"ForkAfterAuthentication=no", "GSSAPIDelegateCredentials=no"} <= options


def test_the_install_sessions_run_their_command_with_their_stdin():
    plain = remote_argv("dev@box", WRITE_SCRIPT, ".claude.json", None)
    assert not any(a.startswith(("SessionType", "StdinNull")) for a in plain)
    known = frozenset({"sessiontype", "stdinnull", "forkafterauthentication"})
    argv = remote_argv("dev@box", WRITE_SCRIPT, ".claude.json", "/p/config", known)
    options = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {"SessionType=default", "StdinNull=no", "ForkAfterAuthentication=no"} <= options
    assert argv[argv.index("-F") + 1] == "/p/config"
    _confined(argv)


def test_the_check_runs_ssh_g_on_the_same_command_line_without_debug_output():
    argv = ssh_argv(SPEC, 53917, "/p/config")
    check = plan.check_argv(argv)
    assert check[:2] == ["ssh", "-G"] and "-v" not in check
    assert [a for a in argv if a != "-v"][1:] == check[2:]
