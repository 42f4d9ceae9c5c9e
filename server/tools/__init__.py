"""The tool abstraction and the built-in tools (one module per family)."""

from .base import Tool, ToolContext, ToolError, ToolResult, image_block, text_block

__all__ = ["Tool", "ToolContext", "ToolError", "ToolResult", "image_block", "text_block"]
