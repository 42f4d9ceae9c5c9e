"""The box: the kernel sandbox ``bash``, ``rg`` and stdio upstream servers run in.

The policy is data (:mod:`server.box.plan`), computed by pure functions; each mechanism
(bubblewrap on Linux, a Seatbelt profile as text for macOS) only renders that data.
"""

from .probe import known, status

__all__ = ["known", "status"]
