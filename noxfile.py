"""Sessions for the checks a change needs (``pip install nox``, then ``nox -s unit``).

The README's one test command (``nox -s test`` runs the same) stays the whole check; the other
sessions are slices of it for the inner loop, plus the packaging and interop steps:

    unit       tests/unit: pure code, no sockets or processes (< 30 s)
    fast       everything but real desktops, browsers, D-Bus and real MCP clients
    test       the README's test command: every test
    lint       ruff check + ruff format --check (pinned: constraints/lint.txt)
    typecheck  mypy for linux, darwin and win32 ([tool.mypy] in pyproject.toml)
    docs       mkdocs build --strict (once mkdocs.yml exists)
    package    build the wheel and sdist; the wheel holds py.typed and the page's assets
    interop    install the real MCP clients (cached) and run tests/interop

Extra arguments go to pytest: ``nox -s unit -- -k audit -x``.
"""

from __future__ import annotations

import os
import zipfile

import nox

nox.options.sessions = ["test"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

PYTHON = "3.11"
CONSTRAINTS = ("-c", "constraints/lint.txt")


def install(session: nox.Session) -> None:
    session.install("-e", ".[test]", *CONSTRAINTS)


@nox.session(python=PYTHON)
def unit(session: nox.Session) -> None:
    """tests/unit: pure code, no sockets or processes (< 30 s)."""
    install(session)
    session.run("pytest", "-q", "tests/unit", *session.posargs)


@nox.session(python=PYTHON)
def fast(session: nox.Session) -> None:
    """Every test but real desktops, browsers, D-Bus and real MCP clients."""
    install(session)
    session.run("pytest", "-q", "-m", "not e2e and not interop", *session.posargs)


@nox.session(python=PYTHON)
def test(session: nox.Session) -> None:
    """The README's test command: every test."""
    install(session)
    session.run("pytest", "-q", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check, at the pinned version."""
    session.install("ruff", *CONSTRAINTS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy for linux, darwin and win32."""
    install(session)  # mypy reads the dependencies' types
    session.run("pytest", "-q", "tests/architecture/test_lint.py", "-k", "mypy", *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """mkdocs build --strict."""
    if not os.path.exists("mkdocs.yml"):
        session.skip("no mkdocs.yml yet")
    install(session)
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", os.path.join(session.create_tmp(), "site")
    )


@nox.session(python=PYTHON)
def package(session: nox.Session) -> None:
    """Build the wheel and sdist; the wheel holds py.typed and the assets."""
    session.install("build")
    out = os.path.join(session.create_tmp(), "dist")
    session.run("python", "-m", "build", "--outdir", out)
    [wheel] = [f for f in os.listdir(out) if f.endswith(".whl")]
    names = set(zipfile.ZipFile(os.path.join(out, wheel)).namelist())
    for needed in (
        "omp_a2a_bridge/server/py.typed",
        "omp_a2a_bridge/tray/py.typed",
        "omp_a2a_bridge/assets/page.html",
    ):
        if needed not in names:
            session.error(f"{wheel} lacks {needed}")
    session.log(f"{wheel}: {len(names)} files")


@nox.session(python=PYTHON)
def interop(session: nox.Session) -> None:
    """Install the real MCP clients (cached), then run tests/interop."""
    install(session)
    session.run("python", "-m", "tests.interop.tools", "install")
    session.run("pytest", "-q", "tests/interop", *session.posargs)
