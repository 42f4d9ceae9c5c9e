"""Lint and format are part of the test command, so CI and the README agree on one command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    assert exe, "ruff is part of the test extra: pip install -e '.[test]'"
    return [exe]


def test_ruff_check_clean():
    r = subprocess.run([*_ruff(), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_clean():
    r = subprocess.run(
        [*_ruff(), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_server_never_imports_tray():
    for dirpath, _, files in os.walk(os.path.join(ROOT, "server")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    text = fh.read()
                bad = [
                    line
                    for line in text.splitlines()
                    if line.strip().startswith(("import tray", "from tray"))
                ]
                assert bad == [], f
