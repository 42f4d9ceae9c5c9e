"""The bridge's side of bash's supervisor: what a request carries, and the helper's own
environment (the sockets and processes are tested in tests/security/test_bash_supervisor.py)."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.infra.childenv import TOOL_MARKER
from omp_a2a_bridge.server.tools.reaper import _box_fd, _parse
from omp_a2a_bridge.server.tools.supervisor import encode_request, helper_env


def test_a_request_carries_cwd_argv_and_environment_byte_exact():
    argv = ["/bin/bash", "-c", "echo 'a b'\n\tč", ""]  # an empty last word survives too
    env = {"PATH": "/usr/bin", "EMPTY": "", "EQ": "a=b"}
    cwd, got_argv, got_env = _parse(encode_request("/tmp/x y", argv, env))
    assert cwd == b"/tmp/x y"
    assert got_argv == [a.encode() for a in argv]
    assert got_env == [b"PATH=/usr/bin", b"EMPTY=", b"EQ=a=b"]


def test_a_boxed_request_names_the_descriptor_bubblewrap_reports_on():
    """The supervisor puts a pipe there and tells a box that never set up from a command
    that ran (``unstarted N``); a plain request has none."""
    argv = ["/usr/bin/bwrap", "--json-status-fd", "3", "--", "bash", "-c", "true"]
    payload = encode_request("/", argv, {"A": "1"}, box_fd=3)
    assert _box_fd(payload) == 3
    assert _parse(payload) == (b"/", [a.encode() for a in argv], [b"A=1"])
    assert _box_fd(encode_request("/", argv, {})) == -1


@pytest.mark.parametrize("head", [b"2:1", b"2:x", b"2:-3"])
def test_a_status_descriptor_over_stdio_or_garbled_is_a_bad_request(head):
    with pytest.raises(ValueError):
        _box_fd(head + b"\0/\0a\0b")


def test_an_undecodable_file_name_travels_as_its_bytes():
    name = b"caf\xe9".decode("utf-8", "surrogateescape")  # a Latin-1 name on a UTF-8 system
    _, argv, _ = _parse(encode_request("/", ["/bin/ls", name], {}))
    assert argv[1] == b"caf\xe9"


@pytest.mark.parametrize(
    ("argv", "env", "cwd"),
    [
        (["/bin/bash", "-c", "echo a\0b"], {}, "/"),  # NUL: no program can receive it
        (["/bin/bash"], {"A": "x\0y"}, "/"),
        (["/bin/bash"], {}, "/tm\0p"),
        (["/bin/bash", "-c", "echo \ud800"], {}, "/"),  # a lone surrogate has no bytes
        (["/bin/bash"], {"A=B": "x"}, "/"),  # a name with '='
        (["/bin/bash"], {"": "x"}, "/"),
        ([], {}, "/"),
    ],
)
def test_what_no_program_can_receive_is_refused_before_anything_starts(argv, env, cwd):
    with pytest.raises(ValueError):
        encode_request(cwd, argv, env)


def test_the_helper_keeps_only_safe_names_the_call_agrees_with(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    call = {"HOME": "/home/u", "GITHUB_TOKEN": "ghp_secret", "FOO": "bar"}  # LANG withheld
    env = helper_env(call)
    assert env == {"HOME": "/home/u", TOOL_MARKER: "1"}
