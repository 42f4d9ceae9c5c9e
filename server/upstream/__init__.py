"""Upstream MCP servers behind the bridge (``mcp__<server>__<tool>``): config, transports, tools
and pins.
"""
