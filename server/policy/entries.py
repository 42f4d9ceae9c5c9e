"""The path policy compiled for the children of one folder: walks judge a folder, not each path.

Why: ``ls`` of 1,000 entries judged every entry by its full path (own files, a bucket of table
locations, the private tree, a name regex, the hard-link index): ~10 µs each, ten times what
the peers spend on the whole listing. Almost every folder a walk meets has no protected place
among its children, and that can be known once per folder: which child *names* could be a
table location, one of the bridge's files or a private place. A child whose name is none of
those is refused only for a secret-looking name (files only; a set lookup) or, when its link
count says it has another name, for being a hard link to a protected file.

The rules are a superset: a suspect name takes the full per-path judgement
(:meth:`server.policy.paths.PathPolicy.judge_entry`), so the verdict never differs from it
(``tests/unit/test_entries.py`` checks this against the per-path judgement on generated trees).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FolderRules"]


@dataclass(frozen=True, slots=True)
class FolderRules:
    """Which direct children of one real folder may be refused by their path.

    ``whole``: the folder itself lies in (or is) a refused place, or the user added ``**/``
    patterns: every child takes the full judgement. Otherwise a child (its folded name) is a
    suspect when it is in ``names``, starts with one of ``prefixes``, matches one of
    ``patterns``, or holds a ``/`` (a name that folds to one, e.g. a full-width solidus).
    """

    whole: bool
    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()

    def suspect(self, name_key: str) -> bool:
        """The full judgement must decide this child (its folded name)."""
        if "/" in name_key or self.whole or name_key in self.names:
            return True
        if self.prefixes and name_key.startswith(self.prefixes):
            return True
        if self.patterns:
            return any(rx.match(name_key) for rx in self.patterns)
        return False


EVERY_CHILD = FolderRules(whole=True)
