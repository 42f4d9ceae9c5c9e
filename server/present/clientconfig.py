"""Per-client setup recipes: the exact command or config snippet each MCP client needs.

One pure function per client, so ``a2a-bridge client-config --for X``, the docs page
``docs/guide/clients.md`` (a test checks it is this module's output) and the interop suite
(which runs the Claude Code and Gemini CLI commands for real) all come from the same code.

Where a client expands an environment variable in its config, the recipe uses
``A2A_BRIDGE_TOKEN`` instead of the literal token, so the token lives in the user's environment
(or keyring-backed shell profile) rather than in a file the client may sync or share.
"""

from __future__ import annotations

import enum
import json
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

SERVER_NAME = "omp-host"
TOKEN_ENV = "A2A_BRIDGE_TOKEN"


class ClientKind(enum.StrEnum):
    CLAUDE_CODE = "claude-code"
    GEMINI = "gemini"
    CODEX = "codex"
    VSCODE = "vscode"
    CURSOR = "cursor"
    CLAUDE_DESKTOP = "claude-desktop"
    GENERIC = "generic"  # the plain ``mcpServers`` snippet most clients accept


@dataclass(frozen=True, slots=True)
class Recipe:
    """What to do for one client: a shell command to run, or a file and what to put in it."""

    client: ClientKind
    title: str
    where: str  # "run" for a command, else the config file to edit
    text: str  # the command or the snippet, exactly
    lang: str  # "bash", "json" or "toml": how the docs page fences it
    env: str | None  # "export A2A_BRIDGE_TOKEN=...": where the client expands the variable

    def render(self) -> str:
        """The plain-text form ``client-config --for`` prints."""
        lines = []
        if self.env is not None:
            lines.append(f"# in the environment the client runs in ({self.title} reads it):")
            lines.append(self.env)
        if self.where != "run":
            lines.append(f"# add to {self.where}")
        lines.append(self.text)
        return "\n".join(lines)


# VS Code's file is the *project's* (``.vscode/mcp.json``): inside the folder the agents work
# on, and often committed. The token never goes there: the entry names an input, which VS Code
# asks the human for once and keeps in its secret storage.
VSCODE_INPUT_ID = "omp-a2a-bridge-token"
VSCODE_INPUT = {
    "type": "promptString",
    "id": VSCODE_INPUT_ID,
    "description": "omp A2A bridge token (run: a2a-bridge token show)",
    "password": True,
}


def snippet(url: str, token: str, name: str = SERVER_NAME) -> dict[str, Any]:
    """The generic snippet a remote agent's MCP config needs (protocol.md §7): what
    ``a2a-bridge client-config``, ``GET /api/client-config`` and the tray's *Copy client
    config* give."""
    return {
        "mcpServers": {
            name: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
        }
    }


def _auth(token: str) -> str:
    return f"Authorization: Bearer {token}"


def recipe(kind: ClientKind, url: str, token: str) -> Recipe:
    """The recipe for ``kind`` pointing at ``url``; ``token`` is the literal bearer token."""
    name = SERVER_NAME
    env = f"export {TOKEN_ENV}={shlex.quote(token)}"
    if kind is ClientKind.CLAUDE_CODE:
        argv = ["claude", "mcp", "add", "--scope", "user", "--transport", "http", name, url]
        cmd = shlex.join([*argv, "--header", _auth(token)])
        return Recipe(kind, "Claude Code", "run", cmd, "bash", None)
    if kind is ClientKind.GEMINI:
        # Single quotes keep the variable for Gemini CLI, which expands it when it loads settings.
        header = f"'Authorization: Bearer ${TOKEN_ENV}'"
        argv = ["gemini", "mcp", "add", "--scope", "user", "--transport", "http", name, url]
        cmd = f"{shlex.join(argv)} --header {header}"
        return Recipe(kind, "Gemini CLI", "run", cmd, "bash", env)
    if kind is ClientKind.CODEX:
        text = (
            f'[mcp_servers.{name}]\nurl = {json.dumps(url)}\nbearer_token_env_var = "{TOKEN_ENV}"'
        )
        return Recipe(kind, "OpenAI Codex", "~/.codex/config.toml", text, "toml", env)
    if kind is ClientKind.VSCODE:
        ref = f"Bearer ${{input:{VSCODE_INPUT_ID}}}"  # the project's file: never the token
        cfg = {
            "inputs": [VSCODE_INPUT],
            "servers": {name: {"type": "http", "url": url, "headers": {"Authorization": ref}}},
        }
        return Recipe(
            kind, "VS Code", ".vscode/mcp.json (or the user mcp.json)", _json(cfg), "json", None
        )
    if kind is ClientKind.CURSOR:
        cfg = {"mcpServers": {name: {"url": url, "headers": {"Authorization": f"Bearer {token}"}}}}
        return Recipe(kind, "Cursor", "~/.cursor/mcp.json", _json(cfg), "json", None)
    if kind is ClientKind.GENERIC:
        return Recipe(
            kind,
            "Any other client",
            "the client's MCP config",
            _json(snippet(url, token)),
            "json",
            None,
        )
    # Claude Desktop speaks stdio to local servers: mcp-remote bridges it to the HTTP endpoint.
    # The header value goes through env, as mcp-remote documents (no spaces in args).
    cfg = {
        "mcpServers": {
            name: {
                "command": "npx",
                "args": ["-y", "mcp-remote", url, "--header", "Authorization:${A2A_AUTH}"],
                "env": {"A2A_AUTH": f"Bearer {token}"},
            }
        }
    }
    return Recipe(kind, "Claude Desktop", "claude_desktop_config.json", _json(cfg), "json", None)


def _json(value: object) -> str:
    return json.dumps(value, indent=2)


def ssh_tunnel(url: str, target: str) -> tuple[str, str]:
    """The tunnel command (run here) and the URL a client on ``target`` then uses.

    ``ssh -R`` from this machine makes ``127.0.0.1:<port>`` on the remote machine reach the
    bridge here, which stays bound to loopback; nothing listens on a public interface.
    """
    port = urlsplit(url).port or 80
    cmd = shlex.join(["ssh", "-N", "-R", f"127.0.0.1:{port}:127.0.0.1:{port}", target])
    return cmd, f"http://127.0.0.1:{port}/"


def render(kind: ClientKind, url: str, token: str, ssh: str | None = None) -> str:
    """What ``a2a-bridge client-config --for KIND [--ssh user@host]`` prints."""
    if ssh is None:
        return recipe(kind, url, token).render()
    cmd, remote_url = ssh_tunnel(url, ssh)
    r = recipe(kind, remote_url, token)
    return "\n".join(
        [
            "# 1. on this machine: keep this tunnel open (Ctrl-C ends it)",
            cmd,
            f"# 2. on {ssh}: {r.title}",
            r.render(),
        ]
    )


# -- the docs page section --------------------------------------------------------------------

README_URL = "http://127.0.0.1:53917/"
README_TOKEN = "<token>"
README_BEGIN = "<!-- client-recipes: generated by server/present/clientconfig.py; do not edit -->"
README_END = "<!-- /client-recipes -->"


def readme_section() -> str:
    """The generated part of docs/guide/clients.md (tests/integration/test_client_config.py checks
    it)."""
    out = [README_BEGIN]
    for kind in ClientKind:
        r = recipe(kind, README_URL, README_TOKEN)
        where = "run" if r.where == "run" else f"add to `{r.where}`"
        env = f"; `{r.env}` where it runs" if r.env else ""
        out += [
            "",
            f"**{r.title}** (`--for {kind.value}`): {where}{env}",
            "",
            f"```{r.lang}",
            r.text,
            "```",
        ]
    out += ["", README_END]
    return "\n".join(out)
