"""Client config writers that merge: the bridge's entry added to (or replaced in) the file a
client reads, every other entry kept.

Why pure functions over text: ``client-config --for X --install`` writes the file here, and
``connect --install`` writes the same file on another machine over ssh (read there, merged
here, written back through ssh's stdin). Both call :func:`merge` with the file's current text
(or ``None`` when there is none) and write what it returns; nothing here touches a disk.

A file that cannot be parsed is refused (:class:`UnparseableConfig`), never replaced: it may
hold the user's other servers, and a "repair" would lose them. TOML goes through tomlkit, which
keeps the user's comments and layout; JSON files are rewritten with two-space indentation (the
clients write them that way themselves).

Unlike the printed recipes (:mod:`.clientconfig`), an installed file holds the token itself:
nothing guarantees that the shell a client starts from exports ``A2A_BRIDGE_TOKEN``. The file
is written 0600 (by the caller), like ssh keys.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from .clientconfig import SERVER_NAME, VSCODE_INPUT, VSCODE_INPUT_ID, ClientKind


class Change(enum.StrEnum):
    """What :func:`merge` did to the bridge's entry."""

    ADDED = "added"
    REPLACED = "replaced"
    UNCHANGED = "unchanged"


class UnparseableConfig(ValueError):
    """The existing file is not what the client reads (bad JSON/TOML, or the wrong shape):
    refused, so the file stays untouched."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a client reads its MCP servers: ``path`` relative to the home folder (``~/``) or
    to the current folder (VS Code's project file), and under which key."""

    kind: ClientKind
    path: str
    container: str  # the JSON object (or TOML table) that holds the servers
    toml: bool = False


TARGETS: dict[ClientKind, Target] = {
    ClientKind.CLAUDE_CODE: Target(ClientKind.CLAUDE_CODE, "~/.claude.json", "mcpServers"),
    ClientKind.CODEX: Target(ClientKind.CODEX, "~/.codex/config.toml", "mcp_servers", True),
    ClientKind.GEMINI: Target(ClientKind.GEMINI, "~/.gemini/settings.json", "mcpServers"),
    ClientKind.VSCODE: Target(ClientKind.VSCODE, ".vscode/mcp.json", "servers"),
    ClientKind.CURSOR: Target(ClientKind.CURSOR, "~/.cursor/mcp.json", "mcpServers"),
    ClientKind.GENERIC: Target(
        ClientKind.GENERIC, "~/.config/omp-a2a-bridge/mcp.json", "mcpServers"
    ),
}
"""The clients ``--install`` can write for. Claude Desktop is left out: its file's place is not
documented on Linux, and it needs mcp-remote installed (``client-config --for`` prints it)."""


@dataclass(frozen=True, slots=True)
class Merged:
    """The new text of the file and what changed (``text`` is the old text when unchanged)."""

    text: str
    change: Change
    key: str  # e.g. ``mcpServers.omp-host``: what the CLI prints it changed

    def describe(self, path: str) -> str:
        """One line for the user (never the token)."""
        if self.change is Change.UNCHANGED:
            return f"{path}: {self.key} already up to date"
        return f"{path}: {self.key} {self.change.value}"


def in_project(kind: ClientKind) -> bool:
    """Whether ``kind``'s file lives in the current folder (a project) rather than home."""
    target = TARGETS.get(kind)
    return target is not None and not target.path.startswith("~/")


def entry(kind: ClientKind, url: str, token: str) -> dict[str, Any]:
    """The bridge's entry in ``kind``'s own words (what its docs and ``mcp add`` write).
    A file in a project never gets the token itself (:data:`.clientconfig.VSCODE_INPUT`)."""
    if kind is ClientKind.VSCODE:
        ref = f"Bearer ${{input:{VSCODE_INPUT_ID}}}"
        return {"type": "http", "url": url, "headers": {"Authorization": ref}}
    auth = {"Authorization": f"Bearer {token}"}
    if kind is ClientKind.CODEX:
        # Codex: `url` = Streamable HTTP; literal headers go in `http_headers` (an inline
        # `bearer_token` is rejected; `bearer_token_env_var` needs the variable exported).
        return {"url": url, "http_headers": auth}
    if kind is ClientKind.GEMINI:
        return {"httpUrl": url, "headers": auth}  # httpUrl = Streamable HTTP in Gemini CLI
    if kind is ClientKind.CURSOR:
        return {"url": url, "headers": auth}
    return {"type": "http", "url": url, "headers": auth}


def merge(
    kind: ClientKind, existing: str | None, url: str, token: str, name: str = SERVER_NAME
) -> Merged:
    """``existing`` (None or blank: no file yet) with the bridge's entry ``name`` added or
    replaced; raises :class:`UnparseableConfig` when ``existing`` cannot be read as the client
    reads it, or ``kind`` has no file to install into."""
    target = TARGETS.get(kind)
    if target is None:
        raise UnparseableConfig(f"{kind.value}: --install is not supported (print it instead)")
    new = entry(kind, url, token)
    key = f"{target.container}.{name}"
    blank = existing is None or not existing.strip()
    try:
        if target.toml:
            return _merge_toml(target, None if blank else existing, new, name, key)
        return _merge_json(target, None if blank else existing, new, name, key)
    except RecursionError:
        # A file nested past the parser's (or the writer's) depth: the remote side of
        # ``connect --install`` is the agent's, so its file may be built to be one.
        raise UnparseableConfig("nested too deeply to read safely") from None


def _merge_json(
    target: Target, existing: str | None, new: dict[str, Any], name: str, key: str
) -> Merged:
    doc: Any = {}
    if existing is not None:
        try:
            doc = json.loads(existing, parse_constant=_no_constant, object_pairs_hook=_unique)
        except ValueError as e:
            raise UnparseableConfig(f"not valid JSON ({e})") from None
        if not isinstance(doc, dict):
            raise UnparseableConfig("expected a JSON object at the top")
    servers = doc.setdefault(target.container, {})
    if not isinstance(servers, dict):
        raise UnparseableConfig(f"'{target.container}' is not an object")
    inputs_ok = True
    if target.kind is ClientKind.VSCODE:
        inputs = doc.setdefault("inputs", [])
        if not isinstance(inputs, list):
            raise UnparseableConfig("'inputs' is not a list")
        mine = [
            i
            for i, x in enumerate(inputs)
            if isinstance(x, dict) and x.get("id") == VSCODE_INPUT_ID
        ]
        inputs_ok = [inputs[i] for i in mine] == [VSCODE_INPUT]
        if not inputs_ok:
            kept = [x for i, x in enumerate(inputs) if i not in mine]
            inputs[:] = [dict(VSCODE_INPUT), *kept]
    old = servers.get(name)
    if old == new and inputs_ok and existing is not None:
        return Merged(existing, Change.UNCHANGED, key)
    servers[name] = new
    return Merged(_dump_json(doc), Change.ADDED if old is None else Change.REPLACED, key)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys repeat would be written back with the last one only (the others,
    servers maybe, lost): refused instead."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {json.dumps(k)[:80]} appears twice in one object")
        out[k] = v
    return out


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


def _dump_json(doc: Any) -> str:
    """The document as strict JSON its client reads back: a number too large for a float
    (``1e999``) would come out as ``Infinity`` (refused, the file left as it is); a lone
    surrogate (``"\\ud800"``, valid JSON) stays escaped, so the text is always UTF-8."""
    try:
        text = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:
        raise UnparseableConfig("it holds a number too large to write back exactly") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(doc, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
    return text


def _merge_toml(
    target: Target, existing: str | None, new: dict[str, Any], name: str, key: str
) -> Merged:
    try:
        doc = tomlkit.parse(existing or "")
    except TOMLKitError as e:
        raise UnparseableConfig(f"not valid TOML ({e})") from None
    servers = doc.get(target.container)
    if servers is None:
        servers = tomlkit.table(is_super_table=True)  # `[mcp_servers.NAME]` alone
        doc[target.container] = servers
    elif not isinstance(servers, dict):
        raise UnparseableConfig(f"'{target.container}' is not a table")
    old = servers.get(name)
    unwrap = getattr(old, "unwrap", None)  # tomlkit items -> plain dicts and strings
    old_plain = unwrap() if callable(unwrap) else old
    if old_plain == new and existing is not None:
        return Merged(existing, Change.UNCHANGED, key)
    table = tomlkit.table()
    for k, v in new.items():
        if isinstance(v, dict):
            inline = tomlkit.inline_table()
            inline.update(v)
            table[k] = inline
        else:
            table[k] = v
    servers[name] = table
    text = tomlkit.dumps(doc)
    return Merged(text, Change.ADDED if old is None else Change.REPLACED, key)
