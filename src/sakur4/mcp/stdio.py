"""MCP over stdio, the default transport: one harness spawns one process.

The SDK's ``stdio_server`` reads and writes the wire (and keeps stray prints off
stdout). Between it and the server sit two small relays:

- inbound, in arrival order: each tool call gets its turnstile ticket (other
  requests — ping, tools/list — touch no store and are answered at once, even
  while a long index runs); a line that is not JSON-RPC is answered with a
  protocol error instead of being dropped in silence, and the loop goes on;
- outbound: a response releases its request's ticket if the gate never saw it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)
from pydantic import ValidationError

from sakur4.mcp.turnstile import TicketContext, Turnstile

log = logging.getLogger(__name__)

Writes = Callable[[str], bool]  # tool name -> may it change the store?


class _Receive(Protocol):
    def __aiter__(self) -> Any: ...


class _Send(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...

    async def aclose(self) -> None: ...


async def serve_stdio(server: MCPServer, writes: Writes) -> None:
    """Serve ``server`` on this process's stdin/stdout until stdin closes."""
    async with stdio_server() as (read, write):
        await serve_streams(server, read, write, writes)


async def serve_streams(
    server: MCPServer,
    read: _Receive,
    write: _Send,
    writes: Writes,
) -> None:
    """Serve one ordered connection over a transport's stream pair.

    ``writes(tool_name)`` says whether a tool may change the store (the turnstile
    lets reads overlap each other, never a write).
    """
    turnstile = Turnstile()
    lowlevel = server._lowlevel_server  # the SDK has no public way to run it on streams
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](0)

    async def inbound() -> None:
        async with to_server:
            async for item in read:
                if isinstance(item, Exception):
                    await _answer_malformed(write, item)
                    continue
                msg = item.message
                if isinstance(msg, JSONRPCRequest) and msg.method == "tools/call":
                    ticket = turnstile.admit(msg.id, writes=_is_write(msg, writes))
                    ctx = TicketContext(turnstile, ticket)
                    item = SessionMessage(
                        msg,
                        metadata=ServerMessageMetadata(
                            request_context=ctx, on_request_unanswered=ctx.release_unanswered
                        ),
                    )
                await to_server.send(item)

    async def outbound() -> None:
        # Closing the transport's write side when the server is done is what lets
        # the transport (stdout writer) finish, and the process exit at EOF.
        try:
            async with from_server:
                async for item in from_server:
                    msg = item.message
                    if isinstance(msg, JSONRPCResponse | JSONRPCError) and msg.id is not None:
                        turnstile.settle_answered(msg.id)
                    await write.send(item)
        finally:
            await write.aclose()

    async with anyio.create_task_group() as tg:
        # outbound ends by itself once the server closes its write stream, after
        # the last answer; inbound ends at EOF, which is what stops the server.
        tg.start_soon(outbound)
        async with anyio.create_task_group() as reading:
            reading.start_soon(inbound)
            options = lowlevel.create_initialization_options()
            await lowlevel.run(server_reads, server_writes, options)
            reading.cancel_scope.cancel()


def _is_write(msg: JSONRPCRequest, writes: Writes) -> bool:
    name = msg.params.get("name") if isinstance(msg.params, dict) else None
    # A malformed call is refused by the server; ordering it as a write costs nothing.
    return not isinstance(name, str) or writes(name)


async def _answer_malformed(write: _Send, error: Exception) -> None:
    """Answer a line that is not a JSON-RPC message with a protocol error, then carry on."""
    code, message, request_id = _describe_malformed(error)
    log.warning("malformed message on stdin: %s", message)
    reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
    try:
        await write.send(SessionMessage(reply))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        log.debug("could not answer a malformed message: the connection is closing")


def _describe_malformed(error: Exception) -> tuple[int, str, RequestId | None]:
    if not isinstance(error, ValidationError):
        return PARSE_ERROR, f"Parse error: {type(error).__name__}", None
    details = error.errors()
    if any(d["type"] == "json_invalid" for d in details):
        return PARSE_ERROR, "Parse error: the line is not valid JSON", None
    request_id = _request_id_of(d.get("input") for d in details)
    # The SDK tries each message shape; report the problems of the shape the sender meant.
    meant = "JSONRPCRequest" if request_id is not None else "JSONRPCNotification"
    fields = sorted(
        {".".join(str(p) for p in d["loc"][1:]) for d in details if d["loc"][:1] == (meant,)} - {""}
    )
    hint = f" (problem with: {', '.join(fields[:5])})" if fields else ""
    return INVALID_REQUEST, f"Invalid Request: not a JSON-RPC 2.0 message{hint}", request_id


def _request_id_of(inputs: Iterable[Any]) -> RequestId | None:
    """The id of a malformed request, when it has a usable one, so the client is not
    left waiting; notifications and responses (no ``method``) are answered with null."""
    for value in inputs:
        if isinstance(value, dict) and "method" in value:
            rid = value.get("id")
            if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
                return rid
    return None
