"""An ordinary 60-call coding session: the shape of a real one (look around, change, test,
commit, repeat), shared by the replay test (``tests/integration/test_box_replay.py``) and
``python -m bench`` (the prompts the box avoids on it)."""

from __future__ import annotations

import sys
from typing import Any

APP = "def add(a, b):\n    return a + b\n"
TEST = "from app import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def session(project: str) -> list[tuple[str, dict[str, Any]]]:
    """60 calls, the shape of a real session: look around, change, test, commit, repeat."""
    py = sys.executable
    calls: list[tuple[str, dict[str, Any]]] = [
        ("bash", {"command": "git status --short && git log --oneline | head -3"}),
        ("write", {"path": f"{project}/app.py", "content": APP}),
        ("write", {"path": f"{project}/test_app.py", "content": TEST}),
        ("bash", {"command": f"{py} -m pytest -q -p no:cacheprovider"}),
        ("bash", {"command": "git add -A && git commit -qm 'app: add' && git log --oneline -1"}),
    ]
    check = f"{py} -c 'import app; print(app.add(1, 2))'"
    for i in range(9):  # 9 rounds of 6 calls
        name = f"f{i}"
        calls += [
            ("grep", {"pattern": "def ", "path": project}),
            ("read", {"path": f"{project}/app.py"}),
            (
                "edit",
                {
                    "path": f"{project}/app.py",
                    "old_string": "def add(a, b):",
                    "new_string": f"def {name}():\n    return {i}\n\n\ndef add(a, b):",
                },
            ),
            ("bash", {"command": check if i % 3 else f"{py} -m pytest -q -p no:cacheprovider"}),
            ("bash", {"command": "git diff --stat | tail -1; ls -la | wc -l; mktemp"}),
            ("bash", {"command": f"git commit -qam 'app: {name}' && git log --oneline | wc -l"}),
        ]
    calls.append(("bash", {"command": "rm -rf ~/Documents; ls ~"}))
    return calls
