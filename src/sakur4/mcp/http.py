"""MCP over Streamable HTTP, opt-in (``sakur4 serve --http``): shared stores, concurrent clients.

Safety (SPEC §9): the network-exposure policy every HTTP surface shares
(:mod:`sakur4.exposure`), checked by :class:`ExposureGuard` before the SDK sees a
request:
- binds 127.0.0.1 unless told otherwise (``Settings.http_host``); a wildcard bind
  is off loopback;
- ``Host`` and ``Origin`` allow-lists (DNS rebinding: a web page must not reach a
  local server through a hostname it controls): 421 and 403;
- a bearer token (``SAKUR4_HTTP_TOKEN``, 16 characters at least) is required on
  every request when one is set, and the server refuses to start off loopback
  without one;
- POST bodies only as JSON (415 otherwise), read whole and bounded
  (``Settings.max_request_bytes``, 413 above it); a body that is not JSON-RPC gets a
  JSON-RPC error from the SDK, and a client that hangs up mid-body is dropped
  quietly, never a crash or a traceback.

There is no turnstile here: HTTP requests have no arrival order to keep. Concurrent
writers are kept apart by the store's write transactions.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sakur4.errors import SettingsError
from sakur4.exposure import ExposurePolicy, checked_token
from sakur4.settings import Settings

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
SURFACE = "MCP over HTTP"
# JSON-RPC's range for server errors: -32001 is "unauthorized" (the token), the
# others say which rule refused the request.
_CODES = {401: -32001, 403: -32003, 415: -32005, 421: -32006}


def _token(settings: Settings) -> str | None:
    return settings.http_token.get_secret_value() if settings.http_token else None


def bearer_token(settings: Settings) -> str | None:
    """The token every request must carry, or None; refuses an unsafe configuration."""
    return checked_token(_token(settings), settings.http_host, SURFACE)


def exposure_policy(settings: Settings) -> ExposurePolicy:
    return ExposurePolicy.create(
        SURFACE, settings.http_host, bearer_token(settings), settings.max_request_bytes
    )


class ExposureGuard:
    """The shared exposure policy in front of the endpoint; a refusal is a JSON-RPC error."""

    def __init__(self, app: ASGIApp, policy: ExposurePolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.policy.check(scope["method"], Headers(scope=scope))
            if refusal is not None and refusal.status == 413:
                await too_large(self.policy.max_body)(scope, receive, send)  # as when counted
                return
            if refusal is not None:
                reply = JSONResponse(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": _CODES.get(refusal.status, -32000),
                            "message": refusal.message,
                        },
                    },
                    status_code=refusal.status,
                    headers=(
                        {"WWW-Authenticate": 'Bearer realm="sakur4"'}
                        if refusal.status == 401
                        else None
                    ),
                )
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)


def too_large(limit: int) -> JSONResponse:
    """413 as a JSON-RPC error: an MCP client parses every answer as JSON-RPC."""
    message = f"request body too large: over {limit:,} bytes (SAKUR4_MAX_REQUEST_BYTES)"
    error = {"code": INVALID_REQUEST, "message": message}
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": error}, status_code=413)


class WholeBodies:
    """Hand the SDK only requests whose body arrived whole, and no larger than ``limit``.

    A client that hangs up mid-body is gone, not an error: its request is dropped with
    a debug line (the SDK would log Starlette's ClientDisconnect with a traceback).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                log.debug("client hung up before its request body was complete")
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await too_large(self.limit)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def http_app(server: MCPServer, settings: Settings) -> ASGIApp:
    """The ASGI app: the SDK's Streamable HTTP endpoint at ``/mcp`` behind Sakur4's guards."""
    policy = exposure_policy(settings)
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        max_request_body_size=settings.max_request_bytes,
        # Host and Origin are the guard's (the same lists as the gateway's); the SDK
        # would otherwise turn on its own copy for a loopback host.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=settings.http_host,
    )
    # Outermost first: the policy is checked before any body is read.
    app = WholeBodies(app, settings.max_request_bytes)
    return ExposureGuard(app, policy)


def bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket first, so the announced URL carries the real port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as e:
        raise SettingsError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e


async def serve_http(
    server: MCPServer, settings: Settings, announce: Callable[[str], None] = print
) -> None:
    """Serve until interrupted; ``announce`` gets the URL once the socket is bound."""
    app = http_app(server, settings)
    sock = bind(settings.http_host, settings.http_port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=3,
        server_header=False,
    )
    announce(f"http://{shown}:{port}{MCP_PATH}")
    await uvicorn.Server(config).serve(sockets=[sock])
