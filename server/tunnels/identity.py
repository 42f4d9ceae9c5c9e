"""Which bearer token a tunnel's machine uses: the one seam between tunnels and machine
identities (:mod:`server.machines`).

The supervisor never needs a token: only ``--install`` writes one, into the remote client's
config, and it is the token of the machine the tunnel is named after, so revoking that machine
cuts exactly its clients.
"""

from __future__ import annotations

from collections.abc import Callable

from ..infra.tokens import TokenStore


def machine_token(tokens: TokenStore, name: str, enroll: Callable[[str], str] | None = None) -> str:
    """The token a client on machine ``name`` sends (``tokens`` resolved; blocks on the
    keyring: never on the event loop). ``default`` is the bridge's own token.

    A machine the bridge does not know yet is enrolled with ``enroll`` (``machines add``: it
    mints the token and returns it) — connecting a new machine gives it its own identity, as
    a Tailscale node or a Syncthing device gets one — or, without ``enroll``, refused.
    """
    from ..infra.config import load_config
    from ..machines.identity import DEFAULT, MachineNotFound
    from ..machines.store import token_for

    if name == DEFAULT:
        return tokens.token
    try:
        return token_for(name, load_config(tokens.config.path))  # the file: it may be newer
    except MachineNotFound:
        if enroll is not None:
            return enroll(name)
        raise MachineNotFound(
            f"no machine named {name}: add it first ('a2a-bridge machines add {name}')"
        ) from None
