"""The SDK server with Sakur4's conventions: how a tool is registered, which ones write."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import ConfigDict

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
        read_only_hint: bool | None = None,
    ) -> None:
        """Register one tool; its name (unless given) and description come from the function.

        ``writes``: the turnstile orders it as a write (it may change the store);
        ``read_only_hint`` (default: not ``writes``) is what clients are told."""
        name = name or fn.__name__
        self.add_tool(
            mapped(fn),
            name=name,
            title=title,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=ToolAnnotations(
                title=title,
                read_only_hint=not writes if read_only_hint is None else read_only_hint,
                open_world_hint=False,
            ),
            structured_output=True,
        )
        tool = self._tool_manager.get_tool(name)  # the SDK returns no handle from add_tool
        assert tool is not None
        _refuse_unknown_arguments(tool)
        if writes:
            self.write_tools.add(name)

    def writes(self, tool_name: str) -> bool:
        """Whether a call to this tool may change the store."""
        return tool_name in self.write_tools


def _refuse_unknown_arguments(tool: Tool) -> None:
    """Make the tool's argument model forbid keys it does not define.

    The SDK builds each tool's argument model with pydantic's default, which drops
    unknown keys in silence (python-sdk#3067, open for 2.x): ``status {"bogus": 1}``
    ran as ``status {}``, and a misspelt ``limt`` ran with the default limit. A
    subclass with ``extra="forbid"`` refuses them, naming each ("bogus: Extra inputs
    are not permitted"), and its schema — the tool's published ``inputSchema`` —
    says ``additionalProperties: false`` so a client can tell before it calls.
    """
    loose = tool.fn_metadata.arg_model
    config = ConfigDict(extra="forbid")
    strict = cast(
        type[ArgModelBase],
        type(loose.__name__, (loose,), {"model_config": config, "__module__": loose.__module__}),
    )
    tool.fn_metadata.arg_model = strict  # read on every call (FuncMetadata's contract)
    # The strict model's schema is the SDK's plus this one key (compared for every tool
    # when this was written); generating it again cost ~1 ms a tool at every start-up.
    tool.parameters = {**tool.parameters, "additionalProperties": False}
