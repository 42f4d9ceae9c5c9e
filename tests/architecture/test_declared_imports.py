"""Every third-party module the code imports is a declared dependency, not one that only
happens to be installed because another package needs it (read with ``ast``; nothing runs)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"omp_a2a_bridge", "server", "tray", "tests", "bench"}  # bench: the repo's own
# Modules of platforms other than this one (not installed here to be looked up).
NOT_INSTALLED_HERE = {"PyObjCTools": "pyobjc-core", "Xlib": "python-xlib"}


def _names(requirements: list[str]) -> set[str]:
    return {_norm(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) for r in requirements}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imports(folders: list[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            if "interop/clients" in path.as_posix():
                continue  # the clients' own scripts run in their own venvs
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _undeclared(folders: list[str], declared: set[str]) -> list[str]:
    dists = importlib.metadata.packages_distributions()
    bad = []
    for top, files in sorted(_imports(folders).items()):
        owners = {_norm(d) for d in dists.get(top, [])}
        if top in NOT_INSTALLED_HERE:
            owners.add(_norm(NOT_INSTALLED_HERE[top]))
        if not owners & declared:
            bad.append(f"{top} (from {sorted(owners) or '?'}) in {sorted(files)[:3]}")
    return bad


def test_the_code_imports_only_declared_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = _names(project["dependencies"])
    assert _undeclared(["server", "tray"], declared) == []


def test_the_tests_import_only_declared_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = _names(project["dependencies"]) | _names(project["optional-dependencies"]["test"])
    assert _undeclared(["tests", "scripts"], declared) == []
