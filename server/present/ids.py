"""What every display shows instead of a session id.

Session ids are secrets (a grant such as "Allow for this session" rides on them), so only the
control API carries them; logs, the audit, the CLI and the UIs show this short hash.
"""

from __future__ import annotations

import hashlib


def sid_hash(sid: str) -> str:
    """The 12-hex SHA-256 prefix of a session id: stable, short, not the secret."""
    return hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
