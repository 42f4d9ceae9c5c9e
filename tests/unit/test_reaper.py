"""The supervisor script's pure parts (its processes: tests/security/test_bash_supervisor.py)."""

from __future__ import annotations

import signal

import pytest

from omp_a2a_bridge.server.tools.reaper import RESTORED, Supervisor, _parse


@pytest.mark.parametrize(
    "payload",
    [b"", b"x", b"0\0/", b"2\0/\0only-one", b"-1\0/\0a"],
)
def test_a_garbled_request_is_refused(payload):
    with pytest.raises(ValueError):
        _parse(payload)


def test_an_environment_entry_without_a_name_is_refused():
    with pytest.raises(ValueError):
        Supervisor((-1, -1, -1), b"/", [b"/bin/true"], [b"=x"], subreaper=False)
    with pytest.raises(ValueError):
        Supervisor((-1, -1, -1), b"/", [b"/bin/true"], [b"NOVALUE"], subreaper=False)
    sup = Supervisor((-1, -1, -1), b"/", [b"/bin/true"], [b"A=b=c", b"E="], subreaper=False)
    assert sup.env == {b"A": b"b=c", b"E": b""}


def test_the_signals_python_ignores_are_given_back_to_the_shell():
    assert signal.SIGPIPE in RESTORED and signal.SIGXFSZ in RESTORED
