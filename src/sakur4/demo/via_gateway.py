"""Sakur4's strategy: the scripted session through a real gateway, in this process.

The gateway runs on loopback in a thread of its own (uvicorn; its own event loop,
so a Ctrl-C reaches the caller, not the gateway), with a store in a working
directory. Its client to llama-server goes through :class:`SentSpy`, which passes
every request to the real server and keeps a copy of the chat bodies: the anchor
check reads what the server actually received, not what the gateway meant to send.
The correction is pinned in the gateway's store before the call it appears in, as
an agent would through the MCP ``pin_anchor`` tool.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import uvicorn

from sakur4.anchors import pin_anchor
from sakur4.backends.launcher import free_port
from sakur4.backends.report import read_report
from sakur4.demo.agent import OnCall, Refetch, ScriptedAgent, contents, drive, same_call
from sakur4.demo.direct import mentions, timing
from sakur4.demo.records import RequestRecord, StrategyRun
from sakur4.demo.scenario import Need, Request, Session, ToolStep
from sakur4.episodes import open_fold, session_episodes
from sakur4.errors import BackendUnavailable, NotFound
from sakur4.gateway.app import create_app, create_dashboard_app
from sakur4.gateway.dashboard.view import session_path
from sakur4.receipts import Receipt, list_receipts
from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import ensure_project
from sakur4.vocabulary import Tier

CHAT_PATH = "/v1/chat/completions"
SESSION = "sakur4-demo"
# Told the session's dashboard page and the settings of the gateway serving it.
OnDashboard = Callable[[str, Settings], None]


class SentSpy(httpx.AsyncBaseTransport):
    """A pass-through transport to the real server that records the chat bodies sent."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.real = inner or httpx.AsyncHTTPTransport()
        self.sent: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == CHAT_PATH:
            self.sent.append(json.loads(request.content))
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


@dataclass(frozen=True)
class RunningGateway:
    url: str
    settings: Settings
    spy: SentSpy


@contextlib.contextmanager
def running_gateway(
    settings: Settings,
    startup_timeout: float = 300.0,
    backend_transport: httpx.AsyncBaseTransport | None = None,
) -> Iterator[RunningGateway]:
    """Serve the gateway for ``settings`` on loopback until the block exits (any way)."""
    spy = SentSpy(backend_transport)
    port = settings.gateway_port or free_port()
    settings = settings.model_copy(update={"gateway_host": "127.0.0.1", "gateway_port": port})
    app = create_app(settings, transport=spy)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="sakur4-gateway", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout  # the probe runs its experiment first
        while not server.started:
            if not thread.is_alive():
                raise BackendUnavailable(settings.backend or "?", "the gateway failed to start")
            if time.monotonic() > deadline:
                raise BackendUnavailable(settings.backend or "?", "the gateway did not start")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, settings, deadline)
        yield RunningGateway(url, settings, spy)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _wait_ready(url: str, settings: Settings, deadline: float) -> None:
    """Wait until the gateway has probed its backend (``/health`` 200). The gateway
    serves before its probe ends and answers 503 meanwhile; a session that starts then
    loses its first call (the default flags' probe took over 60 s at load 14 here)."""
    token = settings.http_token
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
    why = "no answer"
    with httpx.Client(timeout=10.0, headers=headers) as client:
        while time.monotonic() < deadline:
            try:
                r = client.get(url + "/health")
            except httpx.HTTPError as e:
                why = str(e) or type(e).__name__
            else:
                if r.status_code == 200:
                    return
                why = r.text[:200]
            time.sleep(0.2)
    raise BackendUnavailable(settings.backend or "?", f"the gateway never became ready: {why}")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def keep_dashboard_up(url: str, settings: Settings, echo: Callable[[str], None]) -> None:
    """Serve the dashboard at ``url`` (the session's page) on the finished session's
    store until Ctrl-C: the gateway and its server are gone, the receipts are not.

    The same port as the gateway had, so the address printed during the run stays
    good; another one, said so, if something took it meanwhile.
    """
    parts = urlsplit(url)
    port = parts.port or 0
    if not port or not _port_free(port):
        port = free_port()
        url = parts._replace(netloc=f"127.0.0.1:{port}").geturl()
    s = settings.model_copy(update={"gateway_host": "127.0.0.1", "gateway_port": port})
    config = uvicorn.Config(
        create_dashboard_app(s), host="127.0.0.1", port=port, log_level="warning"
    )
    echo(f"dashboard kept up until Ctrl-C: {url}")
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops, then raises it again
        uvicorn.Server(config).run()
    echo("dashboard stopped")


def event_of(r: Receipt | None) -> str | None:
    """A receipt's management event, or None when the prompt only grew at its end."""
    if r is None or r.chosen_cut is None:
        return None
    return f"{r.verdict}: {len(r.steps)} steps, cut at {r.chosen_cut:,}"


def recoverable(settings: Settings, session: str) -> tuple[int, int, int]:
    """(episodes out of the prompt in full, how many open again in full, dropped)."""
    store = open_store(settings.store)
    try:
        project = ensure_project(store, settings.project_root())
        evicted = opened = dropped = 0
        for e in session_episodes(store, project.id, session):
            if e.tier is Tier.DROPPED:
                dropped += 1
                evicted += 1
            elif e.tier.folded:
                evicted += 1
                with contextlib.suppress(NotFound):
                    back = open_fold(store, project.id, e.id)
                    opened += back.content == e.content and back.content is not None
        return evicted, opened, dropped
    finally:
        store.close()


SHOWN_ID = re.compile(r"open_fold\((\d+)\)")


def fold_refetch(store: Store, project_id: int) -> Refetch:
    """The agent's way back through Sakur4: ``open_fold`` of the episode whose id the
    prompt shows and whose content is the needed result; the same ``read_file`` call
    when no stub for it is shown (dropped, or never recorded)."""

    def refetch(need: Need, sent: Sequence[Mapping[str, Any]]) -> ToolStep:
        for shown in dict.fromkeys(int(x) for x in SHOWN_ID.findall(contents(sent))):
            with contextlib.suppress(NotFound):
                ep = open_fold(store, project_id, shown)
                if ep.content == need.content:
                    return ToolStep(f"reread_{need.turn}", "open_fold", {"id": shown}, ep.content)
        return same_call(need, sent)

    return refetch


async def run_sakur4(
    settings: Settings,
    session: Session,
    *,
    chat: Mapping[str, Any],
    anchor: str,
    label: str = "sakur4",
    on_call: OnCall | None = None,
    backend_transport: httpx.AsyncBaseTransport | None = None,
    on_dashboard: OnDashboard | None = None,
) -> StrategyRun:
    """Replay ``session`` by its scripted agent through a gateway in front of
    ``settings.backend``; ``on_call`` is told each call's processed tokens."""
    with running_gateway(settings, backend_transport=backend_transport) as gw:
        store = open_store(settings.store)
        try:
            project = ensure_project(store, settings.project_root())
            if on_dashboard is not None:
                on_dashboard(gw.url + session_path(project.id, SESSION), gw.settings)
            agent = ScriptedAgent(session, fold_refetch(store, project.id))
            headers = {"X-Sakur4-Session": SESSION}
            receipt_ids: list[int | None] = []
            raw: list[tuple[Request, dict[str, Any] | None, str | None, bool | None]] = []
            pinned = False
            async with httpx.AsyncClient(base_url=gw.url, timeout=settings.backend_timeout) as c:

                async def send(i: int, req: Request) -> Sequence[Mapping[str, Any]]:
                    nonlocal pinned
                    if req.pin:
                        pin_anchor(store, project.id, req.pin, priority=10, session=SESSION)
                        pinned = True
                    before = len(gw.spy.sent)
                    resp = await c.post(
                        CHAT_PATH, json={**chat, "messages": req.messages}, headers=headers
                    )
                    rid = resp.headers.get("x-sakur4-receipt")
                    receipt_ids.append(int(rid) if rid else None)
                    sent = gw.spy.sent[before:]
                    messages: list[Mapping[str, Any]] = sent[-1]["messages"] if sent else []
                    kept = mentions(messages, anchor) if pinned else None
                    if resp.status_code != 200:
                        raw.append((req, None, f"{resp.status_code}: {resp.text[:200]}", kept))
                    else:
                        raw.append((req, resp.json(), None, kept))
                    if on_call is not None:
                        answer = raw[-1][1]
                        on_call((read_report(answer).processed or 0) if answer else 0)
                    return messages

                await drive(agent, send)
            receipts = {
                r.id: r for r in list_receipts(store, project.id, session=SESSION, limit=100_000)
            }
        finally:
            store.close()
        profile = next((r.profile for r in receipts.values()), None)
    records = []
    for i, ((req, answer, failed, kept), rid) in enumerate(zip(raw, receipt_ids, strict=True)):
        receipt = receipts.get(rid) if rid is not None else None
        if answer is None:
            records.append(RequestRecord.refused(i, req, failed, kept, None))
            continue
        # The server's own figures: llama.cpp's timings, else usage (vLLM's cached_tokens).
        rep = read_report(answer)
        records.append(
            RequestRecord(
                index=i,
                turn=req.turn,
                step=req.step,
                prompt_tokens=(rep.reused or 0) + (rep.processed or 0),
                processed=rep.processed or 0,
                reused=rep.reused or 0,
                prompt_ms=timing(answer, "prompt_ms"),
                gen_ms=timing(answer, "predicted_ms"),
                anchor=kept,
                event=event_of(receipt),
                reread=req.reread,
            )
        )
    evicted, opened, dropped = recoverable(settings, SESSION)
    return StrategyRun(
        strategy=label,
        window=int(next((r.context_window for r in receipts.values()), 0)),
        records=tuple(records),
        evicted=evicted,
        recoverable=opened,
        profile=profile,
        detail={
            "dropped": dropped,
            "receipts": [receipts[i].as_dict() for i in receipt_ids if i in receipts],
        },
        live_turns=tuple(agent.live_turns()),
    )
