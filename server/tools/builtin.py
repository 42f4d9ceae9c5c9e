"""The built-in tool set, in the order ``tools/list`` shows it."""

from __future__ import annotations

from ..infra.childenv import EnvSpec, build_env
from .base import Tool
from .files import EditTool, LsTool, WriteTool
from .grep import GrepTool
from .read import ReadTool
from .search import FindTool
from .shell import BashTool


def builtin_tools(bash_env: EnvSpec | None = None) -> list[Tool]:
    """``bash_env``: the config's ``bash.env``, so the command check expands ``$VAR`` as the
    shell will (the shell's environment itself is built per call by the bridge)."""
    env = build_env(bash_env or EnvSpec()).env
    return [ReadTool(), LsTool(), FindTool(), GrepTool(), WriteTool(), EditTool(), BashTool(env)]
