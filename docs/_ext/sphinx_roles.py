"""A griffe extension for the docs site: the code's docstrings use Sphinx roles
(``:class:`~server.core.runner.BridgeRunner```, ``:mod:`server.types```), which mkdocstrings
shows as literal text. This turns each into inline code with the name a reader knows
(``~`` keeps the last component, as Sphinx does)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|mod|func|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
