"""server/present/clientwriters.py: each client's config merged with what is there — other
entries kept, the bridge's replaced, the same twice changes nothing, an unparseable file refused."""

from __future__ import annotations

import json
import tomllib

import pytest

from omp_a2a_bridge.server.present.clientconfig import ClientKind
from omp_a2a_bridge.server.present.clientwriters import (
    TARGETS,
    VSCODE_INPUT,
    Change,
    UnparseableConfig,
    entry,
    in_project,
    merge,
)

URL, TOKEN = "http://127.0.0.1:53917/", "tok-" + "x" * 40
JSON_KINDS = [k for k, t in TARGETS.items() if not t.toml]


def _servers(kind: ClientKind, text: str) -> dict:
    target = TARGETS[kind]
    doc = tomllib.loads(text) if target.toml else json.loads(text)
    return doc[target.container]


@pytest.mark.parametrize("kind", list(TARGETS))
def test_a_new_file_gets_the_entry(kind):
    merged = merge(kind, None, URL, TOKEN)
    assert merged.change is Change.ADDED
    assert _servers(kind, merged.text) == {"omp-host": entry(kind, URL, TOKEN)}
    assert merge(kind, "  \n", URL, TOKEN).text == merged.text  # an empty file = none


@pytest.mark.parametrize("kind", JSON_KINDS)
def test_json_other_entries_and_keys_are_kept(kind):
    container = TARGETS[kind].container
    existing = json.dumps(
        {
            "numStartups": 7,
            container: {"other": {"command": "npx", "args": ["x"]}},
            "projects": {"/p": {"allowedTools": []}},
        }
    )
    merged = merge(kind, existing, URL, TOKEN)
    doc = json.loads(merged.text)
    assert doc["numStartups"] == 7 and doc["projects"] == {"/p": {"allowedTools": []}}
    assert doc[container]["other"] == {"command": "npx", "args": ["x"]}
    auth = doc[container]["omp-host"]["headers"]["Authorization"]
    if in_project(kind):  # a project's file never holds the token: VS Code asks for it
        assert auth == "Bearer ${input:omp-a2a-bridge-token}" and TOKEN not in merged.text
        assert doc["inputs"] == [VSCODE_INPUT]
    else:
        assert auth == f"Bearer {TOKEN}"
    assert merged.change is Change.ADDED


@pytest.mark.parametrize("kind", list(TARGETS))
def test_a_file_in_a_project_never_holds_the_token(kind):
    text = merge(kind, None, URL, TOKEN).text
    assert (TOKEN not in text) is in_project(kind)


def test_vscode_inputs_are_kept_and_its_own_is_put_right():
    mine = {"type": "promptString", "id": "mine", "description": "x"}
    stale = {**VSCODE_INPUT, "password": False}
    existing = json.dumps({"inputs": [mine, stale], "servers": {}})
    doc = json.loads(merge(ClientKind.VSCODE, existing, URL, TOKEN).text)
    assert doc["inputs"] == [VSCODE_INPUT, mine]
    with pytest.raises(UnparseableConfig, match="'inputs' is not a list"):
        merge(ClientKind.VSCODE, '{"inputs": {}}', URL, TOKEN)


@pytest.mark.parametrize("kind", list(TARGETS))
def test_replacing_is_idempotent(kind):
    first = merge(kind, None, URL, TOKEN)
    again = merge(kind, first.text, URL, TOKEN)
    assert again.change is Change.UNCHANGED and again.text == first.text
    moved = merge(kind, first.text, "http://127.0.0.1:4000/", "new-" + "y" * 40)
    assert moved.change is Change.REPLACED
    servers = _servers(kind, moved.text)
    assert list(servers) == ["omp-host"]
    assert servers["omp-host"] == entry(kind, "http://127.0.0.1:4000/", "new-" + "y" * 40)


def test_codex_keeps_comments_other_tables_and_drops_a_stale_env_var():
    existing = (
        '# my codex settings\nmodel = "o3"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n\n'
        '[mcp_servers.omp-host]\nurl = "http://127.0.0.1:1/"\n'
        'bearer_token_env_var = "A2A_BRIDGE_TOKEN"\n'
    )
    merged = merge(ClientKind.CODEX, existing, URL, TOKEN)
    assert merged.change is Change.REPLACED
    assert merged.text.startswith("# my codex settings\n")
    doc = tomllib.loads(merged.text)
    assert doc["model"] == "o3" and doc["mcp_servers"]["docs"] == {"command": "docs-mcp"}
    assert doc["mcp_servers"]["omp-host"] == {
        "url": URL,
        "http_headers": {"Authorization": f"Bearer {TOKEN}"},
    }


def test_codex_new_file_is_one_table():
    text = merge(ClientKind.CODEX, None, URL, TOKEN).text
    assert text.lstrip().startswith("[mcp_servers.omp-host]")
    assert "[mcp_servers]\n" not in text


@pytest.mark.parametrize(
    ("kind", "text", "match"),
    [
        (ClientKind.CLAUDE_CODE, "{not json", "not valid JSON"),
        (ClientKind.CLAUDE_CODE, "[1, 2]", "JSON object"),
        (ClientKind.GEMINI, '{"mcpServers": []}', "'mcpServers' is not an object"),
        (ClientKind.GEMINI, '{"a": 1, // comment\n}', "not valid JSON"),
        (ClientKind.VSCODE, '{"servers": "x"}', "'servers' is not an object"),
        (ClientKind.CODEX, "[mcp_servers\nurl = ", "not valid TOML"),
        (ClientKind.CODEX, 'mcp_servers = "x"\n', "'mcp_servers' is not a table"),
        # nested past the parser's depth (a hostile remote file): refused, not a RecursionError
        (ClientKind.CLAUDE_CODE, '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested"),
        (ClientKind.CLAUDE_CODE, '{"a": ' + "[" * 200 + "]" * 200 + "}", None),
        (ClientKind.CODEX, "a = " + "[" * 200_000 + "]" * 200_000, "nested"),
        # what strict JSON cannot carry back: never written as "Infinity"/"NaN"
        (ClientKind.CLAUDE_CODE, '{"n": NaN}', "not valid JSON"),
        (ClientKind.GEMINI, '{"n": -Infinity}', "not valid JSON"),
        (ClientKind.CLAUDE_CODE, '{"n": 1e999}', "too large"),
        # a repeated key would keep only its last value: the others (servers) silently lost
        (ClientKind.CLAUDE_CODE, '{"mcpServers": {"a": {}}, "mcpServers": {"b": {}}}', "twice"),
    ],
)
def test_an_unparseable_file_is_refused(kind, text, match):
    if match is None:  # deep, but within what reading and writing it back can do: merged
        assert "omp-host" in merge(kind, text, URL, TOKEN).text
        return
    with pytest.raises(UnparseableConfig, match=match):
        merge(kind, text, URL, TOKEN)


def test_clients_without_a_file_to_install_are_refused():
    with pytest.raises(UnparseableConfig, match="not supported"):
        merge(ClientKind.CLAUDE_DESKTOP, None, URL, TOKEN)


def test_each_client_gets_its_own_words():
    assert entry(ClientKind.GEMINI, URL, TOKEN)["httpUrl"] == URL
    assert entry(ClientKind.CLAUDE_CODE, URL, TOKEN)["type"] == "http"
    assert "type" not in entry(ClientKind.CURSOR, URL, TOKEN)
    assert TARGETS[ClientKind.VSCODE].container == "servers"


def test_what_changed_is_described_without_the_token():
    merged = merge(ClientKind.CLAUDE_CODE, None, URL, TOKEN)
    line = merged.describe("~/.claude.json")
    assert line == "~/.claude.json: mcpServers.omp-host added" and TOKEN not in line
    again = merge(ClientKind.CLAUDE_CODE, merged.text, URL, TOKEN)
    assert "already up to date" in again.describe("~/.claude.json")


def test_a_lone_surrogate_stays_escaped_so_the_file_is_utf8():
    merged = merge(ClientKind.CLAUDE_CODE, '{"note": "\\ud800 \u00e9"}', URL, TOKEN)
    merged.text.encode("utf-8")  # writable as the client reads it
    assert json.loads(merged.text)["note"] == "\ud800 \u00e9"
