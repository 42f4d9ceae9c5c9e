"""Where the bearer token comes from, and how it is rotated.

Precedence: ``A2A_BRIDGE_TOKEN`` (process only, never written) > the OS keyring (service
``omp-a2a-bridge``, user ``token``) > the config file (0600), which is used when the user chose
``token_store: "file"`` or, with a loud warning, when the keyring is unusable. Keyring calls can
block on a locked collection, so each runs in a worker thread with a timeout.
"""

from __future__ import annotations

import base64
import concurrent.futures
import logging
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..present.secrets import remember
from ..vocab import TokenSource  # re-exported: defined with the other vocabularies
from .config import TOKEN_MIN_LENGTH, Config, ConfigError, update_config, valid_token

log = logging.getLogger(__name__)

KEYRING_SERVICE = "omp-a2a-bridge"
KEYRING_USER = "token"
KEYRING_TIMEOUT_S = 5.0
ENV_TOKEN = "A2A_BRIDGE_TOKEN"

# Backends that store nothing, refuse everything, or keep the secret in plain text.
_UNUSABLE_BACKENDS = ("keyring.backends.fail", "keyring.backends.null", "keyrings.alt")


class KeyringUnavailable(Exception):
    """The keyring cannot be used right now; the message says why."""


def generate_token() -> str:
    """32 random bytes, base64url without padding: 43 characters."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def _call_with_timeout(fn: Callable[[], Any], timeout: float) -> Any:
    # A daemon thread, not an executor: a keyring blocked forever on an unlock prompt must not
    # keep the process alive at exit.
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def work() -> None:
        try:
            fut.set_result(fn())
        except BaseException as e:
            fut.set_exception(e)

    threading.Thread(target=work, name="a2a-keyring", daemon=True).start()
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        raise KeyringUnavailable(f"the keyring did not answer within {timeout:g} s") from None


class KeyringStore:
    """The OS keyring, refusing backends that would not keep the token safe."""

    def __init__(self, timeout: float = KEYRING_TIMEOUT_S) -> None:
        self.timeout = timeout

    def _backend(self) -> Any:
        import keyring

        kr = keyring.get_keyring()
        if type(kr).__module__.startswith(_UNUSABLE_BACKENDS):
            raise KeyringUnavailable(f"no usable keyring backend ({type(kr).__name__})")
        return kr

    def get(self, user: str = KEYRING_USER) -> str | None:
        def work() -> str | None:
            try:
                return self._backend().get_password(KEYRING_SERVICE, user)
            except KeyringUnavailable:
                raise
            except Exception as e:
                raise KeyringUnavailable(f"{type(e).__name__}: {e}") from None

        return _call_with_timeout(work, self.timeout)

    def set(self, token: str, user: str = KEYRING_USER) -> None:
        def work() -> None:
            try:
                self._backend().set_password(KEYRING_SERVICE, user, token)
            except KeyringUnavailable:
                raise
            except Exception as e:
                raise KeyringUnavailable(f"{type(e).__name__}: {e}") from None

        _call_with_timeout(work, self.timeout)

    def delete(self, user: str) -> bool:
        """Remove one entry (a revoked machine's secret); False when there was none."""

        def work() -> bool:
            import keyring.errors

            try:
                self._backend().delete_password(KEYRING_SERVICE, user)
            except KeyringUnavailable:
                raise
            except keyring.errors.PasswordDeleteError:
                return False
            except Exception as e:
                raise KeyringUnavailable(f"{type(e).__name__}: {e}") from None
            return True

        return bool(_call_with_timeout(work, self.timeout))


@dataclass
class TokenState:
    """The live token, where it came from, and a warning for the user (e.g. a keyring fallback)."""

    token: str
    source: TokenSource
    warning: str | None = None


class TokenStore:
    """Resolves the token at start and rotates it; the live value is ``self.token``."""

    def __init__(self, config: Config, keyring_store: KeyringStore | None = None) -> None:
        self.config = config
        self.keyring = keyring_store or KeyringStore()
        self._state: TokenState | None = None

    @property
    def state(self) -> TokenState | None:
        return self._state

    @state.setter
    def state(self, value: TokenState | None) -> None:
        """Every token this store holds is a known secret: no UI, log or audit line shows it
        (or a piece of it), whatever their caps."""
        if value is not None:
            remember(value.token, "<token>")
        self._state = value

    @property
    def token(self) -> str:
        assert self.state is not None, "resolve() first"
        return self.state.token

    def resolve(self) -> TokenState:
        env = os.environ.get(ENV_TOKEN)
        if env is not None:
            if not valid_token(env):
                raise ConfigError(
                    f"{ENV_TOKEN} must be at least {TOKEN_MIN_LENGTH} characters, no whitespace"
                )
            self.state = TokenState(env, TokenSource.ENV)
            return self.state
        if self.config.token_store == "file":
            self.state = TokenState(self._file_token(), TokenSource.FILE)
            return self.state
        try:
            token = self.keyring.get()
            if token is not None and not valid_token(token):
                raise ConfigError(
                    f"the token in the keyring ({KEYRING_SERVICE}/{KEYRING_USER}) must be at "
                    f"least {TOKEN_MIN_LENGTH} characters, no whitespace"
                )
            if token is None:
                # A token left in the file by an earlier fallback moves into the keyring, so
                # remote clients keep working when the keyring comes back.
                token = self.config.token or generate_token()
                self.keyring.set(token)
                if self.config.token is not None:
                    update_config(self.config.path, {"token": None})
            self.state = TokenState(token, TokenSource.KEYRING)
        except KeyringUnavailable as e:
            warning = (
                f"keyring unavailable ({e}); the token is stored in {self.config.path} "
                "(mode 0600) instead"
            )
            log.warning(warning)
            self.state = TokenState(self._file_token(), TokenSource.FILE, warning)
        return self.state

    def _file_token(self) -> str:
        if self.config.token is not None:
            return self.config.token
        token = generate_token()
        update_config(self.config.path, {"token": token})
        return token

    def rotate(self) -> str:
        """Persist a new token first, then switch to it; the old one stops working at once."""
        assert self.state is not None
        if self.state.source == TokenSource.ENV:
            raise ConfigError(f"the token comes from {ENV_TOKEN}; change that variable instead")
        new = generate_token()
        if self.state.source == TokenSource.KEYRING:
            self.keyring.set(new)
        else:
            update_config(self.config.path, {"token": new})
        self.state = TokenState(new, self.state.source, self.state.warning)
        return new
