"""Load: concurrent gateway sessions on one multi-slot llama-server; concurrent MCP HTTP clients.

    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.load \
        [--sessions 8] [--turns 10] [--slots 8] [--clients 16] [--seconds 60]

Gateway: ``sessions`` conversations at once through one gateway, against one real
llama-server with ``--slots`` slots (``-np``; ``-c`` is ``slot_ctx`` per slot). The
gateway runs in this process behind a transport that times and records every
request it sends to the server, so:

- *contamination* is checked on what reached the server (each chat body carries
  only its own session's marker and its own slot), on the episodes stored per
  session, on each receipt (its session and slot), and on the rendered templates;
- *own slot and cache*: every session keeps one slot no other session uses, and
  from its second turn the server reports reusing most of the previous prompt;
- *added latency* per turn = time inside the gateway (ASGI request in → last byte
  out) minus the time of the chat request to the server; the server calls the
  gateway makes for its own layout (apply-template, tokenize) count as gateway time.

MCP over HTTP: ``sakur4 serve --http`` in its own process and ``clients`` real
``mcp.Client`` sessions for ``seconds``, each writing notes (and recalling and
asking status in between); then the store must hold exactly the acknowledged notes,
once each. The server's RSS is sampled every second (start = after the first 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from reliability.chat import ChatSession
from reliability.procs import llama_server, rss_kib, sakur4_env, start_http_serve
from sakur4.backends.launcher import free_port
from sakur4.gateway.app import create_app
from sakur4.settings import Settings
from sakur4.store.db import connect

CHAT = "/v1/chat/completions"
MARKER = re.compile(r"MARK[A-Z0-9]+")


@dataclass
class Timing:
    """One request through the gateway, as the gateway's ASGI layer and transport saw it."""

    path: str
    started: float = 0.0
    ended: float = 0.0
    backend_chat: float = 0.0  # the chat request to the server, to its last byte
    backend_aux: float = 0.0  # apply-template / tokenize / slots calls
    aux_calls: int = 0

    @property
    def added(self) -> float:
        return (self.ended - self.started) - self.backend_chat


_current: contextvars.ContextVar[Timing | None] = contextvars.ContextVar("timing", default=None)


class TimedApp:
    """ASGI wrapper: times each request from its arrival to its last body byte."""

    def __init__(self, app: Any, into: list[Timing]) -> None:
        self.app = app
        self.into = into

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t = Timing(scope["path"], started=time.perf_counter())
        _current.set(t)

        async def timed_send(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                t.ended = time.perf_counter()

        await self.app(scope, receive, timed_send)
        self.into.append(t)


class _TimedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, started: float, timing: Timing | None) -> None:
        self.inner = inner
        self.started = started
        self.timing = timing

    async def __aiter__(self) -> Iterator[bytes]:  # type: ignore[override]
        async for chunk in self.inner:
            yield chunk
        self._ended()

    async def aclose(self) -> None:
        # The gateway stops reading at [DONE] and closes the stream: the end of the
        # server's answer is then here, not after the loop above (streamed turns were
        # missing from the figures until this was measured here too).
        self._ended()
        await self.inner.aclose()

    def _ended(self) -> None:
        if self.timing is not None:
            self.timing.backend_chat += time.perf_counter() - self.started
            self.timing = None


class RecordingTransport(httpx.AsyncBaseTransport):
    """Passes every request to the real server; records chat and template bodies and times them."""

    def __init__(self) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.chats: list[dict[str, Any]] = []
        self.templates: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timing = _current.get()
        path = request.url.path
        if path == CHAT:
            self.chats.append(json.loads(request.content))
        elif path == "/apply-template":
            self.templates.append(json.loads(request.content))
        started = time.perf_counter()
        response = await self.real.handle_async_request(request)
        if path == CHAT and json.loads(request.content).get("stream"):
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=_TimedStream(response.stream, started, timing),
            )
        body = await response.aread()
        if timing is not None:
            if path == CHAT:
                timing.backend_chat += time.perf_counter() - started
            else:
                timing.backend_aux += time.perf_counter() - started
                timing.aux_calls += 1
        return httpx.Response(response.status_code, headers=response.headers, content=body)

    async def aclose(self) -> None:
        await self.real.aclose()


@dataclass
class GatewayLoad:
    sessions: int
    slots: int
    turns: int = 0  # answered turns, all sessions
    errors: list[str] = field(default_factory=list)
    contamination: list[str] = field(default_factory=list)
    added_ms: list[float] = field(default_factory=list)
    backend_ms: list[float] = field(default_factory=list)
    aux_ms: list[float] = field(default_factory=list)
    reuse: list[float] = field(default_factory=list)  # server_cached / previous prompt tokens
    slot_of: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def quantile(self, values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    def summary(self) -> str:
        p = self.quantile
        return (
            f"gateway: {self.sessions} sessions on {self.slots} slots, {self.turns} turns in "
            f"{self.seconds:.0f} s, errors {len(self.errors)}, contamination "
            f"{len(self.contamination)}; added latency p50 {p(self.added_ms, 0.5):.1f} ms, "
            f"p95 {p(self.added_ms, 0.95):.1f} ms (of which server layout calls p50 "
            f"{p(self.aux_ms, 0.5):.1f} ms); backend chat p50 {p(self.backend_ms, 0.5):.0f} ms, "
            f"p95 {p(self.backend_ms, 0.95):.0f} ms; reuse from turn 2 min "
            f"{min(self.reuse, default=float('nan')):.2f} median "
            f"{statistics.median(self.reuse) if self.reuse else float('nan'):.2f}"
        )


def _run_gateway(settings: Settings, transport: RecordingTransport, timings: list[Timing]) -> Any:
    app = TimedApp(create_app(settings, transport=transport), timings)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=settings.gateway_port, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)

    def serve() -> None:
        # A failed start-up ends uvicorn with SystemExit(3); the caller raises instead.
        with contextlib.suppress(SystemExit):
            server.run()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 600
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.05)
    return server, thread


def gateway_sessions(
    backend: str, work: Path, *, sessions: int = 8, turns: int = 6, slots: int = 8, seed: int = 0
) -> GatewayLoad:
    """``sessions`` conversations of ``turns`` turns at once through one in-process gateway."""
    project = work / "gw-project"
    project.mkdir(parents=True, exist_ok=True)
    store = work / "gw-store.db"
    settings = Settings.load(
        store=store, project=project, backend=backend, gateway_port=free_port()
    )
    transport = RecordingTransport()
    timings: list[Timing] = []
    server, thread = _run_gateway(settings, transport, timings)
    url = f"http://127.0.0.1:{settings.gateway_port}"
    rng = random.Random(seed)
    chats = [
        ChatSession(f"load-s{i}", random.Random(rng.random()), max_tokens=8)
        for i in range(sessions)
    ]
    out = GatewayLoad(sessions, slots)
    receipts: dict[int, str] = {}
    started = time.perf_counter()
    try:
        asyncio.run(_talk(chats, url, turns, out, receipts))
    finally:
        out.seconds = time.perf_counter() - started
        server.should_exit = True
        thread.join(60)
    for t in timings:
        if t.path == CHAT and t.ended and t.backend_chat:
            out.added_ms.append(t.added * 1000)
            out.backend_ms.append(t.backend_chat * 1000)
            out.aux_ms.append(t.backend_aux * 1000)
    _check_isolation(out, chats, transport, store, receipts)
    return out


async def _talk(
    chats: list[ChatSession], url: str, turns: int, out: GatewayLoad, receipts: dict[int, str]
) -> None:
    async def session(chat: ChatSession) -> None:
        async with httpx.AsyncClient(timeout=600) as http:
            for _ in range(turns):
                result, acked = await chat.turn(http, url)
                if acked is None:
                    out.errors.append(f"{chat.name}: {result.status} {result.error[:200]}")
                    return
                out.turns += 1
                receipts[acked.receipt] = chat.name

    await asyncio.gather(*(session(c) for c in chats))


def _markers(value: Any) -> set[str]:
    return set(MARKER.findall(json.dumps(value)))


def _check_isolation(
    out: GatewayLoad,
    chats: list[ChatSession],
    transport: RecordingTransport,
    store: Path,
    receipts: dict[int, str],
) -> None:
    by_marker = {c.marker: c for c in chats}
    bad = out.contamination
    # What reached the server: one session's marker per body, and that session's slot.
    for body in transport.chats:
        found = _markers(body["messages"])
        if len(found) != 1:
            bad.append(f"a chat body sent to the server mixes sessions: {sorted(found)}")
            continue
        owner = by_marker[found.pop()].name
        slot = body.get("id_slot")
        if out.slot_of.setdefault(owner, slot) != slot:
            bad.append(f"{owner} moved from slot {out.slot_of[owner]} to {slot}")
    for body in transport.templates:
        if len(_markers(body.get("messages"))) > 1:
            bad.append("a rendered template mixes sessions")
    if len(set(out.slot_of.values())) != len(out.slot_of):
        bad.append(f"sessions share slots: {out.slot_of}")
    conn = connect(store)
    try:
        for r in conn.execute("SELECT session, content FROM episodic_stream"):
            foreign = _markers(r[1] or "") - {by_session(chats, r[0])}
            if foreign:
                bad.append(f"episode of {r[0]} holds {sorted(foreign)}")
        rows = conn.execute(
            "SELECT id, session, turn, prompt_tokens, server_cached, detail FROM receipt "
            "ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    previous: dict[str, int] = {}
    for rid, session, _turn, prompt, cached, detail in rows:
        if rid in receipts and receipts[rid] != session:
            bad.append(f"receipt {rid} answered {receipts[rid]} but is filed under {session}")
        slot = json.loads(detail).get("slot")
        if session in out.slot_of and slot != out.slot_of[session]:
            bad.append(f"receipt {rid} of {session} names slot {slot}")
        if session in previous and cached is not None:
            out.reuse.append(cached / previous[session])
        previous[session] = prompt


def by_session(chats: list[ChatSession], session: str) -> str:
    for c in chats:
        if session.startswith(c.base + "-"):
            return c.marker
    return ""


@dataclass
class McpLoad:
    clients: int
    seconds: float
    calls: int = 0
    writes_acked: int = 0
    errors: list[str] = field(default_factory=list)
    lost: int = 0
    duplicated: int = 0
    rss_kib: list[tuple[float, int]] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)

    @property
    def rss_start(self) -> int:
        after = [v for t, v in self.rss_kib if t >= 5.0]
        return after[0] if after else (self.rss_kib[0][1] if self.rss_kib else 0)

    @property
    def rss_end(self) -> int:
        return self.rss_kib[-1][1] if self.rss_kib else 0

    @property
    def rss_peak(self) -> int:
        return max((v for _, v in self.rss_kib), default=0)

    def summary(self) -> str:
        return (
            f"MCP HTTP: {self.clients} clients for {self.seconds:.0f} s, {self.calls} calls "
            f"({self.calls / max(self.seconds, 1e-9):.0f}/s), {self.writes_acked} notes acked, "
            f"errors {len(self.errors)}, lost {self.lost}, duplicated {self.duplicated}; "
            f"RSS start {self.rss_start / 1024:.1f} MiB, end {self.rss_end / 1024:.1f} MiB, "
            f"peak {self.rss_peak / 1024:.1f} MiB"
        )


def mcp_http_clients(work: Path, *, clients: int = 16, seconds: float = 60.0) -> McpLoad:
    """``clients`` MCP sessions against one ``sakur4 serve --http`` for ``seconds``."""
    project = work / "mcp-project"
    project.mkdir(parents=True, exist_ok=True)
    store = work / "mcp-store.db"
    env = sakur4_env(store, project)
    # Register the project first: over HTTP a caller may name only known projects.
    from sakur4.store import open_store
    from sakur4.store.projects import add_project

    s = open_store(store)
    add_project(s, project)
    s.close()
    child, url = start_http_serve(env, work)
    out = McpLoad(clients, seconds)
    acked: set[str] = set()
    try:
        started = time.monotonic()
        sampler_stop = threading.Event()

        def sample() -> None:
            while not sampler_stop.is_set():
                kib = rss_kib(child.pid)
                if kib is not None:
                    out.rss_kib.append((time.monotonic() - started, kib))
                sampler_stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        asyncio.run(_mcp_clients(url, clients, seconds, out, acked))
        out.seconds = time.monotonic() - started
        kib = rss_kib(child.pid)
        if kib is not None:
            out.rss_kib.append((out.seconds, kib))
        sampler_stop.set()
        sampler.join(5)
    finally:
        child.stop()
        out.tracebacks = child.tracebacks()
    conn = connect(store)
    try:
        stored = [
            str(r[0])
            for r in conn.execute("SELECT content FROM episodic_stream WHERE kind = 'note'")
        ]
    finally:
        conn.close()
    out.writes_acked = len(acked)
    out.lost = len(acked - set(stored))
    out.duplicated = len(stored) - len(set(stored))
    return out


async def _mcp_clients(
    url: str, clients: int, seconds: float, out: McpLoad, acked: set[str]
) -> None:
    from mcp import Client

    deadline = time.monotonic() + seconds

    async def client(n: int) -> None:
        rng = random.Random(n)
        i = 0
        try:
            async with Client(url) as c:
                while time.monotonic() < deadline:
                    roll = rng.random()
                    if roll < 0.7:
                        text = f"client {n} note {i} {rng.choice(['alpha', 'beta', 'gamma'])}"
                        i += 1
                        result = await c.call_tool("remember", {"text": text})
                        if not result.is_error:
                            acked.add(text)
                    elif roll < 0.9:
                        result = await c.call_tool("recall", {"query": f"client {n}", "k": 5})
                    else:
                        result = await c.call_tool("status", {})
                    out.calls += 1
                    if result.is_error:
                        out.errors.append(f"client {n}: {result.content}")
        except Exception as e:  # any failure of a client is an error of the run
            out.errors.append(f"client {n}: {type(e).__name__}: {e}")

    await asyncio.gather(*(client(n) for n in range(clients)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--slot-ctx", type=int, default=2048, help="context per slot (-c / -np)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--only", choices=["gateway", "mcp"], default=None)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sakur4-load-"))
    failed = False
    if args.only in (None, "gateway"):
        with llama_server(
            ctx=args.slot_ctx * args.slots, parallel=args.slots, log=work / "llama.log"
        ) as server:
            g = gateway_sessions(
                server.url, work, sessions=args.sessions, turns=args.turns, slots=args.slots
            )
        print(g.summary())
        print(f"  slots: {g.slot_of}")
        for line in (g.errors + g.contamination)[:10]:
            print("  PROBLEM", line)
        failed |= bool(g.errors or g.contamination)
    if args.only in (None, "mcp"):
        m = mcp_http_clients(work, clients=args.clients, seconds=args.seconds)
        print(m.summary())
        print(
            "  RSS MiB over time: "
            + " ".join(
                f"{t:.0f}s:{v / 1024:.0f}" for t, v in m.rss_kib[:: max(1, len(m.rss_kib) // 12)]
            )
        )
        for line in (m.errors + m.tracebacks)[:10]:
            print("  PROBLEM", line)
        failed |= bool(m.errors or m.lost or m.duplicated or m.tracebacks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
