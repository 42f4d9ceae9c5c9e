"""The errors a user sees: one base class, each with its exit code and its one-line message.

Why one base: every front end ends the same way on them. The CLI's ``main`` turns any
:class:`BridgeError` into ``a2a-bridge: <message>`` on stderr and its ``exit_code``
(:func:`exit_line`); the tray prints the same line. Here: the ones the front ends raise and
catch. Defined next to their code but subclasses of :class:`BridgeError`:
:class:`~server.policy.rules.RuleError` (a rule that cannot be used) and
:class:`~server.types.DecisionError` (a decision that cannot be applied as asked).

Not here, on purpose: errors that never reach a user as such — a tool's own failure
(``ToolError``, an ``isError`` result), a path that changed under a call, a tray backend or
notification server that is missing (each caught where it is raised and turned into a
fallback), the HTTP refusals of the control API (``Refused``: a status and a JSON body).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .present.textsafe import safe

if TYPE_CHECKING:
    from .control.info import ControlInfo


class BridgeError(Exception):
    """A failure the user is told about in one line; ``exit_code`` is what the CLI returns."""

    exit_code: int = 1

    def message(self) -> str:
        """The line after ``a2a-bridge: `` (the exception's text unless a subclass says more)."""
        return str(self)


class ConfigError(BridgeError):
    """The config cannot be used; the message is shown to the user as is."""


class RuntimeDirError(BridgeError):
    """The runtime directory cannot hold the control secret safely; the message says why."""


class StartupError(BridgeError):
    """The bridge could not start; the message says why."""

    def message(self) -> str:
        return f"failed to start: {self}"


class AlreadyRunning(BridgeError):
    """Another instance holds the control file: not a failure, so the exit code is 0."""

    exit_code = 0

    def __init__(self, info: ControlInfo) -> None:
        super().__init__(f"already running (pid {info.pid}, {info.mcp_url})")
        self.info = info


class NotRunning(BridgeError):
    """No live bridge answers through the control file."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"a2a-bridge is not running (no live control file at {path}); "
            "start it with 'a2a-bridge' or 'a2a-bridge serve'"
        )


class ControlError(BridgeError):
    """The control API refused a request; ``status`` is its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    def message(self) -> str:
        # The server's words may quote agent text.
        return f"{safe(str(self))} (HTTP {self.status})"


def exit_line(e: BridgeError) -> str:
    """The one line a front end prints for ``e``."""
    return f"a2a-bridge: {e.message()}"
