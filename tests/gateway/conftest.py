"""A gateway in front of a real llama-server, with a transport that can stage faults.

The transport passes every request through to the real server and records what
was sent; a test can queue faults for the chat endpoint (an HTTP 501/500, a body
that is not JSON, a stream cut mid-way), queue delays before a turn's answer
(chat or messages: a server slow to send its headers, as one prefilling on a CPU)
or strip the reuse figures from answers (a backend that cannot report reuse).
Nothing else is faked.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from gateway_process import gateway_process, silent_backend  # noqa: F401  (fixtures)
from sakur4.gateway.app import create_app
from sakur4.probe import ProbeResult, save_probe
from sakur4.settings import Settings
from sakur4.store import open_store
from served import Served
from tracebacks import logged  # noqa: F401  (autouse: a traceback logged fails the test)

CHAT = "/v1/chat/completions"


class FaultyTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.faults: list[str] = []
        self.strip_reuse = False
        # A server without the Anthropic Messages API: the gateway must translate.
        self.hide_messages_api = False
        self.sent: list[dict[str, Any]] = []
        self.sent_messages: list[dict[str, Any]] = []
        self.paths: list[str] = []  # every request's path, in order
        self.delays: list[float] = []  # seconds before the next turns' answers start
        # Seconds between the next turns' headers and their first bytes (llama-server
        # sends its headers at once and is then silent while it prefills).
        self.body_delays: list[float] = []
        self.delayed = 0  # turns whose delay ran out
        self.cancelled = 0  # turns cancelled during their delay (the gateway let go)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if self.delays and request.url.path in (CHAT, "/v1/messages"):
            try:
                await asyncio.sleep(self.delays.pop(0))
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            self.delayed += 1
        if request.url.path.startswith("/v1/messages"):
            if self.hide_messages_api:
                return httpx.Response(404, json={"error": {"code": 404, "message": "Not Found"}})
            if request.url.path == "/v1/messages":
                self.sent_messages.append(json.loads(request.content))
        if request.url.path == CHAT:
            body = json.loads(request.content)
            self.sent.append(body)
            if self.faults:
                fault = self.faults.pop(0)
                if fault == "501":
                    return httpx.Response(
                        501,
                        json={
                            "error": {
                                "code": 501,
                                "message": "This server does not support it",
                                "type": "not_supported_error",
                            }
                        },
                    )
                if fault == "500":
                    return httpx.Response(500, text="internal server error")
                if fault == "garbage":
                    return httpx.Response(200, text='{"choices": [{"mess')
                if fault == "crash":  # not an httpx error: nothing maps it on purpose
                    raise RuntimeError("injected: a bug in the gateway's path")
                if fault == "cut":
                    return httpx.Response(
                        200,
                        headers={"content-type": "text/event-stream"},
                        content=b'data: {"choices":[{"delta":{"content":"he"}}]}\n\n',
                    )
        response = await self.real.handle_async_request(request)
        if self.body_delays and request.url.path in (CHAT, "/v1/messages"):
            delay = self.body_delays.pop(0)
            real = response.stream
            assert isinstance(real, httpx.AsyncByteStream)

            async def late() -> AsyncIterator[bytes]:
                await asyncio.sleep(delay)
                async for chunk in real:
                    yield chunk

            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=_Late(late(), real),
                extensions=response.extensions,
            )
        if self.strip_reuse and request.url.path == CHAT and not body.get("stream"):
            await response.aread()
            data = json.loads(response.content)
            data.pop("timings", None)
            (data.get("usage") or {}).pop("prompt_tokens_details", None)
            return httpx.Response(response.status_code, json=data)
        return response

    async def aclose(self) -> None:
        await self.real.aclose()


class _Late(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes], real: httpx.AsyncByteStream) -> None:
        self.chunks = chunks
        self.real = real

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        await self.real.aclose()


@dataclass
class RunningGateway:
    url: str
    store: Path
    project: Path
    transport: Any  # FaultyTransport, or a fake server's
    settings: Settings
    server: uvicorn.Server = field(repr=False)
    served: Served = field(repr=False)  # to wait until its requests are done, logs included


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateways:
    """Starts gateways under one directory (one store) and stops them all at the end."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.started: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(
        self,
        backend_url: str,
        hide_messages_api: bool = False,
        store_name: str = "store.db",
        transport: httpx.AsyncBaseTransport | None = None,
        **overrides: Any,
    ) -> RunningGateway:
        """A gateway on ``backend_url``, returned once it has linked to the backend (or
        found it down or unusable): its start-up probe has run. ``transport``: a fake
        server's (tests/fake_kinds.py) instead of the pass-through to the real one."""
        project = self.where / "project"
        project.mkdir(exist_ok=True)
        port = overrides.pop("gateway_port", None) or free_port()
        settings = Settings.load(
            store=self.where / store_name,
            project=project,
            backend=backend_url,
            gateway_port=port,
            **overrides,
        )
        if transport is None:
            transport = FaultyTransport()
            transport.hide_messages_api = hide_messages_api
        app = create_app(settings, transport=transport)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        self.started.append((server, thread))
        deadline = time.monotonic() + 240  # the probe's cache experiment runs at start
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.05)
        identity = f"http://127.0.0.1:{port}/sakur4/gateway"
        # A gateway with a token answers its identity only to the token's bearer.
        token = settings.http_token.get_secret_value() if settings.http_token else None
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        while httpx.get(identity, headers=auth, timeout=30).json()["state"] in (
            "connecting",
            "probing",
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not link to its backend")
            time.sleep(0.05)
        return RunningGateway(
            f"http://127.0.0.1:{port}",
            settings.store,
            project,
            transport,
            settings,
            server,
            Served(server),
        )

    def stop(self, gateway: RunningGateway | None = None) -> None:
        for server, thread in self.started:
            if gateway is None or server is gateway.server:
                server.should_exit = True
                thread.join(timeout=30)


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Gateways]:
    """Gateways on one store, to start, stop and start again within a test."""
    started = Gateways(tmp_path)
    yield started
    started.stop()


# What this session's gateways measured, per backend URL (see start_gateway).
_MEASURED: dict[str, ProbeResult] = {}


@pytest.fixture
def start_gateway(gateways: Gateways) -> Any:
    """``gateways.start``, where a gateway on a server an earlier one of the session
    measured finds that probe stored, as a gateway restarted on its own store does: on a
    shared server whose slot has served, it is then recalled rather than measured again
    (the cache experiment: ~3 s a start on a quiet machine, 20-40 s under load). A fresh
    server's slot is measured anyway. The tests of the probe at start-up call
    ``gateways.start``, which never recalls another store's result."""

    def start(backend_url: str, **kwargs: Any) -> RunningGateway:
        known = _MEASURED.get(backend_url) if kwargs.get("transport") is None else None
        if known is not None:
            store = open_store(gateways.where / kwargs.get("store_name", "store.db"))
            try:
                save_probe(store, known)
            finally:
                store.close()
        gw = gateways.start(backend_url, **kwargs)
        if kwargs.get("transport") is None:
            store = open_store(gw.store)
            try:
                rows = store.query("SELECT result FROM backend_probe ORDER BY id DESC LIMIT 1", ())
            finally:
                store.close()
            if rows:
                _MEASURED[backend_url] = ProbeResult.from_dict(json.loads(rows[0][0]))
        return gw

    return start


@pytest.fixture
def own_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A llama-server of the test's own, to stop and restart (not yet started)."""
    from fixtures_llama import REAL_SETTINGS, locate_backend
    from sakur4.backends.launcher import LlamaServer, ServerFlags

    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    server = LlamaServer(binary, model, ServerFlags(ctx=4096), log_path=tmp_path / "ls.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def module_gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    """For a module whose tests share one gateway (its start-up runs the probe)."""
    gateways = Gateways(tmp_path_factory.mktemp("gateway"))
    yield gateways
    gateways.stop()
