"""The docs site builds: ``mkdocs build --strict`` (mkdocs.yml at the top of the repository).

Strict mode turns every warning into a failure: a link to a page or an anchor that is not there,
a page missing from the navigation, a snippet that cannot be included (``docs/changelog.md``
includes ``CHANGELOG.md``), and an API page whose module mkdocstrings cannot collect
(``docs/reference/python-api.md`` renders ``server/api.py``, read by griffe from the source
folder, since the installed name ``omp_a2a_bridge.server`` comes from a package-dir mapping).
The site is built into a temporary directory, never into the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _build(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_docs_build_strict_with_no_warning(tmp_path):
    r = _build(tmp_path)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    assert "WARNING" not in log, log
    site = tmp_path / "site"
    # The Python API page holds the API itself, not an empty heading.
    api = (site / "reference" / "python-api" / "index.html").read_text(encoding="utf-8")
    assert "omp_a2a_bridge.server.api" in api
    for name in ("BridgeControl", "BridgeApi", "local_bridge", "attach_approver"):
        assert name in api, name
    # Sphinx roles in the docstrings are rendered as code, not shown raw (docs/_ext/).
    assert ":class:" not in api and ":mod:" not in api
    # The changelog page includes CHANGELOG.md itself.
    changelog = (site / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Unreleased" in changelog


def test_the_readme_stays_a_landing_page():
    """README.md is the landing page (issue 21: at most 250 lines), it keeps the test command
    ``.ci/run`` runs verbatim, and every docs page it links to exists."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    command = (
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' "
        "&& .venv/bin/python -m pytest -q"
    )
    assert command in readme
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]*)", readme):
        assert (ROOT / target).exists(), target


FIRST_SCREEN = 45  # lines of the Quick start a reader sees before scrolling


def test_the_readme_quick_start_shows_the_first_hour_on_its_first_screen():
    """Issue 27: the Quick start's first screen shows what a headless start really prints (the
    product's own start text, so the two cannot drift) and the rest of the first hour: a typo
    stops the start, ``status`` says what is exposed, diffs, risk cues, several waiting calls,
    ``client-config --install``."""
    from omp_a2a_bridge.server.box.plan import BoxStatus, Mechanism
    from omp_a2a_bridge.server.present.exposure import start_lines
    from omp_a2a_bridge.server.types import Exposure

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme[readme.index("## Quick start") :].splitlines()[:FIRST_SCREEN]
    screen = "\n".join(quick)
    home = "/home/ada"
    box = BoxStatus(True, Mechanism.BWRAP, "bubblewrap")
    printed = start_lines(
        Exposure((home,)), box, f"{home}/.local/state/omp-a2a-bridge/log/bridge.log", home
    )
    start = quick.index("a2a-bridge listening on http://127.0.0.1:53917/")
    assert quick[start + 1 : start + 4] == [f"  {line}" for line in printed]
    for words in (
        "config check",
        "a2a-bridge status",
        "diff",
        "curl … | sh",
        "Approve all N",
        "--install",
        "when the panel does",
    ):
        assert words in screen, words
