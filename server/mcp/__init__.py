"""The MCP wire: protocol rules as pure functions, the HTTP endpoint with its numbered checks,
sessions, connection limits.
"""
