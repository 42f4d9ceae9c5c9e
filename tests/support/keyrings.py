"""Keyring backends for subprocess tests (``PYTHON_KEYRING_BACKEND=tests.support.keyrings.X``).

The OS keyring is a true OS edge: these stand in for a locked collection and for one whose
unlock prompt never returns.
"""

from __future__ import annotations

import os
import threading

from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked


class HangingKeyring(KeyringBackend):
    """Every call blocks forever (an unlock prompt nobody answers); it marks a file first."""

    priority = 1  # type: ignore[assignment]

    def _hang(self) -> None:
        mark = os.environ.get("A2A_TEST_KEYRING_MARK")
        if mark:
            with open(mark, "w") as f:
                f.write("waiting")
        threading.Event().wait()

    def get_password(self, service: str, username: str) -> str | None:
        self._hang()
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        self._hang()

    def delete_password(self, service: str, username: str) -> None:
        self._hang()


class LockedKeyring(KeyringBackend):
    """A locked collection: every call refuses."""

    priority = 1  # type: ignore[assignment]

    def get_password(self, service: str, username: str) -> str | None:
        raise KeyringLocked("the collection is locked")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise KeyringLocked("the collection is locked")

    def delete_password(self, service: str, username: str) -> None:
        raise KeyringLocked("the collection is locked")
