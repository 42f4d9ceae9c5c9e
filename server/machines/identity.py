"""Machine names, token digests and the per-request lookup (pure: no I/O).

Why a digest: the config holds only ``sha256(token)`` per machine, so a copy of the config
(a backup, a dotfiles repository) does not hand out access. A token is 32 random bytes, so an
unsalted SHA-256 cannot be brute-forced; a key for an HMAC would have to live next to the
digests anyway. The same digest makes the per-request check cost one hash and one dict lookup
whatever the number of machines: ``sha256(presented)`` is looked up in a dict of digests, and
the one it finds is compared again with :func:`hmac.compare_digest`. A lookup's timing can only
tell an attacker about the digest of a guess they made themselves, never about a real token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import BridgeError

__all__ = [
    "DEFAULT",
    "MachineError",
    "MachineIndex",
    "MachineNameError",
    "MachineNotFound",
    "MachineRecord",
    "check_name",
    "digest",
    "keyring_user",
    "parse_machines",
]

DEFAULT = "default"  # the bridge's own token (keyring user "token", or A2A_BRIDGE_TOKEN)
NAME_MAX = 32
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
NAME_RULE = (
    f"1-{NAME_MAX} characters: lowercase letters, digits, '-' and '_', starting with a "
    "letter or a digit"
)


class MachineError(BridgeError):
    """A machine that cannot be added or removed as asked; the message says why."""


class MachineNotFound(MachineError):
    """No machine has that name."""


class MachineNameError(MachineError, ValueError):
    """A machine name that cannot be used; the message says why."""


def check_name(name: Any) -> str:
    """``name`` when it is a valid machine name, else :class:`MachineNameError`.

    Short and plain on purpose: the name is shown by every UI, is part of a keyring entry and
    of a rule (``@laptop bash(...)``), and is typed on command lines.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        shown = ascii(name)[:40] if isinstance(name, str) else type(name).__name__
        raise MachineNameError(f"invalid machine name {shown}: {NAME_RULE}")
    return name


def keyring_user(name: str) -> str:
    """The keyring entry of a machine's secret (service ``omp-a2a-bridge``)."""
    return f"machine:{name}"


def digest(token: str) -> bytes:
    """SHA-256 of a token, the only form the config keeps."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True, slots=True)
class MachineRecord:
    """One machine as the config keeps it: its name, when it was added, its token's digest,
    and the token itself only when the keyring was unusable (then the 0600 config holds it,
    like the main token's fallback)."""

    name: str
    created: float  # wall clock
    sha256: str  # hex digest of the token
    token: str | None = None  # the fallback copy; None: the secret is in the keyring
    last_seen: float | None = None  # its last request, saved when the bridge stops

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"created": self.created, "sha256": self.sha256}
        if self.token is not None:
            out["token"] = self.token
        if self.last_seen is not None:
            out["last_seen"] = self.last_seen
        return out


_HEX64 = re.compile(r"[0-9a-f]{64}")


def parse_machines(raw: Any) -> tuple[MachineRecord, ...]:
    """The config's ``machines`` object (name -> record); raises ``ValueError("field: what")``
    naming the first bad field, so the config's own error names it."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ValueError('machines: an object {"NAME": {"created": ..., "sha256": ...}}')
    out = []
    for name, rec in raw.items():
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise ValueError(f"machines: names of {NAME_RULE} ({ascii(name)[:40]} is not)")
        if name == DEFAULT:
            raise ValueError(
                "machines.default: absent (the default machine is the bridge's own token, "
                "'token' or the keyring)"
            )
        where = f"machines.{name}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: an object with created and sha256")
        created = rec.get("created")
        if not isinstance(created, int | float) or isinstance(created, bool) or created < 0:
            raise ValueError(f"{where}.created: a time in seconds since the epoch")
        sha = rec.get("sha256")
        if not isinstance(sha, str) or _HEX64.fullmatch(sha) is None:
            raise ValueError(f"{where}.sha256: 64 lowercase hex digits (the token's SHA-256)")
        token = rec.get("token")
        if token is not None and (not isinstance(token, str) or digest(token).hex() != sha):
            raise ValueError(f"{where}.token: the token whose SHA-256 is {where}.sha256")
        seen = rec.get("last_seen")
        if seen is not None and (
            not isinstance(seen, int | float) or isinstance(seen, bool) or seen < 0
        ):
            raise ValueError(f"{where}.last_seen: a time in seconds since the epoch")
        last = None if seen is None else float(seen)
        out.append(MachineRecord(name, float(created), sha, token, last))
    return tuple(out)


class MachineIndex:
    """Which machine a presented token belongs to: the lookup every MCP request makes.

    Copy-on-write: :meth:`add` and :meth:`remove` (the control API's thread or the loop) swap
    in a new dict, so a request never sees one half-changed. The default machine's digest
    follows the live main token (rotation changes it) without being told.
    """

    def __init__(self, records: Iterable[MachineRecord] = ()) -> None:
        # digest -> (name, the stored digest): the entry found is compared again in constant
        # time, so a match never rests on the dict's own (short-circuiting) key compare.
        self._by_digest: Mapping[bytes, tuple[str, bytes]] = {
            d: (r.name, d) for r in records for d in (bytes.fromhex(r.sha256),)
        }
        self._default: tuple[str, bytes] = ("", b"")

    def identify(self, presented: str | None, default_token: str) -> str | None:
        """The machine whose token this is, or None (a 401). One SHA-256 of the presented
        token, one dict lookup, one constant-time compare: the same cost for 1 or 1000
        machines."""
        if presented is None:
            return None
        d = digest(presented)
        cached = self._default
        if cached[0] is not default_token:  # rotated (or first use): hash the new one once
            cached = (default_token, digest(default_token))
            self._default = cached
        if hmac.compare_digest(d, cached[1]):
            return DEFAULT
        entry = self._by_digest.get(d)
        if entry is None or not hmac.compare_digest(d, entry[1]):
            return None
        return entry[0]

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._by_digest.values())

    def add(self, record: MachineRecord) -> None:
        d = bytes.fromhex(record.sha256)
        new = {k: v for k, v in self._by_digest.items() if v[0] != record.name}
        new[d] = (record.name, d)
        self._by_digest = new

    def remove(self, name: str) -> bool:
        """Forget a machine: its token fails from the next request on."""
        if name not in self.names():
            return False
        self._by_digest = {k: v for k, v in self._by_digest.items() if v[0] != name}
        return True

    def __len__(self) -> int:
        return len(self._by_digest)
