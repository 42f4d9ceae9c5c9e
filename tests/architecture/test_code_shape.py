"""The shape of the code, read from the source with ``ast`` (pure: nothing is imported or run).

Why: a function that no longer fits on two screens hides its steps (the old 212-line ``watch``
kept its state in closures' ``nonlocal``s), and nobody splits one while it still "works". The
limit is checked here rather than remembered.
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("server", "tray")

# Lines from ``def`` to the last line of the body (``end_lineno - lineno + 1``): the docstring
# and comments inside count, decorators do not. A nested function counts on its own and inside
# its parent.
MAX_FUNCTION_LINES = 80

# Known exceptions, each with the reason it may wait; remove the entry when it is split.
TOO_LONG_FOR_NOW: set[str] = set()


def _functions() -> list[tuple[str, int]]:
    """``("path:qualified.name", lines)`` for every function and method under FOLDERS."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                end = child.end_lineno or child.lineno
                found.append((f"{path}:{name}", end - child.lineno + 1))
                walk(child, path, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, path, prefix + child.name + ".")
            else:
                walk(child, path, prefix)

    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for file in sorted(files):
                if file.endswith(".py"):
                    full = os.path.join(dirpath, file)
                    path = os.path.relpath(full, ROOT).replace(os.sep, "/")
                    with open(full, encoding="utf-8") as f:
                        walk(ast.parse(f.read(), path), path, "")
    return found


def test_no_function_is_longer_than_80_lines():
    too_long = [
        f"{name} ({lines} lines)"
        for name, lines in _functions()
        if lines > MAX_FUNCTION_LINES and name not in TOO_LONG_FOR_NOW
    ]
    assert not too_long, "split these functions:\n" + "\n".join(sorted(too_long))


def test_the_exceptions_are_still_needed():
    """An allowed long function that was split (or renamed) leaves the list."""
    names = {name: lines for name, lines in _functions()}
    stale = [n for n in TOO_LONG_FOR_NOW if names.get(n, 0) <= MAX_FUNCTION_LINES]
    assert not stale, f"no longer too long (remove from TOO_LONG_FOR_NOW): {stale}"


# The two modules that name other loggers: the setup (the package logger, the libraries') and
# the tray's adapter of its libraries' log records.
NAMES_OTHER_LOGGERS = {"server/infra/logs.py", "tray/liblogs.py"}


def test_every_module_logs_under_its_own_name():
    """``logging.getLogger(__name__)``: one package logger (``omp_a2a_bridge``, configured once
    in server/infra/logs.py) above every module's, so no module spells the logger's name."""
    wrong = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for file in files:
                full = os.path.join(dirpath, file)
                path = os.path.relpath(full, ROOT).replace(os.sep, "/")
                if not file.endswith(".py") or path in NAMES_OTHER_LOGGERS:
                    continue
                with open(full, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if (
                        isinstance(node, ast.Call)
                        and getattr(node.func, "attr", getattr(node.func, "id", None))
                        == "getLogger"
                        and not (
                            len(node.args) == 1
                            and isinstance(node.args[0], ast.Name)
                            and node.args[0].id == "__name__"
                        )
                    ):
                        wrong.append(f"{path}:{node.lineno}")
    assert not wrong, "use logging.getLogger(__name__):\n" + "\n".join(sorted(wrong))
