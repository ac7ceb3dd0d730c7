"""MCP over Streamable HTTP, opt-in (``sakur4 serve --http``): shared stores, concurrent clients.

Safety (SPEC §9), each one a line below:
- binds 127.0.0.1 unless told otherwise (``Settings.http_host``);
- the SDK's transport security checks ``Host`` and ``Origin`` (DNS rebinding: a
  web page must not reach a local server through a hostname it controls);
- a bearer token (``SAKUR4_HTTP_TOKEN``) is required on every request when one is
  set, and the server refuses to start off loopback without one;
- request bodies are read whole and bounded (``Settings.max_request_bytes``, 413
  above it); a body that is not JSON-RPC gets a JSON-RPC error from the SDK, and a
  client that hangs up mid-body is dropped quietly, never a crash or a traceback.

There is no turnstile here: HTTP requests have no arrival order to keep. Concurrent
writers are kept apart by the store's write transactions.
"""

from __future__ import annotations

import hmac
import ipaddress
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
from sakur4.settings import Settings

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
MIN_TOKEN_LENGTH = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_BINDS = ("0.0.0.0", "::", "")  # noqa: S104 - named here to be recognised, not used


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bearer_token(settings: Settings) -> str | None:
    """The token every request must carry, or None; refuses an unsafe configuration."""
    token = settings.http_token.get_secret_value() if settings.http_token else None
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise SettingsError(
            f"SAKUR4_HTTP_TOKEN is too short ({len(token)} characters; use at least "
            f"{MIN_TOKEN_LENGTH}, e.g. from `python -c 'import secrets; "
            "print(secrets.token_urlsafe())'`)"
        )
    if token is None and not is_loopback(settings.http_host):
        raise SettingsError(
            f"refusing to serve MCP over HTTP on {settings.http_host}, which is not a loopback "
            "address, without a bearer token: set SAKUR4_HTTP_TOKEN (or bind 127.0.0.1)"
        )
    return token


def transport_security(host: str) -> TransportSecuritySettings:
    """Host and Origin allow-lists: loopback always, plus the address the server binds."""
    names = list(LOOPBACK_NAMES)
    if host in WILDCARD_BINDS:
        # Bound everywhere: clients may arrive under this machine's own names.
        names += [socket.gethostname(), socket.getfqdn()]
    elif not is_loopback(host):
        names.append(f"[{host}]" if ":" in host else host)
    hosts = [h for n in names for h in (n, f"{n}:*")]
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class BearerGuard:
    """Refuse any HTTP request that does not carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self.token
            ):
                reply = JSONResponse(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32001,
                            "message": "unauthorized: send 'Authorization: Bearer "
                            "<SAKUR4_HTTP_TOKEN>'",
                        },
                    },
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="sakur4"'},
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
    token = bearer_token(settings)
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        max_request_body_size=settings.max_request_bytes,
        transport_security=transport_security(settings.http_host),
        host=settings.http_host,
    )
    # Outermost first: the token is checked before any body is read.
    app = WholeBodies(app, settings.max_request_bytes)
    return BearerGuard(app, token) if token is not None else app


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
