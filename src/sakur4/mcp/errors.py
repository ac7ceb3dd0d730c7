"""Errors at the MCP boundary, mapped once (STYLE: errors are mapped once per surface).

A :class:`~sakur4.errors.Sakur4Error` is the caller's business: it becomes a tool
error result carrying its one-line message. Anything else is a bug: the SDK logs
it with its traceback to stderr and the client sees only
"Error executing tool NAME" — no traceback, no internals.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from sakur4.errors import Sakur4Error

P = ParamSpec("P")
R = TypeVar("R")


def mapped(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a tool function so Sakur4's own errors reach the client as tool errors."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except Sakur4Error as e:
            raise ToolError(str(e)) from e

    return call
