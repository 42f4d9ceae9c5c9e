"""The lint and type tools are pinned, in one version everywhere, and the packages say they are
typed; read from the files (nothing is built or run)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PINNED = ("ruff", "mypy")


def _pins(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#,\"']+)", line)
        if m and m.group(1).lower() in PINNED:
            out[m.group(1).lower()] = m.group(2)
    return out


def test_the_test_extra_constraints_and_pre_commit_pin_the_same_versions():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extra = _pins(pyproject["project"]["optional-dependencies"]["test"])
    constraints = _pins((ROOT / "constraints" / "lint.txt").read_text().splitlines())
    hooks = re.findall(r"ruff==[^\s\"'\]]+", (ROOT / ".pre-commit-config.yaml").read_text())
    assert set(extra) == set(PINNED), f"test extra must pin {PINNED} with ==: {extra}"
    assert extra == constraints, (extra, constraints)
    assert hooks and set(hooks) == {f"ruff=={extra['ruff']}"}, hooks


def test_the_packages_ship_py_typed():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data = pyproject["tool"]["setuptools"]["package-data"]
    dirs = pyproject["tool"]["setuptools"]["package-dir"]
    for package in ("omp_a2a_bridge.server", "omp_a2a_bridge.tray"):
        assert "py.typed" in data.get(package, []), package
        assert (ROOT / dirs[package] / "py.typed").is_file(), package
