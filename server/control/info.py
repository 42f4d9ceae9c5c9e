""":class:`ControlInfo`: what ``control.json`` says about the running bridge, as a plain record.

Why a module of its own: :class:`~server.errors.AlreadyRunning` carries one, and the errors
module is imported by :mod:`server.control.controlfile`; with the record here (importing
nothing) neither needs the other's module, so no import cycle joins them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ControlInfo:
    """How to reach the running bridge: its pid, control API URL, secret and MCP URL."""

    pid: int
    url: str
    secret: str
    mcp_url: str

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http") :] + "api/events"
