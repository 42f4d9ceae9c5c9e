#!/usr/bin/env python3
"""Move every test file into its layer folder, once, after the branches of issue 21 are merged.

    python3 scripts/test-layers.py            # dry run: print the plan, change nothing
    python3 scripts/test-layers.py --apply    # git mv + rewrite imports and references

The layers (issue 21, item 5), each a folder whose ``conftest.py`` marks its tests (``-m unit``):

    tests/unit          pure: no sockets, no bridge, no processes; the inner loop (< 30 s)
    tests/integration   a real bridge on port 0 over HTTP (in process: ``start_bridge``)
    tests/e2e           real processes of ours (``serve``, ``tray``, the CLI), desktops,
                        browsers, D-Bus
    tests/security      attacker suites, named by the surface attacked
    tests/interop       real MCP clients (exists; unchanged)
    tests/architecture  boundaries, lint, types, packaging, docs
    tests/support       shared non-test modules (helpers, fakes, the test upstream server)

``tests/conftest.py`` stays where it is: its fixtures serve every layer.

What ``--apply`` does, in order:

1. ``git mv`` each file of ``MOVES`` (old path -> new path, decided by reading each file: names
   by subject, not by history).
2. Creates each layer folder's ``__init__.py`` and ``conftest.py`` (the marker) where missing.
3. Rewrites every relative import between test modules (``from .helpers import x`` in
   ``tests/test_tools.py`` becomes ``from ..support.helpers import x`` in
   ``tests/integration/test_builtin_tools.py``), in moved files and in files it does not move.
4. Rewrites references in every tracked text file: paths (``tests/test_abuse.py``), node ids,
   dotted module names (``tests.upstream_server``, ``:mod:`tests.test_attack_paths```) and
   ``os.path.join(..., "tests", "upstream_server.py")``.
5. Fixes repository-root computations from ``__file__`` in files that moved one level down.
6. ``ruff check --fix --select I`` and ``ruff format`` on the files it touched (import order).
7. Reports what it could not decide: test files not in the table (added after it was written:
   left where they are, their imports still fixed), table entries whose file is gone, and
   remaining mentions of old file names without their ``tests/`` prefix (e.g. "test_seams").

It never guesses a layer: read each reported file, add its line to ``MOVES`` and run it again
(entries already done are skipped; imports are fixed from where each file is now).

After it, ``pytest --collect-only -q`` must collect the same number
of tests as before (the script prints both when run with ``--apply --check-collect``).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.relpath(os.path.abspath(__file__), ROOT)

LAYERS = {
    "unit": "pure code without sockets, a bridge or processes; the inner loop (< 30 s)",
    "integration": "a real bridge on port 0 over HTTP, in this process",
    "e2e": "real processes of ours (serve, tray, CLI), desktops, browsers, D-Bus",
    "security": "attacker suites, one file per surface attacked",
    "interop": "real MCP clients against a real bridge",
    "architecture": "boundaries, lint, types, packaging, docs",
}

# old path -> new path. Read each file before adding a line here.
MOVES: dict[str, str] = {
    # -- shared modules (not tests) --------------------------------------------------------
    "tests/helpers.py": "tests/support/helpers.py",
    "tests/control_helpers.py": "tests/support/control_client.py",
    "tests/dbus_fakes.py": "tests/support/dbus_fakes.py",
    "tests/xsession.py": "tests/support/xsession.py",
    "tests/upstream_server.py": "tests/support/upstream_server.py",
    "tests/abuse_keyrings.py": "tests/support/keyrings.py",
    # -- unit: pure functions and objects, no bridge ---------------------------------------
    "tests/test_paths.py": "tests/unit/test_path_policy.py",
    "tests/test_fastcheck.py": "tests/unit/test_schema_fastcheck.py",
    "tests/test_searchout.py": "tests/unit/test_find_globs.py",
    "tests/test_textsafe.py": "tests/unit/test_textsafe.py",
    "tests/test_tray_unit.py": "tests/unit/test_tray_model.py",
    # the rules module on its own (its one property test checks the parser against real bash)
    "tests/test_rules.py": "tests/unit/test_rules.py",
    # -- integration: a bridge on port 0 in this process, over real HTTP --------------------
    "tests/test_api.py": "tests/integration/test_control_api_parity.py",
    "tests/test_approvals.py": "tests/integration/test_approval_endings.py",
    "tests/test_client_config.py": "tests/integration/test_client_config.py",
    "tests/test_config_token.py": "tests/integration/test_config_and_token.py",
    "tests/test_control.py": "tests/integration/test_control.py",
    "tests/test_http_protocol.py": "tests/integration/test_http_protocol.py",
    "tests/test_load_faults.py": "tests/integration/test_load_and_faults.py",
    "tests/test_protocol_revisions.py": "tests/integration/test_protocol_versions_and_bodies.py",
    "tests/test_registry.py": "tests/integration/test_tool_registry.py",
    "tests/test_rules_http.py": "tests/integration/test_rules_over_http.py",
    "tests/test_search.py": "tests/integration/test_search_tools.py",
    "tests/test_sessions_audit.py": "tests/integration/test_sessions_and_audit.py",
    "tests/test_tools.py": "tests/integration/test_builtin_tools.py",
    "tests/test_tray_integration.py": "tests/integration/test_tray_with_bridge.py",
    "tests/test_upstream.py": "tests/integration/test_upstream_servers.py",
    "tests/test_modern_era.py": "tests/integration/test_modern_era.py",  # 2026-07-28 over HTTP
    # -- e2e: our own processes, a desktop, a browser, D-Bus -------------------------------
    "tests/test_browser.py": "tests/e2e/test_approval_page_browser.py",
    "tests/test_cli.py": "tests/e2e/test_cli_processes.py",
    "tests/test_rules_browser.py": "tests/e2e/test_rules_page_browser.py",
    "tests/test_sni.py": "tests/e2e/test_tray_dbus.py",
    "tests/test_tray_stop.py": "tests/e2e/test_tray_stops.py",
    "tests/test_tray_xvfb.py": "tests/e2e/test_tray_xvfb.py",
    # -- security: attacker suites by surface ----------------------------------------------
    "tests/test_abuse.py": "tests/security/test_limits_and_faults.py",
    "tests/test_attack_paths.py": "tests/security/test_planted_home.py",
    "tests/test_attack_round2.py": "tests/security/test_bash_spellings_and_wrappers.py",
    "tests/test_child_env.py": "tests/security/test_child_environment.py",
    "tests/test_fuzz.py": "tests/security/test_http_fuzz.py",
    "tests/test_protected.py": "tests/security/test_protected_locations.py",
    "tests/test_render.py": "tests/security/test_terminal_rendering.py",
    "tests/test_search_attacker.py": "tests/security/test_walking_tools.py",
    "tests/test_seams.py": "tests/security/test_feature_seams.py",
    "tests/test_security.py": "tests/security/test_token_and_file_modes.py",
    "tests/test_upstream_args.py": "tests/security/test_upstream_arguments.py",
    "tests/test_what_runs.py": "tests/security/test_what_runs.py",
    # -- interop: real MCP clients ---------------------------------------------------------
    "tests/test_sdk_interop.py": "tests/interop/test_python_sdk_in_process.py",
    # -- architecture: the code's shape, checked from outside ------------------------------
    "tests/test_boundaries.py": "tests/architecture/test_boundaries.py",
    "tests/test_lint.py": "tests/architecture/test_lint.py",
    "tests/test_docs.py": "tests/architecture/test_docs_site.py",  # mkdocs build --strict
    "tests/test_code_shape.py": "tests/architecture/test_code_shape.py",  # no function > 80
    "tests/boxworld.py": "tests/support/boxworld.py",  # a made-up home for the box's tests
    "tests/test_box_browser.py": "tests/e2e/test_box_page_browser.py",  # Chromium
    "tests/test_box_ui.py": "tests/integration/test_box_in_every_ui.py",  # API, CLI, watch
    "tests/test_grants.py": "tests/security/test_session_grants.py",  # scoped grants, HTTP
    "tests/test_parser_blind_spots.py": "tests/security/test_parser_blind_spots.py",
    "tests/test_rule_syntax.py": "tests/integration/test_rule_syntax.py",  # rules add, HTTP
    "tests/test_self_approval.py": "tests/security/test_self_approval.py",  # control peer
}

# Files that stay where they are (pytest needs the root conftest at the top).
STAY = {"tests/__init__.py", "tests/conftest.py"}

FOLDERS = [*LAYERS, "support"]

CONFTEST = '''"""The {layer} layer: {what}.

Every test collected under this folder carries the ``{layer}`` marker:
``pytest -m {layer}``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Hooks in a conftest see every collected item, not only this folder's.
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.{layer})
'''


def git(*args: str, capture: bool = True) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=capture, text=True, check=True)
    return r.stdout if capture else ""


def tracked() -> list[str]:
    return [p for p in git("ls-files", "-z").split("\0") if p]


def module_of(path: str) -> str:
    """tests/support/helpers.py -> tests.support.helpers; tests/x/__init__.py -> tests.x"""
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(path: str) -> list[str]:
    return path.split("/")[:-1]


MODULE_MOVES = {module_of(o): module_of(n) for o, n in MOVES.items()}


def resolve(pkg: list[str], level: int, module: str | None) -> str:
    base = pkg[: len(pkg) - (level - 1)] if level > 1 else pkg
    return ".".join([*base, *([module] if module else [])])


def relative(pkg: list[str], target: str) -> str:
    """The relative spelling of absolute ``target`` from a module in package ``pkg``."""
    t = target.split(".")
    k = 0
    while k < min(len(pkg), len(t) - 1) and pkg[k] == t[k]:
        k += 1
    return "." * (len(pkg) - k + 1) + ".".join(t[k:])


FROM = re.compile(r"from(\s+)(\.+[\w.]*)(\s+)import")


def rewrite_imports(text: str, old_path: str, new_path: str) -> tuple[str, list[str]]:
    """Relative imports of a module that was at ``old_path`` and is now at ``new_path``."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return text, [f"{new_path}: cannot parse ({e}); imports not rewritten"]
    old_pkg, new_pkg = package_of(old_path), package_of(new_path)
    lines = text.splitlines(keepends=True)
    notes: list[str] = []
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0]
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        if node.module is None:  # from . import x
            for alias in node.names:
                target = resolve(old_pkg, node.level, alias.name)
                if target in MODULE_MOVES or old_pkg != new_pkg:
                    notes.append(f"{new_path}:{node.lineno}: 'from . import' - fix by hand")
            continue
        target = resolve(old_pkg, node.level, node.module)
        target = MODULE_MOVES.get(target, target)
        spelled = relative(new_pkg, target)
        line = lines[node.lineno - 1]
        m = FROM.match(line, node.col_offset)
        if m is None:
            notes.append(f"{new_path}:{node.lineno}: unusual import layout - fix by hand")
            continue
        if m.group(2) != spelled:
            new = f"from{m.group(1)}{spelled}{m.group(3)}import"
            lines[node.lineno - 1] = line[: m.start()] + new + line[m.end() :]
    return "".join(lines), notes


def reference_patterns() -> list[tuple[re.Pattern[str], str]]:
    pats: list[tuple[re.Pattern[str], str]] = []
    for old, new in MOVES.items():
        # a path or node id: tests/test_abuse.py, tests/test_abuse.py::test_x
        pats.append((re.compile(r"(?<![\w/.])" + re.escape(old) + r"(?![\w])"), new))
        # a dotted module: tests.upstream_server, :mod:`tests.test_attack_paths`
        pats.append(
            (re.compile(r"(?<![\w.])" + re.escape(module_of(old)) + r"(?![\w])"), module_of(new))
        )
        # os.path.join(REPO, "tests", "upstream_server.py")
        name = old.split("/", 1)[1]
        rest = new.split("/")[1:]
        pats.append(
            (
                re.compile(r"""(["'])tests\1(\s*,\s*)(["'])""" + re.escape(name) + r"\3"),
                "".join([r"\1tests\1"] + [r"\2\3" + p.replace("\\", "\\\\") + r"\3" for p in rest]),
            )
        )
    return pats


DEPTH_FIXES = [
    # repo root from a file one folder deeper than before
    (
        "os.path.dirname(os.path.dirname(os.path.abspath(__file__)))",
        "os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
    ),
    ("Path(__file__).resolve().parent.parent", "Path(__file__).resolve().parents[2]"),
    ("Path(__file__).parent.parent", "Path(__file__).parents[2]"),
]


def plan() -> tuple[dict[str, str], list[str], list[str]]:
    files = set(tracked())
    moves = {o: n for o, n in MOVES.items() if o in files}
    gone = [o for o in MOVES if o not in files]
    clash = [n for n in moves.values() if n in files and n not in moves]
    if clash:
        sys.exit(f"target paths already exist: {clash}")
    placed = {o for o in files if o.startswith("tests/") and o.split("/")[1] in FOLDERS}
    unknown = sorted(
        f
        for f in files
        if f.startswith("tests/")
        and f.endswith(".py")
        and f.count("/") == 1
        and f not in MOVES
        and f not in STAY
        and f not in placed
    )
    return moves, gone, unknown


def touch_init(folder: str, created: list[str]) -> None:
    init = os.path.join(ROOT, folder, "__init__.py")
    if not os.path.exists(init):
        os.makedirs(os.path.dirname(init), exist_ok=True)
        name = folder.split("/")[-1]
        what = LAYERS.get(name, "modules the tests share (no tests here)")
        with open(init, "w", encoding="utf-8") as f:
            f.write(f'"""tests/{name}: {what}."""\n')
        created.append(f"{folder}/__init__.py")


def text_files() -> list[str]:
    out = []
    for p in tracked():
        full = os.path.join(ROOT, p)
        if p == HERE or not os.path.isfile(full) or os.path.islink(full):
            continue
        try:
            with open(full, encoding="utf-8") as f:
                f.read()
        except (UnicodeDecodeError, OSError):
            continue
        out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apply", action="store_true", help="do it (default: print the plan)")
    ap.add_argument(
        "--check-collect",
        action="store_true",
        help="with --apply: compare `pytest --collect-only` before and after",
    )
    ap.add_argument("--no-ruff", action="store_true", help="skip sorting imports with ruff")
    args = ap.parse_args()

    moves, gone, unknown = plan()
    new_of = dict(moves)
    print(f"{len(moves)} files move:")
    for o, n in moves.items():
        print(f"  {o:40} -> {n}")
    for o in gone:
        print(f"  (table entry without a file, skipped: {o})")
    if unknown:
        print("NOT IN THE TABLE (left in place; read each and add it to MOVES):")
        for f in unknown:
            print(f"  {f}")

    if not args.apply:
        # The import rewrites a real run would make, so the plan shows them.
        for p in text_files():
            if p.startswith("tests/") and p.endswith(".py"):
                with open(os.path.join(ROOT, p), encoding="utf-8") as f:
                    text = f.read()
                new, notes = rewrite_imports(text, p, new_of.get(p, p))
                changed = sum(
                    a != b for a, b in zip(text.splitlines(), new.splitlines(), strict=False)
                )
                if changed:
                    print(f"  imports: {p}: {changed} line(s)")
                for n in notes:
                    print(f"  NOTE {n}")
        print("\ndry run: nothing changed (--apply to do it)")
        return 0

    if git("status", "--porcelain", "--untracked-files=no").strip():
        sys.exit("the work tree has uncommitted changes: commit or stash them first")
    before = collect() if args.check_collect else None

    # 1. move
    created: list[str] = []
    for folder in sorted(
        {os.path.dirname(n) for n in moves.values()} | {f"tests/{layer}" for layer in FOLDERS}
    ):
        touch_init(folder, created)
    for o, n in moves.items():
        git("mv", o, n)
    # 2. conftest per layer
    for layer, what in LAYERS.items():
        path = os.path.join(ROOT, "tests", layer, "conftest.py")
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(CONFTEST.format(layer=layer, what=what))
            created.append(f"tests/{layer}/conftest.py")
        else:
            with open(path, encoding="utf-8") as f:
                if f"pytest.mark.{layer}" not in f.read():
                    print(f"NOTE tests/{layer}/conftest.py exists without the {layer} marker")
    git("add", *created) if created else None

    # 3.-5. rewrite
    old_of = {n: o for o, n in moves.items()}
    notes: list[str] = []
    touched: set[str] = set()
    patterns = reference_patterns()
    for p in text_files():
        full = os.path.join(ROOT, p)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        new = text
        if p.startswith("tests/") and p.endswith(".py"):
            new, n = rewrite_imports(new, old_of.get(p, p), p)
            notes += n
        for pat, repl in patterns:
            new = pat.sub(repl, new)
        if p in old_of and old_of[p].count("/") < p.count("/"):
            for a, b in DEPTH_FIXES:
                new = new.replace(a, b)
            if "__file__" in new:
                for i, line in enumerate(new.splitlines(), 1):
                    if "__file__" in line and not any(b in line for _, b in DEPTH_FIXES):
                        notes.append(f"{p}:{i}: __file__ after a move - check: {line.strip()}")
        if new != text:
            with open(full, "w", encoding="utf-8") as f:
                f.write(new)
            touched.add(p)

    # 6. lines a longer path made too long (comments and docstrings only), then import order
    py = sorted(t for t in touched | set(created) if t.endswith(".py"))
    for p in py:
        full = os.path.join(ROOT, p)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        new = rewrap(text)
        if new != text:
            with open(full, "w", encoding="utf-8") as f:
                f.write(new)
    ruff = shutil.which("ruff", path=os.path.join(ROOT, ".venv", "bin")) or shutil.which("ruff")
    if py and ruff and not args.no_ruff:
        subprocess.run([ruff, "check", "-q", "--fix", "--select", "I", *py], cwd=ROOT)
        subprocess.run([ruff, "format", "-q", *py], cwd=ROOT)
    git("add", "-A", "tests", *sorted(touched))
    if py and ruff:
        long = subprocess.run(
            [ruff, "check", "-q", "--select", "E501", "--output-format", "concise", *py],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if long:
            notes.append("lines too long after the renames, rewrap by hand:\n" + long)

    # 7. report
    print(f"\nrewrote references in {len(touched)} files; created {len(created)} files")
    for n in notes:
        print(f"NOTE {n}")
    leftovers = old_names_left()
    if leftovers:
        print("Old file names still mentioned (no tests/ prefix; check each by hand):")
        for line in leftovers:
            print(f"  {line}")
    if before is not None:
        after = collect()
        print(f"\ncollected before: {before}, after: {after}")
        if before != after:
            print("COLLECTION DIFFERS: look before committing")
            return 1
    print("\nstaged; review with `git diff --cached --stat -M`, then commit")
    return 0


def line_length() -> int:
    try:
        import tomllib

        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            return int(tomllib.load(f).get("tool", {}).get("ruff", {}).get("line-length", 88))
    except (OSError, ValueError):
        return 88


def rewrap(text: str) -> str:
    """Split a too-long comment or docstring line at its last space that fits (a path in it got
    longer); code lines are left to the report."""
    limit = line_length()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    docs: dict[int, int] = {}  # line -> indentation of the docstring it belongs to
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and first.end_lineno is not None
        ):
            for n in range(first.lineno, first.end_lineno + 1):
                docs[n] = first.col_offset
    lines = [line.rstrip("\n") for line in text.splitlines(keepends=True)]
    ends = text.endswith("\n")
    leads: list[str | None] = []  # what a continuation of each line starts with, if wrappable
    for n, line in enumerate(lines, 1):
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("#") and not stripped.startswith("#!"):
            leads.append(indent + "# ")
        elif n in docs:
            leads.append(" " * docs[n])
        else:
            leads.append(None)
    quotes = ('"' * 3, "'" * 3)
    i = 0
    while i < len(lines):
        line, lead = lines[i], leads[i]
        cut = -1
        if lead is not None and len(line) > limit:
            cut = line.rfind(" ", len(lead) + 1, limit + 1)
        if lead is None or cut <= len(lead):
            i += 1
            continue
        rest = line[cut + 1 :]
        lines[i] = line[:cut]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        body = nxt[len(lead) :] if leads[i + 1 : i + 2] == [lead] else ""
        if (
            body.strip()
            and nxt.startswith(lead)
            and not body.startswith((" ", "-", "*", *quotes))
            and not rest.endswith(quotes)
        ):
            lines[i + 1] = lead + rest + " " + body  # the same paragraph goes on: reflow
        else:
            lines.insert(i + 1, lead + rest)
            leads.insert(i + 1, lead)
        i += 1
    return "\n".join(lines) + ("\n" if ends else "")


def old_names_left() -> list[str]:
    stems = sorted(
        {
            os.path.basename(o)[:-3]
            for o, n in MOVES.items()
            if os.path.basename(o) != os.path.basename(n)
        },
        key=len,
        reverse=True,
    )
    pat = re.compile(r"(?<![\w/.])(" + "|".join(map(re.escape, stems)) + r")(?![\w])")
    out = []
    for p in text_files():
        with open(os.path.join(ROOT, p), encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if pat.search(line):
                    out.append(f"{p}:{i}: {line.strip()[:110]}")
    return out


def collect() -> str:
    py = os.path.join(ROOT, ".venv", "bin", "python")
    r = subprocess.run(
        [py if os.path.exists(py) else sys.executable, "-m", "pytest", "--collect-only", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    m = re.search(r"(\d+) tests? collected", r.stdout)
    return f"{m.group(1)} tests" if m else (r.stdout + r.stderr)[-800:]


if __name__ == "__main__":
    sys.exit(main())
