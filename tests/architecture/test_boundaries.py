"""Import boundaries, read from the source with ``ast`` (pure: nothing is imported or run).

Why: the front ends (the tray, the control API's handlers, ``watch``, the CLI) must reach the
bridge only through its API (:mod:`server.api`) and the plain data types, so the core can
change behind them; and an import cycle, even one hidden in a function or behind
``if TYPE_CHECKING:``, makes a module's import order matter or ties two modules together.
These rules are checked here rather than remembered.
"""

from __future__ import annotations

import ast
import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = "omp_a2a_bridge"

# What the tray may import from the server: the API, the data types, errors and vocabulary it
# names, and the pure presentation package (the one renderer of agent text, previews, times).
TRAY_MAY_IMPORT = {
    f"{PKG}.server.api",
    f"{PKG}.server.types",
    f"{PKG}.server.errors",
    f"{PKG}.server.vocab",
    f"{PKG}.server.local",  # local_bridge(): the one factory of the in-process bridge
}
TRAY_MAY_IMPORT_PACKAGES = (f"{PKG}.server.present",)
# The installed `a2a-bridge` script is the server's CLI with the tray's commands added.
TRAY_ENTRY_POINT = ("tray/cli.py", {f"{PKG}.server.cli", f"{PKG}.server.cli.main"})

# The API module is vocabulary: data types, enums, errors, the Protocols. It may not import
# the machinery behind it, not even lazily or for types (server/local.py builds the runner).
API_MAY_IMPORT = {
    f"{PKG}.server.control.info",  # ControlInfo, a plain record (type-only)
    f"{PKG}.server.errors",
    f"{PKG}.server.policy.rules",  # RuleList, RuleSet
    f"{PKG}.server.policy.judge",  # Judgement, what test_rule returns
    f"{PKG}.server.types",
    f"{PKG}.server.vocab",  # Decision, ApproverKind, TokenSource
}

# The control API's modules are the BridgeApi's HTTP form: no bridge, no collaborators.
CONTROL_MODULES = (
    "server/control/server.py",
    "server/control/endpoints.py",
    "server/control/auth.py",
)
CORE_MODULES = {
    f"{PKG}.server.core.bridge",
    f"{PKG}.server.core.pipeline",
    f"{PKG}.server.core.runner",
    f"{PKG}.server.mcp.sessions",
    f"{PKG}.server.infra.audit",
    f"{PKG}.server.infra.tokens",
    f"{PKG}.server.infra.config",
    f"{PKG}.server.upstream.manager",
}
# Packages that decide or render must not depend on the machinery that serves: they stay pure
# enough to test without a bridge, and the core can change behind them.
PURE_PACKAGES = ("policy", "present")
SERVING_PACKAGES = ("core", "control", "cli", "mcp")
REACHING_THROUGH = {"bridge", "broker", "tokens", "upstreams", "registry", "policy"}


def _sources(folder: str) -> dict[str, str]:
    """``{relative path: dotted module name}`` for every .py file under ``folder``."""
    out = {}
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.relpath(os.path.join(dirpath, name), ROOT)
                parts = path[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[path] = ".".join([PKG, *parts])
    return out


def _tree(path: str) -> ast.Module:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of every node inside an ``if TYPE_CHECKING:`` block (not imported at run time)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def imports(path: str, module: str, *, runtime_only: bool = True) -> set[str]:
    """The modules ``path`` imports (relative ones resolved), anywhere in the file — a lazy
    import inside a function counts — except under ``if TYPE_CHECKING:``."""
    tree = _tree(path)
    skip = _type_checking_nodes(tree) if runtime_only else set()
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from . import clientconfig` imports a module too
            found.update(f"{target}.{a.name}" for a in node.names)
    return found


def _server_imports(path: str, module: str) -> set[str]:
    """Only the names that are modules of ours (``from .x import Name`` adds ``x.Name``)."""
    ours = set(_sources("server").values()) | set(_sources("tray").values())
    return {m for m in imports(path, module) if m in ours}


def test_the_tray_imports_only_the_api_and_the_data_types():
    wrong = []
    for path, module in _sources("tray").items():
        for target in _server_imports(path, module):
            if not target.startswith(f"{PKG}.server"):
                continue
            if target in TRAY_MAY_IMPORT or (
                path == TRAY_ENTRY_POINT[0] and target in TRAY_ENTRY_POINT[1]
            ):
                continue
            if target.startswith(tuple(p + "." for p in TRAY_MAY_IMPORT_PACKAGES)):
                continue
            if target == f"{PKG}.server":  # the package itself (`from ...server import cli`)
                continue
            wrong.append(f"{path} imports {target}")
    assert not wrong, "the tray reaches past server.api:\n" + "\n".join(sorted(wrong))


def test_the_server_never_imports_the_tray():
    wrong = [
        f"{path} imports {target}"
        for path, module in _sources("server").items()
        for target in _server_imports(path, module)
        if target.startswith(f"{PKG}.tray")
    ]
    assert not wrong, wrong


def test_the_api_module_is_only_vocabulary():
    """Type-only imports included: the implementations import the API to prove they conform
    (in their own modules), so the API naming them back would be a cycle."""
    module = f"{PKG}.server.api"
    found = imports("server/api.py", module, runtime_only=False) - {module}
    ours = set(_sources("server").values())
    modules = {m for m in found if m in ours}  # drop `module.Name` entries
    assert modules <= API_MAY_IMPORT, sorted(modules - API_MAY_IMPORT)


def test_the_control_api_calls_only_the_api():
    """Its handlers hold a BridgeApi (``self.state.api``); no bridge, broker or token store."""
    wrong = []
    for path in CONTROL_MODULES:
        module = f"{PKG}.{path[:-3].replace('/', '.')}"
        for target in _server_imports(path, module):
            if target in CORE_MODULES:
                wrong.append(f"{path} imports {target}")
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Attribute) and node.attr in REACHING_THROUGH:
                wrong.append(f"{path}:{node.lineno} reaches .{node.attr}")
    assert not wrong, "\n".join(wrong)


def test_pure_packages_import_nothing_that_serves():
    """``policy`` and ``present`` import nothing from ``core``, ``control``, ``cli`` or ``mcp``
    (type-only imports included): the judge and the renderers test without a bridge."""
    serving = tuple(f"{PKG}.server.{p}" for p in SERVING_PACKAGES)
    wrong = [
        f"{path} imports {target}"
        for package in PURE_PACKAGES
        for path, module in _sources(f"server/{package}").items()
        for target in imports(path, module, runtime_only=False)
        if target == serving
        or target.startswith(tuple(p + "." for p in serving))
        or target in serving
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_top_of_server_is_the_public_surface():
    """``server/`` holds at most 8 modules; everything else lives in a subsystem package."""
    top = [n for n in os.listdir(os.path.join(ROOT, "server")) if n.endswith(".py")]
    assert len(top) <= 8, sorted(top)


def test_no_import_cycles_even_through_lazy_or_type_only_imports():
    """A type-only import counts too: a cycle through ``if TYPE_CHECKING:`` still means two
    modules that cannot be read (or moved) apart, and it points at a misplaced type or factory
    (the usual fix: a Protocol for the back-reference, or the record in a module of its own)."""
    modules = {**_sources("server"), **_sources("tray")}
    names = set(modules.values())
    graph = {
        module: {
            t
            for t in imports(path, module, runtime_only=False)
            if t in names and t != module and t != PKG + ".server"
        }
        for path, module in modules.items()
    }
    # A package's __init__ is imported by its submodules implicitly; only explicit edges count.
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    short = [" -> ".join(m.removeprefix(PKG + ".") for m in c) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(short)


def test_private_members_stay_private():
    """ruff's SLF001 (no ``obj._private`` outside its class) runs with the lint test; keep it
    selected, so a front end cannot start reaching into the core again unnoticed."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        lint = tomllib.load(f)["tool"]["ruff"]["lint"]
    assert "SLF" in lint["select"] or "SLF001" in lint["select"]
    assert "SLF001" not in lint.get("ignore", [])
    for pattern, codes in lint.get("per-file-ignores", {}).items():
        assert "SLF001" not in codes and "SLF" not in codes, pattern


# The package map lives on the docs site's architecture page (it was in README.md until the
# README became a landing page).
ARCHITECTURE_PAGE = os.path.join(ROOT, "docs", "design", "architecture.md")


def _package_map() -> str:
    with open(ARCHITECTURE_PAGE, encoding="utf-8") as f:
        page = f.read()
    section = page[page.index("## Package map") :]
    start = section.index("```\n") + 4
    return section[start : section.index("```", start)]


def _mapped_paths(block: str) -> set[str]:
    """Every ``x.py`` the map names, as a path under its top folder (``server/policy/paths.py``):
    a line's folder is the nearest less-indented ``name/`` line above it."""
    named: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        words = line.split()
        if not words:
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        if words[0].endswith("/") and not words[0].endswith(".py"):
            folders.append((indent, words[0]))
            continue
        base = "".join(f for _, f in folders)
        for word in re.findall(r"(?<![\w/])([a-z_]+(?:/[a-z_]+)*\.py)\b", line):
            named.add(base + word)
    return named


def test_the_package_map_names_every_module():
    """The package map (docs/design/architecture.md) matches the code: every module has its line
    (a new module gets one), and every ``x.py`` it names exists (a moved or removed one loses
    it)."""
    named = _mapped_paths(_package_map())
    files = {
        path
        for folder in ("server", "tray")
        for path in _sources(folder)
        if os.path.basename(path) not in ("__init__.py", "__main__.py")
    }
    missing, extra = sorted(files - named), sorted(named - files)
    assert not missing, f"modules missing from the package map ({ARCHITECTURE_PAGE}): {missing}"
    assert not extra, f"the package map ({ARCHITECTURE_PAGE}) names missing modules: {extra}"
