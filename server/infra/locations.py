"""Where the config, the audit log and the bridge's log live, and the config's ``audit`` settings.

Why its own module: ``a2a-bridge audit`` needs only these, and importing :mod:`.config` (rules,
the box, upstream specs and their parsers) costs more than the command's whole budget (100 ms).
:mod:`.config` uses the same functions, so there is one answer to each question.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .. import APP_NAME
from ..errors import ConfigError

DEFAULT_AUDIT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_AUDIT_KEEP = 5


def config_path() -> str:
    if path := os.environ.get("A2A_BRIDGE_CONFIG"):
        return path
    import platformdirs  # here: a path set in the environment needs none of it

    return os.path.join(platformdirs.user_config_dir(APP_NAME, appauthor=False), "config.json")


def audit_path() -> str:
    if path := os.environ.get("A2A_BRIDGE_AUDIT"):
        return path
    import platformdirs

    return os.path.join(platformdirs.user_log_dir(APP_NAME, appauthor=False), "audit.jsonl")


def log_path() -> str:
    """The bridge's own log file (what it prints on stderr), next to the audit log."""
    if path := os.environ.get("A2A_BRIDGE_LOG"):
        return path
    import platformdirs

    return os.path.join(platformdirs.user_log_dir(APP_NAME, appauthor=False), "bridge.log")


def read_config_file(path: str) -> tuple[Any, os.stat_result] | None:
    """The config file's JSON value and its ``stat`` (None: there is no file), or a
    :class:`ConfigError` naming the file and what is wrong, in the words every reader uses."""
    try:
        with open(path, "rb") as f:
            data = f.read()
            st = os.fstat(f.fileno())
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"invalid config at {path}: cannot read it ({e.strerror})") from None
    try:
        return json.loads(data), st
    except ValueError as e:
        raise ConfigError(f"invalid config at {path}: not valid JSON ({e})") from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def audit_settings(path: str, raw: dict[str, Any]) -> tuple[int, int]:
    """The ``audit`` object: the size at which the log rotates and how many files it keeps."""
    audit = raw.get("audit", {})
    if not isinstance(audit, dict):
        raise ConfigError(f"invalid config at {path}: field 'audit' must be an object")
    max_bytes = audit.get("max_bytes", DEFAULT_AUDIT_MAX_BYTES)
    if not _is_int(max_bytes) or max_bytes < 4096:
        raise ConfigError(
            f"invalid config at {path}: field 'audit.max_bytes' must be an integer >= 4096"
        )
    keep = audit.get("keep", DEFAULT_AUDIT_KEEP)
    if not _is_int(keep) or not 1 <= keep <= 100:
        raise ConfigError(
            f"invalid config at {path}: field 'audit.keep' must be an integer in [1, 100]"
        )
    return max_bytes, keep
