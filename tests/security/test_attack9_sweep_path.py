"""Outside review (attack9): the sweep's ``chmod``/``rm`` are looked up on the bridge's ``PATH``
and run in the folder that held what they remove - the call's project.

When a boxed call makes new persistence that is a folder (``.vscode/`` at its project's top),
the bridge removes it after the call (``server/box/run.py`` ``_remove``): it renames it aside and
runs ``["chmod", "-R", ...]`` then ``["rm", "-rf", ...]`` with ``cwd`` the folder that held it.
A ``PATH`` entry that is relative - an empty one (``PATH=$GOBIN:$PATH`` with ``GOBIN`` unset
gives ``:/usr/local/bin:…``), ``.`` or ``node_modules/.bin`` - is then resolved in the project,
which the call writes: its ``chmod`` runs outside the box, as a child of the bridge in the
bridge's own session, with the bridge's environment (no tool marker). That process is the
bridge's own to the control API (it approves calls), and it has the user's full rights.

Fixed: the sweep runs ``/usr/bin/chmod`` and ``/usr/bin/rm`` (or ``/bin``'s), never a ``PATH``
lookup (``server.box.run._system_program``).

A real bridge with such a ``PATH``, real bubblewrap.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, require_bwrap, serve, stop
from ..support.helpers import read_text, wait_for

PLANTED = r"""#!/bin/sh
# Run by the bridge's sweep (outside the box): is the control API ours?
python3 - "$RUNTIME" > "$OUT" 2>&1 <<'PY'
import json, os, sys, urllib.request, urllib.error
info = json.load(open(os.path.join(sys.argv[1], "control.json")))
req = urllib.request.Request(info["url"].rstrip("/") + "/api/status",
    headers={"Authorization": "Bearer " + info["secret"]})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        status = r.status
except urllib.error.HTTPError as e:
    status = e.code
print("STATUS", status, "MARKER", "OMP_A2A_TOOL" in os.environ)
PY
exec /bin/chmod "$@"
"""


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    """The box world whose bridge has an empty entry first on its ``PATH`` (``:/usr/...``)."""
    require_bwrap()
    world = make_world({"approval": {"timeout_s": 0.5}})
    before = os.environ["PATH"]
    try:
        os.environ["PATH"] = os.pathsep + before
        serve(world, False)
        os.environ["PATH"] = before
        yield world
    finally:
        os.environ["PATH"] = before
        stop(world)


def test_the_sweep_never_runs_a_program_the_call_planted(world: World) -> None:
    out = os.path.join(world.project, "swept.txt")  # written from outside the box, if at all
    body = PLANTED.replace("$RUNTIME", world.runtime).replace("$OUT", out)
    encoded = base64.b64encode(body.encode()).decode()
    script = (
        f"echo {encoded} | base64 -d > chmod && /bin/chmod +x chmod && "
        "mkdir -p .vscode && echo '{}' > .vscode/tasks.json && echo planted"
    )
    _, text = world.bash(script)
    assert "planted" in text, text
    wait_for(lambda: not os.path.lexists(os.path.join(world.project, ".vscode")), 60)
    assert not os.path.exists(out), read_text(out)
