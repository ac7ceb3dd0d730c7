"""The SDK server with Sakur4's conventions: how a tool is registered, which ones write."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from sakur4 import __version__
from sakur4.mcp.errors import mapped
from sakur4.mcp.turnstile import gate

INSTRUCTIONS = """\
Sakur4 is this project's memory. The Symbolic Ledger (ledger_*, repo_map, impact) is \
parsed from the code and can be trusted; Atlas summaries (atlas_*) are written by models \
and come back marked [STALE] when the code they describe changed. remember/recall keep \
notes across compaction; open_fold shows an episode the context engine folded away; \
anchors are constraints pinned so they survive compaction. Every tool works on one \
project: the `project` argument (an absolute root path) or this server's own project."""


class ToolServer(MCPServer):
    """The SDK's server with Sakur4's tools, and which of them change the store."""

    def __init__(self) -> None:
        super().__init__(
            "sakur4", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
        )
        self.write_tools: set[str] = set()
        # Outermost, so a ticketed request reaches the gate before any await can
        # cancel it (see turnstile.Ticket.claimed).
        self.middleware.insert(0, gate)

    def add(
        self,
        fn: Callable[..., Any],
        *,
        title: str,
        writes: bool,
        name: str | None = None,
    ) -> None:
        """Register one tool; its name (unless given) and description come from the function."""
        name = name or fn.__name__
        self.add_tool(
            mapped(fn),
            name=name,
            title=title,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=ToolAnnotations(
                title=title, read_only_hint=not writes, open_world_hint=False
            ),
            structured_output=True,
        )
        if writes:
            self.write_tools.add(name)

    def writes(self, tool_name: str) -> bool:
        """Whether a call to this tool may change the store."""
        return tool_name in self.write_tools
