"""The gateway's HTTP app: its routes assembled, its middleware, and the routes that read.

Routes: ``POST /v1/chat/completions`` (plain and SSE, :mod:`.openai`), ``POST
/v1/messages`` and ``/v1/messages/count_tokens`` (Anthropic's Messages API,
:mod:`.anthropic`), both over one turn-serving helper (:mod:`.serving`); ``GET /v1/models``,
``GET /health``, ``GET /sakur4/folds/{id}`` (open a folded episode again),
``GET /sakur4/receipts`` and the dashboard, ``GET /sakur4/`` and ``/sakur4/api/…``
(:mod:`sakur4.gateway.dashboard`). Who may reach them is the shared exposure policy
(:mod:`sakur4.exposure`: loopback by default, a bearer token off loopback, Host and
Origin allow-lists, JSON bodies only, bounded bodies), checked before a route runs.
Errors are mapped once (:mod:`sakur4.gateway.errors`, as Starlette exception
handlers, and :class:`LastResort` for the unexpected): every error a client sees is
a JSON body in its API's shape (OpenAI's, or Anthropic's under ``/v1/messages``) with
the right status, and the gateway stays up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sakur4 import __version__
from sakur4.backends.http import HttpBackend
from sakur4.backends.identify import GATEWAY_IDENTITY
from sakur4.backends.kinds import open_backend
from sakur4.backends.seam import Backend
from sakur4.episodes import open_fold
from sakur4.errors import InputError, Sakur4Error, SettingsError
from sakur4.exposure import ExposurePolicy, checked_token
from sakur4.gateway import anthropic, openai
from sakur4.gateway.dashboard import Dashboard
from sakur4.gateway.dashboard.view import project_by_id
from sakur4.gateway.errors import (
    RETRY,
    ErrorShape,
    Refused,
    classify,
    exception_handlers,
    openai_shape,
    render,
)
from sakur4.gateway.link import BackendLink
from sakur4.gateway.serving import MAX_ID, Routes
from sakur4.probe import ProbeResult
from sakur4.receipts import list_receipts
from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, ensure_project
from sakur4.turns.pipeline import TurnPipeline

log = logging.getLogger("sakur4.gateway")

SURFACE = "the gateway"


def require_token_for(settings: Settings) -> str | None:
    """The bearer token clients must present; refuses to serve off loopback without one."""
    token = settings.http_token.get_secret_value() if settings.http_token else None
    return checked_token(token, settings.gateway_host, SURFACE)


def shape_for(path: str) -> ErrorShape:
    """The error shape of the API a path belongs to: Anthropic's under ``/v1/messages``,
    OpenAI's everywhere else."""
    if path.startswith("/v1/messages"):
        return anthropic.anthropic_shape
    return openai_shape


Handler = Callable[[Request], Awaitable[Response]]


def guarded(policy: ExposurePolicy, handler: Handler) -> Handler:
    """``handler`` behind the exposure policy: a refused request never reaches it."""

    async def route(request: Request) -> Response:
        refusal = policy.check(request.method, request.headers)
        if refusal is not None:
            raise Refused(refusal)
        return await handler(request)

    return route


class StoreApp:
    """The routes that only read the store: folds, receipts and the dashboard.

    Served by the gateway, and alone (:func:`create_dashboard_app`) where no backend
    runs any more: ``sakur4 demo --open`` keeps the dashboard up after its servers stop.
    """

    def __init__(self, settings: Settings, surface: str = SURFACE) -> None:
        self.settings = settings
        token = settings.http_token.get_secret_value() if settings.http_token else None
        self.policy = ExposurePolicy.create(
            surface, settings.gateway_host, token, settings.max_request_bytes
        )
        self.store: Store | None = None
        self.default_project: Project | None = None
        self.dashboard = Dashboard(self._open_store)

    def _open_store(self) -> Store:
        assert self.store is not None
        return self.store

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.store = open_store(self.settings.store)
        try:
            self.default_project = ensure_project(self.store, self.settings.project_root())
            yield
        finally:
            self.store.close()

    def _project(self, request: Request) -> Project:
        """The project a request names: ``?project=ID`` (the dashboard's links), the
        ``X-Sakur4-Project`` root, or the gateway's own."""
        assert self.store is not None
        assert self.default_project is not None
        by_id = request.query_params.get("project")
        if by_id is not None:
            if not by_id.isdigit() or not 0 < int(by_id) <= MAX_ID:
                raise InputError(f"project must be a project id from 1 to {MAX_ID}, got {by_id!r}")
            return project_by_id(self.store, int(by_id))
        given = request.headers.get("x-sakur4-project")
        if not given:
            return self.default_project
        try:
            root = Path(given)
            usable = root.is_absolute() and root.is_dir()
        except (OSError, ValueError):  # a NUL byte, a name too long for the file system
            usable = False
        if not usable:
            raise InputError(f"X-Sakur4-Project must be an existing absolute directory: {given!r}")
        return ensure_project(self.store, root)

    async def fold(self, request: Request) -> Response:
        assert self.store is not None
        given = request.path_params["episode_id"]
        if not given.isdigit() or not 0 < int(given) <= MAX_ID:
            raise InputError(f"episode id must be an integer from 1 to {MAX_ID}, got {given!r}")
        project = self._project(request)
        ep = open_fold(self.store, project.id, int(given))
        return JSONResponse(ep.as_dict())

    async def receipts(self, request: Request) -> Response:
        assert self.store is not None
        project = self._project(request)
        session = request.query_params.get("session")
        rows = list_receipts(self.store, project.id, session=session)
        return JSONResponse([r.as_dict() for r in rows])

    def read_routes(self) -> list[Route]:
        """The store's routes, each behind the exposure policy."""
        reads: list[tuple[str, Handler]] = [
            ("/sakur4/folds/{episode_id}", self.fold),
            ("/sakur4/receipts", self.receipts),
            *self.dashboard.routes(),
        ]
        return [Route(path, guarded(self.policy, h), methods=["GET"]) for path, h in reads]


class GatewayApp(StoreApp):
    """Holds the open store, the backend client and the pipeline for the app's lifetime."""

    def __init__(
        self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        if not settings.backend:
            raise SettingsError("the gateway needs a backend: --backend URL or SAKUR4_BACKEND")
        super().__init__(settings)
        self.transport = transport
        # The pipeline's client, opened for the kind the probe found (the seam).
        self.client: Backend | None = None
        self.link: BackendLink | None = None

    @property
    def pipeline(self) -> TurnPipeline | None:
        """The turn pipeline, once the backend is linked (:mod:`sakur4.gateway.link`)."""
        return self.link.pipeline if self.link is not None else None

    def _build(self, result: ProbeResult) -> TurnPipeline:
        assert self.store is not None
        assert self.settings.backend is not None
        assert self.link is not None
        if self.client is None:
            # The kind's client speaks through the link's: one client per server.
            self.client = open_backend(
                result.kind,
                self.link.url,
                self.settings,
                model=result.model,
                cache_report=result.reuse_verifiable,
                through=self.link.client,
            )
        return TurnPipeline(self.settings, self.store, self.client, result, prober=self.link.client)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        s = self.settings
        assert s.backend is not None
        async with super().lifespan(app):
            assert self.store is not None
            # The server's one client, which owns the transport: of no kind, it identifies
            # any kind of server; the kind found (the pipeline's client, the probe's for
            # its experiment) speaks through it.
            prober = HttpBackend(s.backend, timeout=s.backend_timeout, transport=self.transport)
            self.link = BackendLink(s, self.store, prober, self._build)
            try:
                # The backend is reached in the background: the gateway serves (503s
                # naming the backend) and stops on a signal whatever the backend does.
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self.link.run)
                    try:
                        yield
                    finally:
                        tasks.cancel_scope.cancel()
            finally:
                # The answered turns' slot states still being written: a gateway stopped
                # after an answer keeps it for the next start (a few ms each).
                if self.link.pipeline is not None:
                    with anyio.move_on_after(10):
                        await self.link.pipeline.scheduler.settled()
                await prober.aclose()
                if self.client is not None:
                    await self.client.aclose()

    async def _ready(self) -> TurnPipeline:
        assert self.link is not None
        return await self.link.ready()

    def wire_routes(self) -> Routes:
        """What the wire API routes need of the app (:mod:`.serving`)."""
        return Routes(self._ready, self._project, self.policy)

    async def models(self, request: Request) -> Response:
        """The backend's models, once it is linked: while it is probed the request waits
        as a turn does, then a 503 naming the backend (was a 500 and a traceback: the
        client did not exist yet, issue 41)."""
        gw = await self._ready()
        # A model file listed by its stem, not its path (issue 41).
        return JSONResponse(openai.served_listing(await gw.client.models(), gw.probe.server))

    async def health(self, request: Request) -> Response:
        """The gateway and its backend: 200 when the backend answers, else 503 saying why
        (not reached yet, down, not usable).

        Each call re-reads the backend, so a backend restarted with another ``-c`` or
        other flags is planned for with its new window and checkpoint source from then on.
        """
        assert self.link is not None
        gw = self.link.pipeline
        if gw is None:
            return JSONResponse(
                {
                    "status": self.link.state,
                    "sakur4": __version__,
                    "backend": self.link.url,
                    "profile": None,  # not chosen until the backend is probed
                    "error": self.link.problem or "the backend is being probed",
                },
                status_code=503,
                headers=RETRY,
            )
        try:
            await gw.client.health(time_limit=min(self.settings.backend_timeout, 10.0))
            await gw.watch.reread_window()
        except Sakur4Error as e:
            gw.watch.backend_lost(e)
            return JSONResponse(
                {**self._report(gw), "status": "unavailable", "error": str(e)},
                status_code=503,
                headers=RETRY,
            )
        return JSONResponse(self._report(gw))

    def _report(self, gw: TurnPipeline) -> dict[str, Any]:
        return {
            "status": "ok",
            "sakur4": __version__,
            "backend": gw.client.url,
            "checkpoint_source": gw.probe.checkpoint_source,
            "profile": gw.profile.name,
            "messages_upstream": anthropic.upstream_of(gw),
            "window": gw.window,
            "slot_parking": gw.scheduler.parking(),
        }

    async def identity(self, request: Request) -> Response:
        """``GET /sakur4/gateway``: what this is (``sakur4 probe`` reads it), always 200."""
        assert self.link is not None
        gw = self.link.pipeline
        return JSONResponse(
            {
                "sakur4": __version__,
                "backend": self.link.url,
                "state": self.link.state,
                **({"checkpoint_source": gw.probe.checkpoint_source} if gw else {}),
                **({"window": gw.window} if gw else {}),
            }
        )


class LastResort:
    """An exception no handler maps: logged once with its traceback, answered with a
    shaped 500 (Starlette's own 500 handler answers plain text and re-raises, so the
    server logs it a second time)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as e:
            log.error(
                "unexpected error on %s %s", scope.get("method"), scope.get("path"), exc_info=e
            )
            if not started:
                await render(classify(e), shape_for(scope.get("path", "")))(scope, receive, send)


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


def create_app(settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> Starlette:
    """The gateway ASGI app for ``settings`` (``transport``: an injected httpx transport)."""
    g = GatewayApp(settings, transport)
    wire = g.wire_routes()

    def route(path: str, handler: Handler, method: str) -> Route:
        return Route(path, guarded(g.policy, handler), methods=[method])

    return Starlette(
        middleware=[Middleware(QuietStartup), Middleware(LastResort)],
        routes=[
            route("/v1/chat/completions", partial(openai.chat, wire), "POST"),
            route("/chat/completions", partial(openai.chat, wire), "POST"),
            route("/v1/messages", partial(anthropic.messages, wire), "POST"),
            route("/v1/messages/count_tokens", partial(anthropic.count_tokens, wire), "POST"),
            route("/v1/models", g.models, "GET"),
            route("/health", g.health, "GET"),
            route(GATEWAY_IDENTITY, g.identity, "GET"),
            *g.read_routes(),
        ],
        exception_handlers=exception_handlers(shape_for),
        lifespan=g.lifespan,
    )


def create_dashboard_app(settings: Settings) -> Starlette:
    """The store's routes alone (folds, receipts, the dashboard), no backend: for a
    dashboard kept up after the servers it watched have stopped."""
    g = StoreApp(settings, "the dashboard")
    return Starlette(
        middleware=[Middleware(QuietStartup), Middleware(LastResort)],
        routes=g.read_routes(),
        exception_handlers=exception_handlers(shape_for),
        lifespan=g.lifespan,
    )
