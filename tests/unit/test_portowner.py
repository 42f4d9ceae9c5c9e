"""server/core/portowner.py: the sockets bound to a port, read from a /proc/net/tcp text."""

from __future__ import annotations

from omp_a2a_bridge.server.core.portowner import socket_inodes
from omp_a2a_bridge.server.core.startup import busy_line

TABLE = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 777 1
   2: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1
   3: 0100007F:1F91 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 0 1
"""


def test_the_listening_socket_comes_first():
    assert socket_inodes(TABLE, 8080) == [4242, 777]
    assert socket_inodes(TABLE, 80) == [99]
    assert socket_inodes(TABLE, 8081) == []  # inode 0: the kernel does not say
    assert socket_inodes("header only\n", 8080) == []


def test_the_line_names_the_port_the_holder_and_who_chose_it():
    line = busy_line(8080, "--port", "nginx (pid 812)")
    assert line.startswith("port 8080 is already in use by nginx (pid 812); --port chose it")
    assert "does not move it" in busy_line(8080, "'port' in /c.json", None)
    assert "the OS does not say by whom" in busy_line(8080, "--port", None)
