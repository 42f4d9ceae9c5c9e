"""The box alone, for ``bench.bash``: runs the argv it is sent (one JSON list per line) and
answers with its output, nothing else.

Why a process of its own: bubblewrap's process in the PID namespace is reaped by whoever
adopts it when ``bwrap`` exits, so its CPU is counted only below a child subreaper; this one is
one (like the bridge's supervisors), and reaps every orphan. ``posix_spawn`` keeps its own
share small; the bench reports it apart (the "server process" column).

    python -I -S bench/launcher.py
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

PR_SET_CHILD_SUBREAPER = 36


def main() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for line in sys.stdin:
        argv = json.loads(line)
        r, w = os.pipe()
        actions = [(os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_CLOSE, r)]
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
        os.close(w)
        out = b""
        while chunk := os.read(r, 65536):
            out += chunk
        os.close(r)
        os.waitpid(pid, 0)
        while True:  # the orphans it adopted (bwrap's process in the box's PID namespace)
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        sys.stdout.write(json.dumps(out.decode(errors="replace")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
