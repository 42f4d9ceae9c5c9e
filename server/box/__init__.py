"""The box: the kernel sandbox ``bash``, ``rg`` and stdio upstream servers run in.

The policy is data (:mod:`server.box.plan`), computed by pure functions; each mechanism
(bubblewrap on Linux, a Seatbelt profile as text for macOS) only renders that data.
``check()`` finds out once whether this machine can box (blocking: it starts ``bwrap``);
``known()`` never blocks and is None until then.
"""

from .probe import known
from .probe import probe as check

__all__ = ["check", "known"]
