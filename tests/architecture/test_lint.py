"""Lint, format and type checks are part of the test command, so CI and the README agree on one
command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def _installed_names_tree() -> str:
    """A link tree ``<cache>/ns/omp_a2a_bridge/{server,tray,assets}`` that mirrors the installed
    package names: mypy cannot follow setuptools' editable-install import hook, and the source
    folders' names on disk (``server/``) are not their import names (``omp_a2a_bridge.server``)."""
    ns = os.path.join(ROOT, ".mypy_cache", "ns")
    pkg = os.path.join(ns, "omp_a2a_bridge")
    os.makedirs(pkg, exist_ok=True)
    for name in ("server", "tray", "assets"):
        link = os.path.join(pkg, name)
        if not os.path.islink(link):
            os.symlink(os.path.join(ROOT, name), link)
    return ns


def test_mypy_clean_on_every_platform():
    """mypy (``[tool.mypy]`` in pyproject.toml) for each OS the app runs on: each platform's
    standard library differs (no ``os.killpg`` or ``resource`` on Windows, no ``winreg``
    elsewhere), and code for one must not break the others. The three run side by side, each
    with its own cache (a shared one would be invalidated by every change of platform)."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        raise AssertionError("mypy is part of the test extra: pip install -e '.[test]'") from None
    env = {**os.environ, "MYPYPATH": _installed_names_tree()}
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
                "-p",
                "omp_a2a_bridge.server",
                "-p",
                "omp_a2a_bridge.tray",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for platform in ("linux", "darwin", "win32")
    }
    failures = []
    for platform, proc in runs.items():
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0 or "no issues found in" not in out:
            failures.append(f"mypy --platform {platform}:\n{out}")
    assert not failures, "\n".join(failures)


def test_every_import_uses_the_namespace():
    """``server``, ``tray`` and ``assets`` are folder names, not import names: code that said
    ``from server.x import y`` would work from a checkout (the folder is on ``sys.path``) and
    break in an installed wheel, or load a second copy of a module."""
    bad = []
    for top in ("server", "tray", "tests", "bench", "scripts"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        words = line.split()
                        if (
                            len(words) >= 2
                            and words[0] in ("import", "from")
                            and words[1].split(".")[0] in ("server", "tray", "assets")
                        ):
                            bad.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert bad == [], "\n".join(bad)


def test_wheel_installs_only_the_namespace(tmp_path):
    """The built wheel's top-level names are only ``omp_a2a_bridge`` and its dist-info, and it
    carries the page's assets."""
    import zipfile

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            ROOT,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    [wheel] = [p for p in os.listdir(tmp_path) if p.endswith(".whl")]
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "omp_a2a_bridge",
        "omp_a2a_bridge-0.1.0.dist-info",
    }
    for needed in (
        "omp_a2a_bridge/server/core/bridge.py",
        "omp_a2a_bridge/server/tools/search.py",
        "omp_a2a_bridge/tray/cli.py",
        "omp_a2a_bridge/assets/page.html",
        "omp_a2a_bridge/assets/icon.png",
    ):
        assert needed in names
    assert not any(n.startswith("omp_a2a_bridge/tests") for n in names)


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
