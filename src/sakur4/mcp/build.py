"""Building the MCP server: every Sakur4 tool over one host's store and projects."""

from __future__ import annotations

from sakur4.mcp import tools
from sakur4.mcp.host import ToolHost
from sakur4.mcp.toolserver import ToolServer


def build_server(host: ToolHost) -> ToolServer:
    """The MCP server exposing every Sakur4 tool over ``host``'s store and projects."""
    server = ToolServer()
    for module in tools.MODULES:
        module.register(server, host)
    return server
