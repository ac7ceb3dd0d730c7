"""Issue 41, situation 7: every route answers during start-up, never a 500.

``GET /v1/models`` sent while the gateway was still probing its backend answered 500,
and the gateway logged an ``AssertionError`` traceback (the backend's client did not
exist yet). Here every route of the app's own route table (every method it takes) is
called while the backend is probed, on ``sakur4 gateway`` as a user runs it, and no
route may answer 500 nor the gateway log a traceback.

What each route answers while the backend is not linked, decided per route
(:data:`DURING_STARTUP`): a route that needs the backend (the wire APIs and
``/v1/models``) waits for the probe as a turn does, then answers 503 in its API's error
shape, naming the backend, with ``Retry-After``; ``/health`` says 503 with its report
("probing" or "waiting") and ``Retry-After``, since a health check that passed before the
backend is usable would let a client in too early; the routes that read only the store
(folds, receipts, the dashboard) and the gateway's identity need no backend and answer
as they always do.

The fault backend (a socket that accepts and never answers: a server slow to answer its
probe) is named so; the second test is the real llama-server, hit the moment the gateway
answers, while its cache experiment runs.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from gateway_process import GatewayProcess, SilentBackend, wait_for
from sakur4.backends.launcher import LlamaServer
from sakur4.gateway.app import create_app
from sakur4.gateway.errors import RETRY_AFTER_S
from sakur4.settings import Settings
from tracebacks import traceback_in

USER = [{"role": "user", "content": "Hi."}]
# A body for every POST route (a new one fails the test until it has one here).
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": USER, "max_tokens": 1},
    "/chat/completions": {"messages": USER, "max_tokens": 1},
    "/v1/messages": {"model": "local", "max_tokens": 1, "messages": USER},
    "/v1/messages/count_tokens": {"model": "local", "messages": USER},
}
# Path parameters: an episode, project and session the fresh store may not hold, and
# a dashboard file it ships.
PARAMS = {"episode_id": "1", "project_id": "1", "session": "none", "name": "dashboard.css"}

OPENAI, ANTHROPIC, HEALTH, PLAIN = "openai", "anthropic", "health", "plain"


@dataclass(frozen=True)
class Expected:
    """What a route answers while the backend is being probed (or is not reached)."""

    status: int
    shape: str  # the body: an OpenAI or Anthropic error, /health's report, anything else
    why: str


NEEDS_BACKEND = "needs the backend: waits for the probe as a turn does, then 503"
WAITS = (
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/models",
)
DURING_STARTUP: dict[str, Expected] = {
    "/v1/chat/completions": Expected(503, OPENAI, NEEDS_BACKEND),
    "/chat/completions": Expected(503, OPENAI, NEEDS_BACKEND),
    "/v1/messages": Expected(503, ANTHROPIC, NEEDS_BACKEND),
    "/v1/messages/count_tokens": Expected(503, ANTHROPIC, NEEDS_BACKEND + " (it tokenizes)"),
    "/v1/models": Expected(503, OPENAI, NEEDS_BACKEND + " (the backend's models)"),
    "/health": Expected(503, HEALTH, "not healthy until the backend is usable"),
    "/sakur4/gateway": Expected(200, PLAIN, "what this is and its state: no backend needed"),
    "/sakur4/folds/{episode_id}": Expected(404, OPENAI, "the store: no such episode yet"),
    "/sakur4/receipts": Expected(200, PLAIN, "the store: no receipts yet"),
    "/sakur4/": Expected(200, PLAIN, "the dashboard reads the store"),
    "/sakur4/projects/{project_id}/sessions/{session:path}": Expected(
        404, PLAIN, "the store: no such session yet"
    ),
    "/sakur4/api/projects": Expected(200, PLAIN, "the store"),
    "/sakur4/api/projects/{project_id}/sessions/{session:path}": Expected(
        404, OPENAI, "the store: no such session yet"
    ),
    "/sakur4/static/{name}": Expected(200, PLAIN, "a file shipped in the package"),
}


@dataclass(frozen=True)
class Call:
    method: str
    route: str  # the route's path as the table names it
    url_path: str
    body: dict[str, Any] | None


def route_table(tmp_path: Path) -> list[Call]:
    """One call per route and method of the gateway's app, as ``create_app`` builds it."""
    settings = Settings.load(store=tmp_path / "table.db", backend="http://127.0.0.1:9")
    calls = []
    for route in create_app(settings).routes:
        assert isinstance(route, Route), route
        path = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: PARAMS[m.group(1)], route.path)
        for method in sorted(route.methods or ()):
            body = BODIES[route.path] if method == "POST" else None
            calls.append(Call(method, route.path, path, body))
    assert {c.route for c in calls} == set(DURING_STARTUP), "decide what a new route answers"
    return calls


def call_all(url: str, calls: list[Call]) -> list[tuple[Call, httpx.Response]]:
    """Every call at once, as harnesses starting beside the gateway send them."""

    def send(n: int, call: Call) -> httpx.Response:
        return httpx.request(
            call.method,
            url + call.url_path,
            json=call.body,
            headers={"X-Sakur4-Session": f"startup-{n}"},
            timeout=300,
        )

    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(send, n, call) for n, call in enumerate(calls)]
        return [(call, f.result()) for call, f in zip(calls, futures, strict=True)]


def error_message(shape: str, r: httpx.Response) -> str:
    """The error's words, once its body is checked to be in ``shape``."""
    body = r.json()
    if shape == OPENAI:
        assert set(body["error"]) >= {"message", "type", "code"}, body
        return str(body["error"]["message"])
    if shape == ANTHROPIC:
        assert body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
        return str(body["error"]["message"])
    assert shape == HEALTH
    assert body["status"] in ("probing", "waiting", "connecting"), body
    return str(body["error"])


def check(
    answered: list[tuple[Call, httpx.Response]],
    backend: str,
    expected: Callable[[Call, httpx.Response], Expected],
) -> None:
    for call, r in answered:
        want = expected(call, r)
        what = f"{call.method} {call.url_path} ({want.why})"
        assert r.status_code != 500, f"{what}: {r.text}"
        assert r.status_code == want.status, f"{what}: {r.status_code} {r.text}"
        assert "Traceback" not in r.text, what
        if r.status_code == 503:
            assert r.headers.get("retry-after") == str(RETRY_AFTER_S), what
        if call.method == "HEAD" or want.shape == PLAIN:
            continue
        error_message(want.shape, r)
        if r.status_code == 503:
            assert backend in r.text, f"{what}: {r.text}"  # which backend, said


def during_startup(call: Call, r: httpx.Response) -> Expected:
    return DURING_STARTUP[call.route]


def state(gw: GatewayProcess) -> str:
    return str(httpx.get(gw.url + "/sakur4/gateway", timeout=30).json()["state"])


def test_every_route_answers_while_a_slow_backend_is_probed_fault_backend(
    tmp_path: Path,
    silent_backend: SilentBackend,
    gateway_process: Callable[..., GatewayProcess],
) -> None:
    # Was: GET /v1/models answered 500 and the gateway logged an AssertionError.
    calls = route_table(tmp_path)
    # The probe gives up on the silent backend after 8 s (the default is 600 s: a
    # request sent meanwhile would wait READY_WAIT, 60 s, for the same 503).
    gw = gateway_process(silent_backend.url, env={"SAKUR4_BACKEND_TIMEOUT": "8"})
    wait_for("the gateway answers", gw.answers, 60)
    assert state(gw) == "probing"  # the calls below arrive while the probe runs
    answered = call_all(gw.url, calls)
    check(answered, silent_backend.url, during_startup)
    assert state(gw) == "waiting"
    check(call_all(gw.url, calls), silent_backend.url, during_startup)
    found = traceback_in(gw.said)
    assert found is None, found


@pytest.mark.backend
def test_every_route_answers_at_once_on_the_real_server(
    tmp_path: Path, own_backend: LlamaServer, gateway_process: Callable[..., GatewayProcess]
) -> None:
    # The real llama-server, fresh (its slot has served nothing, so the gateway runs
    # the cache experiment: seconds of probing), the gateway hit the moment it answers.
    calls = route_table(tmp_path)
    own_backend.start()
    gw = gateway_process(own_backend.url)
    wait_for("the gateway answers", gw.answers, 60)
    assert state(gw) == "probing"  # the calls below arrive while the experiment runs
    answered = call_all(gw.url, calls)

    def linked_or_not(call: Call, r: httpx.Response) -> Expected:
        # A route that waits for the probe answers once it is done (200), or with the
        # 503 of DURING_STARTUP once READY_WAIT ran out (60 s: a loaded machine's
        # experiment took longer); /health does not wait, it says how the probe stands.
        if (call.route in WAITS or call.route == "/health") and r.status_code == 200:
            return Expected(200, PLAIN, "the probe done, answered")
        return DURING_STARTUP[call.route]

    check(answered, own_backend.url, linked_or_not)
    wait_for(
        "the gateway links to the backend",
        lambda: httpx.get(gw.url + "/health", timeout=60).status_code == 200,
        600,
    )
    models = httpx.get(gw.url + "/v1/models", timeout=60)
    assert models.status_code == 200, models.text
    assert models.json()["data"], models.text
    found = traceback_in(gw.said)
    assert found is None, found
