"""Which paths a call may touch without a human looking: inside a root and not sensitive.

The real path (``~`` expanded, relative to the first root, symlinks resolved) decides, so ``..``
and a symlink that points out of a root are judged by where they land.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

# Credentials, keyrings and browser profiles: never auto-allowed, whatever the roots say.
SENSITIVE_DEFAULTS: tuple[str, ...] = (
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.kube",
    "~/.docker/config.json",
    "~/.netrc",
    "~/.git-credentials",
    "~/.pypirc",
    "~/.npmrc",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.local/share/python_keyring",
    "~/.config/python_keyring",
    "~/Library/Keychains",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/.config/microsoft-edge",
    "~/snap/firefox",
    "~/Library/Application Support/Google/Chrome",
    "~/Library/Application Support/Firefox",
    "~/AppData/Roaming/Mozilla",
    "~/AppData/Local/Google/Chrome",
    "~/AppData/Roaming/Microsoft/Credentials",
)


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _norm(path: str) -> str:
    return os.path.normcase(path)  # case-insensitive file systems on Windows


def _prefix(path: str) -> str:
    return path if path.endswith(os.sep) else path + os.sep


def is_within(path: str, parent: str) -> bool:
    """``path`` is ``parent`` or below it; both are normalised real paths, so a prefix test is
    exact (``/a/bc`` is not inside ``/a/b``) and much cheaper than ``commonpath``."""
    return path == parent or path.startswith(_prefix(parent))


class PathPolicy:
    def __init__(
        self,
        roots: Iterable[str],
        sensitive: Iterable[str] = (),
        own_files: Iterable[str] = (),
    ) -> None:
        self.roots = tuple(_real(r) for r in roots) or (_real("~"),)
        self.sensitive = tuple(_real(p) for p in (*SENSITIVE_DEFAULTS, *sensitive))
        # The bridge's config (holds the token on fallback) and audit log with its rotations.
        self.own_files = tuple(_real(p) for p in own_files)
        # Precomputed for the hot path: one str.startswith over a tuple per check.
        self._sensitive_exact = frozenset(_norm(p) for p in self.sensitive)
        self._sensitive_below = tuple(_prefix(_norm(p)) for p in self.sensitive)
        self._roots_exact = frozenset(_norm(r) for r in self.roots)
        self._roots_below = tuple(_prefix(_norm(r)) for r in self.roots)
        self._own = tuple(_norm(p) for p in self.own_files)

    def resolve(self, path: str | None) -> str:
        """Absolute real path for a tool argument; an empty or absent path is the first root."""
        if not path:
            return self.roots[0]
        p = os.path.expanduser(path)
        if not os.path.isabs(p):
            p = os.path.join(self.roots[0], p)
        return os.path.realpath(p)

    def display(self, real: str) -> str:
        """A path as the model should see it: relative to the first root when inside it."""
        root = self.roots[0]
        if is_within(real, root) and real != root:
            return os.path.relpath(real, root)
        return real

    def escalation(self, path: str | None) -> str | None:
        return self.judge(self.resolve(path))

    def judge(self, real: str) -> str | None:
        """Why the already-resolved ``real`` path needs a human, or None."""
        key = _norm(real)
        for own in self._own:
            if key == own or key.startswith(own + "."):
                return f"{real} is one of the bridge's own files"
        if key in self._sensitive_exact or key.startswith(self._sensitive_below):
            where = next(
                s for s in self.sensitive if key == _norm(s) or key.startswith(_prefix(_norm(s)))
            )
            return f"{real} is inside a sensitive location ({where})"
        if not (key in self._roots_exact or key.startswith(self._roots_below)):
            return f"{real} is outside the configured roots"
        return None


class CallPaths:
    """The path policy as one call sees it: each path is resolved once.

    The escalation check and the tool then act on the very same real path (no second
    ``realpath``, and no window in which a swapped symlink could make them disagree).
    """

    def __init__(self, policy: PathPolicy) -> None:
        self.policy = policy
        self.roots = policy.roots
        self._memo: dict[str, str] = {}

    def resolve(self, path: str | None) -> str:
        key = path or ""
        real = self._memo.get(key)
        if real is None:
            real = self._memo[key] = self.policy.resolve(path)
        return real

    def escalation(self, path: str | None) -> str | None:
        return self.policy.judge(self.resolve(path))

    def display(self, real: str) -> str:
        return self.policy.display(real)
