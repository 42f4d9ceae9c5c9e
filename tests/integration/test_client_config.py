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
                "inputs": [cc.VSCODE_INPUT],  # the project's file: VS Code asks for the token
                "servers": {
                    "omp-host": {
                        "type": "http",
                        "url": URL,
                        "headers": {"Authorization": "Bearer ${input:omp-a2a-bridge-token}"},
                    }
                },
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


# -- client-config --for X --install: the file written, merged, private ---------------------------


@pytest.mark.parametrize(
    ("kind", "rel"),
    [
        ("claude-code", ".claude.json"),
        ("gemini", ".gemini/settings.json"),
        ("codex", ".codex/config.toml"),
        ("cursor", ".cursor/mcp.json"),
        ("generic", ".config/omp-a2a-bridge/mcp.json"),
    ],
)
def test_install_writes_the_clients_file_merged_and_private(
    env, cli, tmp_path, monkeypatch, kind, rel
):
    write_config(env["config"], {"roots": [env["root"]], "port": 41234})
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    path = home / rel
    path.parent.mkdir(parents=True)
    if kind == "codex":
        path.write_text('# keep me\n[mcp_servers.docs]\ncommand = "docs"\n')
    else:
        container = "mcpServers"
        path.write_text(json.dumps({"keep": 1, container: {"docs": {"command": "docs"}}}))
    path.chmod(0o644)
    r = cli("client-config", "--for", kind, "--install")
    assert r.returncode == 0, r.stderr
    assert (
        r.stdout.strip()
        == f"{path}: {'mcp_servers' if kind == 'codex' else 'mcpServers'}.omp-host added"
    )
    assert TOKEN not in r.stdout + r.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    if kind == "codex":
        doc = tomllib.loads(text)
        assert text.startswith("# keep me\n") and doc["mcp_servers"]["docs"] == {"command": "docs"}
        assert doc["mcp_servers"]["omp-host"]["url"] == URL
    else:
        doc = json.loads(text)
        assert doc["keep"] == 1 and doc["mcpServers"]["docs"] == {"command": "docs"}
        server = doc["mcpServers"]["omp-host"]
        assert server.get("url", server.get("httpUrl")) == URL
        assert server["headers"] == {"Authorization": f"Bearer {TOKEN}"}
    again = cli("client-config", "--for", kind, "--install")
    assert again.returncode == 0 and "already up to date" in again.stdout
    assert path.read_text() == text


def test_install_refuses_a_file_it_cannot_parse_and_leaves_it(env, cli, tmp_path, monkeypatch):
    write_config(env["config"], {"roots": [env["root"]], "port": 41234})
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / ".claude.json"
    path.write_text('{"mcpServers": {"a": 1},')
    before = path.stat()
    r = cli("client-config", "--for", "claude-code", "--install")
    assert r.returncode == 1
    assert "left untouched" in r.stderr and "not valid JSON" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert path.read_text() == '{"mcpServers": {"a": 1},'
    assert path.stat().st_mtime_ns == before.st_mtime_ns


def test_install_vscode_writes_the_project_file_and_file_overrides(env, cli, tmp_path, monkeypatch):
    write_config(env["config"], {"roots": [env["root"]], "port": 41234})
    monkeypatch.chdir(tmp_path)
    mine = {"type": "promptString", "id": "mine", "description": "my key", "password": True}
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "mcp.json").write_text(
        json.dumps({"servers": {"docs": {"command": "docs"}}, "inputs": [mine]})
    )
    r = cli("client-config", "--for", "vscode", "--install")
    assert r.returncode == 0, r.stderr
    path = tmp_path / ".vscode" / "mcp.json"
    doc = json.loads(path.read_text())
    assert doc["servers"]["omp-host"]["type"] == "http"
    assert doc["servers"]["docs"] == {"command": "docs"} and mine in doc["inputs"]  # merged
    assert len(doc["inputs"]) == 2 and path.stat().st_mode & 0o777 == 0o600
    other = tmp_path / "elsewhere.json"
    r = cli("client-config", "--for", "cursor", "--install", "--file", str(other))
    assert (
        r.returncode == 0 and json.loads(other.read_text())["mcpServers"]["omp-host"]["url"] == URL
    )


def test_install_needs_a_client_and_is_not_for_ssh(env, cli):
    write_config(env["config"], {"roots": [env["root"]], "port": 41234})
    r = cli("client-config", "--install")
    assert r.returncode == 1 and "--install needs --for" in r.stderr
    r = cli("client-config", "--for", "codex", "--install", "--ssh", "me@host")
    assert r.returncode == 1 and "a2a-bridge connect" in r.stderr
    r = cli("client-config", "--for", "claude-desktop", "--install")
    assert r.returncode == 1 and "not supported" in r.stderr
