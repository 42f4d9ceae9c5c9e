"""The command line: ``a2a-bridge`` and its verbs. Thin: each verb calls :mod:`server.api` or
reads files.
"""

from __future__ import annotations

from collections.abc import Sequence

# Verbs that answer without the bridge's machinery: importing :mod:`.main` (the runner, the
# control client, the config and the policy behind them) costs ~0.3 s of a 2-core machine's
# time, more than such a command may take (``a2a-bridge audit -n 20``: 0.1 s).
QUICK_VERBS = ("audit",)


def quick(argv: Sequence[str]) -> int | None:
    """Run ``argv`` when its verb is one of :data:`QUICK_VERBS` (its exit code), else None."""
    if not argv or argv[0] not in QUICK_VERBS:
        return None
    from .audit import main as audit_main

    return audit_main(argv[1:])
