"""The built-in tool set, in the order ``tools/list`` shows it."""

from __future__ import annotations

from .base import Tool
from .files import EditTool, LsTool, WriteTool
from .grep import GrepTool
from .read import ReadTool
from .search import FindTool
from .shell import BashTool


def builtin_tools() -> list[Tool]:
    return [ReadTool(), LsTool(), FindTool(), GrepTool(), WriteTool(), EditTool(), BashTool()]
