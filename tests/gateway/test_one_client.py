"""One client per server (issue 38 item 5): a gateway opens one HTTP client to its
backend, and that client owns the transport; the probe (its cache experiment
included), the pipeline's turns and a re-read of the server all speak through it. A
real llama-server; every ``httpx.AsyncClient`` made while the gateway starts, measures
the server and answers a turn is counted."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest

from sakur4.backends.http import HttpBackend
from sakur4.backends.launcher import LlamaServer
from sakur4.backends.llamacpp import LlamaCppClient


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every AsyncClient made meanwhile, by its base URL."""
    made: Counter[str] = Counter()
    real = httpx.AsyncClient.__init__

    def counting(self: httpx.AsyncClient, *args: Any, **kwargs: Any) -> None:
        made[str(kwargs.get("base_url", "")).rstrip("/")] += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "__init__", counting)
    return made


@pytest.mark.backend
def test_a_gateway_opens_one_client_to_its_server(
    llama_ring: LlamaServer, gateways: Any, opened: Counter[str]
) -> None:
    gw = gateways.start(llama_ring.url)  # measured: the start-up probe's experiment runs
    r = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 1},
        timeout=300,
    )
    assert r.status_code == 200, r.text
    assert httpx.get(gw.url + "/health", timeout=60).status_code == 200
    assert opened[llama_ring.url] == 1, dict(opened)


def test_a_kind_client_through_another_shares_its_connection_and_closes_nothing() -> None:
    asyncio.run(_through())


async def _through() -> None:
    seen: list[dict[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.headers))
        return httpx.Response(200, json={"status": "ok"})

    owner = HttpBackend("http://127.0.0.1:9", timeout=5, transport=httpx.MockTransport(answer))
    llama = LlamaCppClient(owner.url, timeout=5, headers={"x-session-id": "probe"}, through=owner)
    async with llama:
        await llama.health()
    await owner.get_json("/health")  # the view's close left the owner's connection open
    assert seen[0]["x-session-id"] == "probe"
    assert "x-session-id" not in seen[1]  # a view's headers are its own
    await owner.aclose()
    with pytest.raises(RuntimeError):
        await llama.get_json("/health")  # the owner closed it
    with pytest.raises(ValueError, match="cannot speak through"):
        HttpBackend("http://127.0.0.1:10", timeout=5, through=owner)
