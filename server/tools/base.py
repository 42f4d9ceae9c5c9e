"""What a tool is: a name, a schema the model reads, honest annotations, a tier, and ``run``.

Tools never raise tracebacks at the caller: :class:`ToolError` carries a short text that becomes
an ``isError`` result; anything else is logged and reported as a generic failure by the bridge.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..vocab import Tier

if TYPE_CHECKING:
    from ..box.run import BoxRequest
    from ..infra.config import Limits
    from ..policy.paths import CallPaths, Escalation, PathPolicy


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_block(data_b64: str, mime_type: str) -> dict[str, Any]:
    return {"type": "image", "data": data_b64, "mimeType": mime_type}


@dataclass(slots=True)
class ToolResult:
    """What a tool answers: MCP content blocks and whether they describe an error.

    Why not raw JSON: every tool (built-in or upstream) ends in this one shape, which the
    pipeline audits and the MCP endpoint serialises.
    """

    content: list[dict[str, Any]]
    is_error: bool = False

    @classmethod
    def text(cls, text: str, is_error: bool = False) -> ToolResult:
        return cls([text_block(text)], is_error)

    def to_json(self) -> dict[str, Any]:
        return {"content": self.content, "isError": self.is_error}


class ToolError(Exception):
    """A refusal or failure the model should read: its message is the whole result text."""


@dataclass(slots=True)
class ToolContext:
    """Everything a tool may know about the call it runs for: ids, the path policy, the limits,
    what was judged before it ran and the environment its processes get.

    Why one object: a tool never reaches into the bridge; what it may use is exactly this.
    """

    call_id: str
    sid: str
    client: str
    policy: PathPolicy | CallPaths
    limits: Limits
    extra: dict[str, Any] = field(default_factory=dict)
    # What the bridge judged before the call ran, and whether a human approved this very call:
    # a tool that opens something else than what was judged refuses instead of running.
    escalation: Escalation | None = None
    approved: bool = False
    # The environment a process started for this call gets (``bash``); None = the safe list
    # alone (server/infra/childenv.py). Never the bridge's own environment.
    env: dict[str, str] | None = None
    # The box (``bash``): what to build it from. A boxable tool runs in the box unless
    # ``outside_box`` is set, which only a human's decision on this very call does; without a
    # ``box`` it refuses (fail closed).
    box: BoxRequest | None = None
    outside_box: bool = False
    # write/edit: the digest of the file the human's diff was made from ("missing": no file),
    # so an approved change never applies to a file that changed since (None: no diff shown).
    shown_digest: str | None = None

    def resolve(self, path: str | None) -> str:
        return self.policy.resolve(path)


class Tool(abc.ABC):
    """Subclass, set the class attributes, implement :meth:`run`.

    ``path_args`` names the arguments that are file-system paths: the bridge checks each against
    the roots and the protected table and escalates an allow-tier call to prompt when one falls
    outside (see :class:`server.policy.paths.PathPolicy`).
    """

    # Class attributes on the built-in tools, per instance on upstream tools (one class, many).
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] = {}
    default_tier: ClassVar[Tier | None] = None  # None: the config's approval.default_tier
    path_args: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[bool] = False  # path_args are written: persistence locations escalate too
    default_paths: ClassVar[dict[str, str]] = {}  # argument -> value used when it is absent
    # A client that hangs up cancels the running call (upstream tools: the upstream is told).
    cancel_on_disconnect: ClassVar[bool] = False
    # Runs in the box (server/box) unless a human lets one call run outside: ``bash``.
    boxable: ClassVar[bool] = False

    def grants_suspended(self) -> bool:
        """True while no tier, session grant or rule may run this tool without a human.

        Upstream tools whose definition changed since it was approved ("rug pull") say so.
        """
        return False

    def on_allowed(self, how: str) -> None:
        """A tier (``policy``), a ``rule`` or a human decision (``approve``, ``allow_session``,
        ``allow_always``) let a call of this tool run; upstream tools pin their definition."""
        return None

    def approval_info(self) -> Any:
        """Extra facts an approver must see (:class:`server.types.UpstreamInfo`)."""
        return None

    def escalation(self, args: dict[str, Any], policy: PathPolicy | CallPaths) -> Escalation | None:
        """Why this call must not run unattended, or None."""
        for key in self.path_args:
            value = args.get(key, self.default_paths.get(key))
            if isinstance(value, str):
                reason = policy.escalation(value, write=self.writes, probe=self.writes)
                if reason is not None:
                    return reason
        return None

    @abc.abstractmethod
    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...

    def run_now(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult | None:
        """Answer at once, on the bridge loop, when that is cheap and cannot block; else None.

        The bridge tries this before :meth:`run`; a call it answers needs no Task and no thread.
        Only override it for work that is bounded and local (``read`` of a small regular file).
        """
        return None

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.annotations:
            d["annotations"] = dict(self.annotations)
        return d
