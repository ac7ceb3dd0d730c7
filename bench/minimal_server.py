"""The yardstick for `sakur4 serve`'s start-up: a one-tool MCP server on the same SDK.

    .venv/bin/python bench/minimal_server.py     # MCP over stdio

What any server built on the SDK pays before it can answer ``initialize``:
the interpreter, the SDK's import, one tool registered, the stdio transport.
bench/startup.py times `sakur4 serve` against it.
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("minimal")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


if __name__ == "__main__":
    server.run("stdio")
