"""Errors at the MCP boundary, mapped once (STYLE: errors are mapped once per surface).

A :class:`~sakur4.errors.Sakur4Error` is the caller's business: it becomes a tool
error result carrying its one-line message. Anything else is a bug: the SDK logs
it with its traceback to stderr and the client sees only
"Error executing tool NAME" — no traceback, no internals.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from sakur4.errors import Sakur4Error


def mapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a tool function (sync or async) so Sakur4's own errors become tool errors.

    A sync tool stays sync: the SDK runs it on a worker thread, off the event loop.
    """
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except Sakur4Error as e:
                raise ToolError(str(e)) from e

        return call_async

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Sakur4Error as e:
            raise ToolError(str(e)) from e

    return call
