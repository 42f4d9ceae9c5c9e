"""Which bearer token a tunnel's machine uses: the one seam between tunnels and machine
identities.

Until per-machine tokens exist, every machine uses the bridge's one token; when they do, this
function returns machine ``name``'s own token and nothing else in :mod:`server.tunnels` changes
(the supervisor never needs a token: only ``--install`` writes one, into the remote client's
config).
"""

from __future__ import annotations

from ..infra.tokens import TokenStore


def machine_token(tokens: TokenStore, name: str) -> str:
    """The token a client on machine ``name`` sends (``tokens`` resolved)."""
    del name  # one token for every machine, for now
    return tokens.token
