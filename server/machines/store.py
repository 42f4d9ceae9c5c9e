"""Where machine tokens live: the digest in the config, the secret in the OS keyring.

Adding a machine mints a token (32 random bytes, like the main one), writes its record to the
config first (the name is claimed and the digest is what the bridge checks), then stores the
secret in the keyring (service ``omp-a2a-bridge``, user ``machine:NAME``). The keyring rules
are the main token's (:mod:`server.infra.tokens`): with ``token_store: "file"``, or when the
keyring is unusable, the secret goes into the config record instead (0600) and the caller is
told so, never silently. Removing a machine drops the record first (from then on its token
fails, also after a restart), then the keyring entry.

Everything here blocks (files, keyring): call it from a worker or the CLI, never from the
bridge loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..infra.config import Config, ConfigError, edit_config, load_config
from ..infra.tokens import KeyringStore, KeyringUnavailable, TokenStore, generate_token
from ..present.secrets import remember
from ..vocab import TokenSource
from .identity import (
    DEFAULT,
    MachineError,
    MachineNotFound,
    MachineRecord,
    check_name,
    digest,
    keyring_user,
)

__all__ = ["Minted", "add_machine", "remove_machine", "save_last_seen", "token_for"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Minted:
    """A machine just added: its record, its token (shown once), where the secret is kept,
    and a warning when that is the config file because the keyring could not be used."""

    record: MachineRecord
    token: str
    source: TokenSource
    warning: str | None = None


def _machines(raw: dict[str, Any]) -> dict[str, Any]:
    machines = raw.get("machines")
    if machines is None:
        machines = raw["machines"] = {}
    if not isinstance(machines, dict):
        raise ConfigError("invalid config: field 'machines' must be an object")
    return machines


def add_machine(
    config_path: str,
    name: str,
    keyring: KeyringStore | None = None,
    clock: Callable[[], float] = time.time,
) -> Minted:
    """Mint a token for a new machine ``name``; raises :class:`MachineError` when the name is
    invalid, ``default`` or taken."""
    check_name(name)
    if name == DEFAULT:
        raise MachineError(
            "'default' is the bridge's own token; rotate it with 'a2a-bridge token rotate'"
        )
    config = load_config(config_path)
    token = generate_token()
    remember(token, "<token>")  # never in a log line, the audit or a UI from now on
    to_file = config.token_store == "file"
    record = MachineRecord(name, round(clock(), 3), digest(token).hex(), token if to_file else None)

    def claim(raw: dict[str, Any]) -> None:
        machines = _machines(raw)
        if name in machines:
            raise MachineError(
                f"a machine named {name} exists; remove it first ('a2a-bridge machines rm "
                f"{name}') or choose another name"
            )
        machines[name] = record.to_json()

    edit_config(config_path, claim)
    if to_file:
        return Minted(record, token, TokenSource.FILE)
    store = keyring or KeyringStore()
    try:
        store.set(token, keyring_user(name))
    except KeyringUnavailable as e:
        warning = (
            f"keyring unavailable ({e}); the token of machine {name} is stored in "
            f"{config_path} (mode 0600) instead"
        )
        log.warning(warning)
        record = MachineRecord(record.name, record.created, record.sha256, token)

        def keep(raw: dict[str, Any]) -> None:
            _machines(raw)[name] = record.to_json()

        edit_config(config_path, keep)
        return Minted(record, token, TokenSource.FILE, warning)
    return Minted(record, token, TokenSource.KEYRING)


def remove_machine(config_path: str, name: str, keyring: KeyringStore | None = None) -> str | None:
    """Revoke ``name`` in the config (its token never works again, also after a restart),
    then drop its keyring entry. Returns a warning when the keyring entry could not be
    removed (the token is useless anyway: its digest is gone)."""
    if name == DEFAULT:
        raise MachineError(
            "the default machine cannot be removed; rotate its token with "
            "'a2a-bridge token rotate' (other machines keep working)"
        )
    check_name(name)
    removed: list[dict[str, Any]] = []

    def drop(raw: dict[str, Any]) -> None:
        machines = _machines(raw)
        if name not in machines:
            raise MachineNotFound(f"no machine named {name} ('a2a-bridge machines list')")
        removed.append(machines.pop(name))
        if not machines:
            raw.pop("machines")

    edit_config(config_path, drop)
    if isinstance(removed[0], dict) and removed[0].get("token") is not None:
        return None  # the secret lived in the config, and is gone with the record
    try:
        (keyring or KeyringStore()).delete(keyring_user(name))
    except KeyringUnavailable as e:
        warning = (
            f"machine {name} is revoked, but its secret could not be removed from the keyring "
            f"({e}); it no longer works"
        )
        log.warning(warning)
        return warning
    return None


def token_for(name: str, config: Config | None = None, keyring: KeyringStore | None = None) -> str:
    """The secret of machine ``name`` (``default``: the bridge's own token), for what must hand
    it to a remote client (a tunnel's ``--install``). From the keyring, or the config when the
    keyring was unusable when it was added. Blocks on the keyring: never on the event loop.

    Raises :class:`MachineNotFound` for an unknown name and :class:`MachineError` when the
    secret cannot be read (the keyring is locked or lost it: ``machines rm`` and ``add``
    again mint a new one).
    """
    config = config or load_config()
    if name == DEFAULT:
        return TokenStore(config, keyring).resolve().token
    record = next((m for m in config.machines if m.name == name), None)
    if record is None:
        raise MachineNotFound(f"no machine named {name} ('a2a-bridge machines list')")
    if record.token is not None:
        token = record.token
    else:
        try:
            token = (keyring or KeyringStore()).get(keyring_user(name)) or ""
        except KeyringUnavailable as e:
            raise MachineError(f"the token of machine {name} cannot be read: {e}") from None
    if digest(token).hex() != record.sha256:
        raise MachineError(
            f"the keyring holds no valid token for machine {name}; remove it and add it again "
            f"('a2a-bridge machines rm {name}', then 'machines add {name}')"
        )
    remember(token, "<token>")
    return token


def save_last_seen(config_path: str, seen: Mapping[str, float]) -> None:
    """Keep when each machine was last seen (the bridge stops), so ``machines list`` still
    knows after a restart. Only machines still in the config are touched (one removed meanwhile
    stays removed)."""

    def note(raw: dict[str, Any]) -> None:
        machines = raw.get("machines")
        if not isinstance(machines, dict):
            return
        for name, when in seen.items():
            record = machines.get(name)
            if isinstance(record, dict):
                record["last_seen"] = round(when, 3)

    edit_config(config_path, note)
