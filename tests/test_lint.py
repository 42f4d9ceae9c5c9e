"""Lint, format and type checks are part of the test command, so CI and the README agree on one
command."""

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


def test_mypy_clean_on_every_platform():
    """mypy (``[tool.mypy]`` in pyproject.toml) for each OS the app runs on: each platform's
    standard library differs (no ``os.killpg`` or ``resource`` on Windows, no ``winreg``
    elsewhere), and code for one must not break the others. The three run side by side, each
    with its own cache (a shared one would be invalidated by every change of platform)."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        raise AssertionError("mypy is part of the test extra: pip install -e '.[test]'") from None
    runs = {
        platform: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mypy",
                "--platform",
                platform,
                "--cache-dir",
                os.path.join(ROOT, ".mypy_cache", platform),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for platform in ("linux", "darwin", "win32")
    }
    failures = []
    for platform, proc in runs.items():
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            failures.append(f"mypy --platform {platform}:\n{out}")
    assert not failures, "\n".join(failures)


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
