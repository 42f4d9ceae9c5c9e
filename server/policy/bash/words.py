""":class:`Word`: one word of a bash command after quote removal, as the analysis sees it.

Why a module of its own: both the grammar walk (:mod:`server.policy.bash.parse`) and the table
of programs that run programs (:mod:`server.policy.bash.wrappers`) work on words, and parse
consults wrappers; with the record here neither imports the other back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Word:
    """One word after quote removal; ``literal`` False when bash would expand it further."""

    text: str
    literal: bool = True
