"""A client config the bridge installed never hands its token to an agent.

``client-config --for X --install`` writes the token into X's config file (nothing guarantees
the client's shell exports it). Found in the outside review: VS Code's file is the *project's*
``.vscode/mcp.json`` — inside the folder the agents work on (and often committed) — so any
agent, from any machine, read the bridge's own token there with an allowed ``read`` and became
machine ``default`` (revoking its machine no longer cut it). And the home files of Codex and
Gemini CLI that now hold the token were not protected locations: an agent asked to read them
was shown to the human as an ordinary read outside the roots.
"""

from __future__ import annotations

import json
import os

from omp_a2a_bridge.server.policy.judge import Ruling
from omp_a2a_bridge.server.policy.protected import EscalationKind
from omp_a2a_bridge.server.present.clientconfig import ClientKind
from omp_a2a_bridge.server.present.clientwriters import TARGETS

from ..support.helpers import TOKEN, Mcp, in_thread


def _added(cli, name: str) -> str:
    r = cli("machines", "add", name, "--json")
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["token"])


def test_the_project_file_never_holds_the_token(start_bridge, cli, memory_keyring, monkeypatch):
    tiers = {"read": "allow", "grep": "allow"}
    running = start_bridge({"approval": {"tiers": tiers}}, control=True)
    root = running.env["root"]
    monkeypatch.chdir(root)  # VS Code's file is the project's: where the agents work
    r = cli("client-config", "--for", "vscode", "--install")
    assert r.returncode == 0, r.stderr
    assert TOKEN not in r.stdout + r.stderr
    path = os.path.join(root, ".vscode", "mcp.json")
    with open(path) as f:
        text = f.read()
    assert TOKEN not in text
    doc = json.loads(text)
    entry = doc["servers"]["omp-host"]
    # VS Code asks the human once and keeps it in its secret storage
    [ref] = [i for i in doc["inputs"] if i["id"] == "omp-a2a-bridge-token"]
    assert ref["type"] == "promptString" and ref["password"] is True
    assert entry["headers"]["Authorization"] == "Bearer ${input:omp-a2a-bridge-token}"
    assert "token show" in r.stdout  # where the human finds what to paste
    # the attack: an agent of another machine reads the project folder
    laptop = Mcp(running.port, token=_added(cli, "laptop"), client="agent")
    laptop.initialize()
    read = laptop.call("read", {"path": ".vscode/mcp.json"})
    found = laptop.call("grep", {"pattern": "Bearer", "path": "."})
    assert TOKEN not in read.text and TOKEN not in found.text
    # installing again changes nothing, and keeps the human's other inputs and servers
    doc["inputs"].append({"type": "promptString", "id": "mine", "description": "x"})
    doc["servers"]["docs"] = {"type": "stdio", "command": "docs"}
    with open(path, "w") as f:
        json.dump(doc, f)
    r = cli("client-config", "--for", "vscode", "--install")
    assert r.returncode == 0 and "already up to date" in r.stdout, r.stdout
    with open(path) as f:
        again = json.load(f)
    assert [i["id"] for i in again["inputs"]] == ["omp-a2a-bridge-token", "mine"]
    assert again["servers"]["docs"] == {"type": "stdio", "command": "docs"}


def test_every_home_file_install_writes_a_token_into_is_protected(start_bridge):
    """Walked from the writers' own table: a client added tomorrow is covered too."""
    running = start_bridge({"approval": {"tiers": {"read": "allow"}}})
    home = os.path.expanduser("~")
    checked = []
    for kind, target in TARGETS.items():
        if not target.path.startswith("~/"):
            continue
        full = os.path.join(home, target.path[2:])
        j = running.runner.test_rule("read", {"path": full})
        assert j.ruling is not Ruling.RUN, (kind, j)
        assert j.escalation is not None and j.escalation.always_asks, (kind, j)
        assert j.escalation.kind in (EscalationKind.PROTECTED, EscalationKind.OWN_FILE), kind
        checked.append(kind)
    assert {ClientKind.CODEX, ClientKind.GEMINI, ClientKind.CLAUDE_CODE} <= set(checked)


def test_a_fifo_where_the_config_goes_is_refused_without_blocking(env, cli, monkeypatch):
    """``.vscode/mcp.json`` is the project's: whoever shares the folder may plant a FIFO there.
    The install says so in one line instead of waiting for a writer forever."""
    from ..conftest import write_config

    write_config(env["config"], {"roots": [env["root"]], "port": 41234})
    project = env["root"]
    os.makedirs(os.path.join(project, ".vscode"))
    fifo = os.path.join(project, ".vscode", "mcp.json")
    os.mkfifo(fifo, 0o600)
    monkeypatch.chdir(project)
    t, out = in_thread(cli, "client-config", "--for", "vscode", "--install")
    t.join(60)
    if t.is_alive():  # the hole: release the blocked open, then fail
        fd = os.open(fifo, os.O_WRONLY)
        os.close(fd)
        t.join(30)
        raise AssertionError("client-config --install blocked on a FIFO")
    r = out[0]
    assert r.returncode == 1 and "not a regular file" in r.stderr, r
    assert "Traceback" not in r.stderr
