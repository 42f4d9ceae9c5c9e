"""``a2a-bridge client-config --for X [--ssh user@host]`` and the recipes made from it on the
docs page ``docs/guide/clients.md``.

The recipes are checked for what each client parses (JSON, TOML, a shell command line); the
interop suite (tests/interop) runs the Claude Code and Gemini CLI commands for real.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from omp_a2a_bridge.server.present import clientconfig as cc
from omp_a2a_bridge.server.present.clientconfig import ClientKind

from ..conftest import write_config
from ..support.helpers import TOKEN

URL = "http://127.0.0.1:41234/"
# The generated recipes live on the docs site's client page (they were in README.md until the
# README became a landing page).
CLIENTS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "clients.md"


def test_claude_code_is_one_command_with_the_header():
    r = cc.recipe(ClientKind.CLAUDE_CODE, URL, TOKEN)
    assert r.where == "run" and r.env is None
    assert shlex.split(r.text) == [
        "claude", "mcp", "add", "--scope", "user", "--transport", "http", "omp-host", URL,
        "--header", f"Authorization: Bearer {TOKEN}",
    ]  # fmt: skip


def test_gemini_keeps_the_variable_for_the_client_to_expand():
    r = cc.recipe(ClientKind.GEMINI, URL, TOKEN)
    argv = shlex.split(r.text)
    assert argv[:8] == [
        "gemini",
        "mcp",
        "add",
        "--scope",
        "user",
        "--transport",
        "http",
        "omp-host",
    ]
    assert argv[8:] == [URL, "--header", "Authorization: Bearer $A2A_BRIDGE_TOKEN"]
    assert TOKEN not in r.text
    assert r.env == f"export A2A_BRIDGE_TOKEN={TOKEN}"


def test_codex_toml_reads_the_token_from_the_environment():
    r = cc.recipe(ClientKind.CODEX, URL, TOKEN)
    assert tomllib.loads(r.text) == {
        "mcp_servers": {"omp-host": {"url": URL, "bearer_token_env_var": "A2A_BRIDGE_TOKEN"}}
    }
    assert TOKEN not in r.text and r.where == "~/.codex/config.toml"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (
            ClientKind.VSCODE,
            {
                "servers": {
                    "omp-host": {
                        "type": "http",
                        "url": URL,
                        "headers": {"Authorization": f"Bearer {TOKEN}"},
                    }
                }
            },
        ),
        (
            ClientKind.CURSOR,
            {
                "mcpServers": {
                    "omp-host": {"url": URL, "headers": {"Authorization": f"Bearer {TOKEN}"}}
                }
            },
        ),
        (
            ClientKind.CLAUDE_DESKTOP,
            {
                "mcpServers": {
                    "omp-host": {
                        "command": "npx",
                        "args": ["-y", "mcp-remote", URL, "--header", "Authorization:${A2A_AUTH}"],
                        "env": {"A2A_AUTH": f"Bearer {TOKEN}"},
                    }
                }
            },
        ),
    ],
)
def test_json_snippets(kind, expected):
    assert json.loads(cc.recipe(kind, URL, TOKEN).text) == expected


def test_ssh_prints_a_reverse_tunnel_and_the_remote_config():
    out = cc.render(ClientKind.CLAUDE_CODE, URL, TOKEN, ssh="dev@build-box")
    lines = out.splitlines()
    assert "ssh -N -R 127.0.0.1:41234:127.0.0.1:41234 dev@build-box" in lines
    assert any(line.startswith("claude mcp add") and URL in line for line in lines)
    # A target that looks like an option or carries shell syntax is quoted, never run as one.
    odd = cc.render(ClientKind.CURSOR, URL, TOKEN, ssh="a b;rm -rf ~")
    assert "ssh -N -R 127.0.0.1:41234:127.0.0.1:41234 'a b;rm -rf ~'" in odd


def test_the_clients_page_is_the_generators_output():
    text = CLIENTS_PAGE.read_text(encoding="utf-8")
    m = re.search(re.escape(cc.README_BEGIN) + r".*?" + re.escape(cc.README_END), text, re.S)
    assert m is not None, "docs/guide/clients.md lacks the generated client recipes"
    assert m.group(0) == cc.readme_section(), (
        "docs/guide/clients.md is stale: paste `python -c 'from "
        "omp_a2a_bridge.server.present.clientconfig import readme_section; "
        "print(readme_section())'`"
    )


@pytest.mark.reveals_token
def test_cli_for_each_client_and_ssh(env, monkeypatch, cli):
    write_config(env["config"], {"roots": [env["root"]], "port": 41234})

    def run(*args: str) -> str:
        r = cli("client-config", *args)
        assert r.returncode == 0, r.stderr
        return r.stdout

    for kind in ClientKind:
        assert run("--for", kind.value).rstrip("\n") == cc.render(kind, URL, TOKEN)
    assert run("--for", "gemini", "--ssh", "me@host").rstrip("\n") == cc.render(
        ClientKind.GEMINI, URL, TOKEN, "me@host"
    )
    plain = run("--ssh", "me@host")
    assert plain.splitlines()[1] == "ssh -N -R 127.0.0.1:41234:127.0.0.1:41234 me@host"
    assert json.loads(plain.split("config\n", 1)[1])["mcpServers"]["omp-host"]["url"] == URL
    bad = cli("client-config", "--for", "notepad")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
