"""The gateway's HTTP surface: an OpenAI-compatible proxy in front of the inference server.

Routes: ``POST /v1/chat/completions`` (plain and SSE), ``GET /v1/models``,
``GET /health``, ``GET /sakur4/folds/{id}`` (open a folded episode again) and
``GET /sakur4/receipts``. Loopback by default; off loopback a bearer token is
required; request bodies are bounded; browsers from other origins are refused.
Every error is an OpenAI-shaped JSON body; the gateway stays up through all of it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.episodes import open_fold
from sakur4.errors import InputError, Sakur4Error, SettingsError
from sakur4.gateway.errors import error_response, openai_error
from sakur4.gateway.turns import DONE, Gateway, Outcome
from sakur4.probe import probe, save_probe
from sakur4.receipts import list_receipts
from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, ensure_project

log = logging.getLogger("sakur4.gateway")


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_token_for(settings: Settings) -> str | None:
    """The bearer token clients must present; refuses to serve off loopback without one."""
    token = settings.http_token.get_secret_value() if settings.http_token else None
    if not is_loopback(settings.gateway_host) and not token:
        raise SettingsError(
            f"the gateway binds {settings.gateway_host}, off loopback: set SAKUR4_HTTP_TOKEN "
            "so clients must present a bearer token"
        )
    return token


# A \uD800-\uDFFF escape: only these can make json.loads return text that is not UTF-8.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


async def _body(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _TooLarge(limit)
            chunks.append(chunk)
    except ClientDisconnect as e:
        # Found by fuzzing: a client that hung up mid-body was logged as "Exception in
        # ASGI application" with a traceback. It is gone; the answer goes nowhere.
        raise InputError("the client hung up before its request body was complete") from e
    raw = b"".join(chunks)
    try:
        # Strict UTF-8: json.loads(bytes) would let encoded surrogates (b"\xed\xa0\x80") in.
        value = json.loads(raw.decode("utf-8-sig"))
        if _SURROGATE_ESCAPE.search(raw):
            # Found by fuzzing: "\ud800" parses to a str that cannot be encoded again,
            # and failed later (storing, hashing, forwarding) as a bare 500.
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError as e:
        raise InputError(
            "the request body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff "
            "without its pair), which is not text"
        ) from e
    except UnicodeDecodeError as e:
        raise InputError(f"the request body is not UTF-8: {e.reason}") from e
    except json.JSONDecodeError as e:
        raise InputError(f"the request body is not valid JSON: {e.msg} at char {e.pos}") from e
    except RecursionError as e:  # found by fuzzing: '[' * 100_000 was a bare 500
        raise InputError("the request body is JSON nested too deeply to parse") from e


class _TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit:,} bytes (SAKUR4_MAX_REQUEST_BYTES)")


class GatewayApp:
    """Holds the open store, the backend client and the pipeline for the app's lifetime."""

    def __init__(self, settings: Settings, transport: Any = None) -> None:
        if not settings.backend:
            raise SettingsError("the gateway needs a backend: --backend URL or SAKUR4_BACKEND")
        self.settings = settings
        self.token = require_token_for(settings)
        self.transport = transport
        self.store: Store | None = None
        self.client: LlamaCppClient | None = None
        self.gateway: Gateway | None = None
        self.default_project: Project | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        s = self.settings
        assert s.backend is not None
        self.store = open_store(s.store)
        try:
            self.client = LlamaCppClient(
                s.backend, timeout=s.backend_timeout, transport=self.transport
            )
            result = await probe(s.backend, s, transport=self.transport)
            save_probe(self.store, result)
            log.info("backend %s: %s (%s)", result.url, result.checkpoint_source, result.reason)
            self.default_project = ensure_project(self.store, s.project_root())
            self.gateway = Gateway(s, self.store, self.client, result)
            yield
        finally:
            if self.client is not None:
                await self.client.aclose()
            self.store.close()

    # -- guards ------------------------------------------------------------------

    def _refused(self, request: Request) -> Response | None:
        origin = request.headers.get("origin")
        if origin and not is_loopback(urlsplit(origin).hostname or ""):
            return openai_error(403, f"sakur4: origin {origin} is not allowed", "forbidden")
        if self.token is not None:
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given, f"Bearer {self.token}"):
                return openai_error(401, "sakur4: a valid bearer token is required", "unauthorized")
        return None

    def _project(self, request: Request) -> Project:
        assert self.store is not None
        assert self.default_project is not None
        given = request.headers.get("x-sakur4-project")
        if not given:
            return self.default_project
        root = Path(given)
        if not root.is_absolute() or not root.is_dir():
            raise InputError(f"X-Sakur4-Project must be an existing absolute directory: {given}")
        return ensure_project(self.store, root)

    # -- routes ----------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        assert self.gateway is not None
        gw = self.gateway
        try:
            body = await _body(request, self.settings.max_request_bytes)
            project = self._project(request)
            prepared = await gw.prepare(body, project, request.headers.get("x-sakur4-session"))
        except _TooLarge as e:
            return openai_error(413, f"sakur4: {e}", "request_too_large")
        except Sakur4Error as e:
            return error_response(e)
        try:
            receipt = await gw.open_receipt(prepared)
        except Sakur4Error as e:
            gw.release(prepared)
            return error_response(e)
        headers = {
            "x-sakur4-receipt": str(receipt.id),
            "x-sakur4-session": prepared.state.session,
            "x-sakur4-summary": receipt.summary(),
        }
        if not body.get("stream"):
            try:
                answer, outcome = await gw.send(prepared)
            except Sakur4Error as e:
                await gw.finish(prepared, receipt, None)
                return error_response(e)
            done = await gw.finish(prepared, receipt, outcome)
            headers["x-sakur4-summary"] = done.summary()
            return JSONResponse(dict(answer), headers=headers)
        return await self._stream(prepared, receipt, headers)

    async def _stream(self, prepared: Any, receipt: Any, headers: dict[str, str]) -> Response:
        gw = self.gateway
        assert gw is not None
        stack = contextlib.AsyncExitStack()
        try:
            lines, outcome = await stack.enter_async_context(gw.stream(prepared))
        except Sakur4Error as e:
            await stack.aclose()
            await gw.finish(prepared, receipt, None)
            return error_response(e)

        settled = False

        async def settle(outcome_or_none: Outcome | None) -> None:
            nonlocal settled
            settled = True
            # A client that disconnects cancels the relay; the receipt and the
            # session's lock must still be settled.
            with anyio.CancelScope(shield=True):
                await stack.aclose()
                await gw.finish(prepared, receipt, outcome_or_none)

        async def relay() -> AsyncIterator[str]:
            try:
                async for line in lines:
                    if line == DONE:
                        # Everything the server said is in: complete the receipt before
                        # the client sees [DONE], so a client that reads it back next
                        # (or hangs up at once) finds the turn settled.
                        await settle(outcome)
                    yield line
            except Sakur4Error as e:
                # Headers are gone: the error travels as a last SSE event.
                err = error_response(e).body
                yield f"data: {bytes(err).decode()}\n\n"
            finally:
                if not settled:
                    await settle(None)

        return StreamingResponse(relay(), media_type="text/event-stream", headers=headers)

    async def models(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        assert self.client is not None
        try:
            return JSONResponse(dict(await self.client.models()))
        except Sakur4Error as e:
            return error_response(e)

    async def health(self, request: Request) -> Response:
        assert self.gateway is not None
        return JSONResponse(
            {
                "status": "ok",
                "backend": self.gateway.client.url,
                "checkpoint_source": self.gateway.probe.checkpoint_source,
                "profile": self.gateway.profile.name,
                "window": self.gateway.window,
            }
        )

    async def fold(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        assert self.store is not None
        try:
            episode_id = int(request.path_params["episode_id"])
            project = self._project(request)
            ep = open_fold(self.store, project.id, episode_id)
        except ValueError:
            return openai_error(
                400, "sakur4: episode id must be an integer", "invalid_request_error"
            )
        except Sakur4Error as e:
            return error_response(e)
        return JSONResponse(
            {
                "id": ep.id,
                "session": ep.session,
                "role": ep.role,
                "kind": ep.kind,
                "tier": ep.tier,
                "tool_name": ep.tool_name,
                "content": ep.content,
            }
        )

    async def receipts(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        assert self.store is not None
        try:
            project = self._project(request)
            session = request.query_params.get("session")
            rows = list_receipts(self.store, project.id, session=session)
        except Sakur4Error as e:
            return error_response(e)
        return JSONResponse([r.as_dict() for r in rows])


class QuietStartup:
    """A start-up that fails on a Sakur4Error (backend down or silent, store unusable)
    reports its one-line message, not Starlette's traceback (found by the reliability
    harness: a backend that never answers printed a traceback at `sakur4 gateway`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def hold_failure(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                held.append(message)  # sent once the cause is known
                return
            await send(message)

        try:
            await self.app(scope, receive, hold_failure)
        except Sakur4Error as e:
            await send({"type": "lifespan.startup.failed", "message": f"sakur4 gateway: {e}"})
            return
        except BaseException:
            for message in held:
                await send(message)
            raise


def create_app(settings: Settings, transport: Any = None) -> Starlette:
    """The gateway ASGI app for ``settings`` (``transport``: an injected httpx transport)."""
    g = GatewayApp(settings, transport)
    return Starlette(
        middleware=[Middleware(QuietStartup)],
        routes=[
            Route("/v1/chat/completions", g.chat, methods=["POST"]),
            Route("/chat/completions", g.chat, methods=["POST"]),
            Route("/v1/models", g.models, methods=["GET"]),
            Route("/health", g.health, methods=["GET"]),
            Route("/sakur4/folds/{episode_id}", g.fold, methods=["GET"]),
            Route("/sakur4/receipts", g.receipts, methods=["GET"]),
        ],
        lifespan=g.lifespan,
    )
