"""The Landlock scope a box with network starts under (server/box/scope.py), on this kernel."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys

import pytest

from omp_a2a_bridge.server.box import scope

CONNECT = (
    "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect('\\0' + sys.argv[1]);"
    " print(s.recv(9).decode())"
)


def _need_scopes() -> None:
    if scope.abi() < scope.SCOPE_ABI:
        message = f"Landlock scopes need Linux 6.12 (ABI 6); this kernel has {scope.abi()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_a_scoped_program_cannot_reach_an_abstract_socket_made_outside_it():
    _need_scopes()
    name = f"a2a-scope-{secrets.token_hex(4)}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(2)
    try:
        plain = subprocess.Popen([sys.executable, "-c", CONNECT, name], stdout=subprocess.PIPE)
        conn, _ = server.accept()
        conn.sendall(b"reached\n")
        conn.close()
        assert plain.communicate(timeout=60)[0].decode().strip() == "reached"
        argv = [sys.executable, "-I", "-S", scope.__file__, sys.executable, "-c", CONNECT, name]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and "PermissionError" in done.stderr, done
    finally:
        server.close()


def test_the_script_refuses_to_run_nothing():
    done = subprocess.run([sys.executable, "-I", "-S", scope.__file__], capture_output=True)
    assert done.returncode != 0 and b"usage" in done.stderr
