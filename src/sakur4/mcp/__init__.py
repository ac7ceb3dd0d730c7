"""The MCP surface: Sakur4's memory and context tools for any MCP harness (SPEC §2, §9).

- :mod:`.server` builds the server: every tool, the error mapping, the turnstile gate.
- :mod:`.tools` holds the tools, one module per service they expose.
- :mod:`.host` resolves each call's project and owns the store the tools share.
- :mod:`.turnstile` keeps one stdio connection's requests in arrival order.
- :mod:`.stdio` and :mod:`.http` are the two transports (stdio by default).

This package is ``sakur4.mcp``; ``import mcp`` inside it is the SDK (absolute imports).
"""

from sakur4.mcp.build import build_server

__all__ = ["build_server"]
