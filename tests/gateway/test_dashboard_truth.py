"""Issue 31, item 6 on the real server: what the screens say about a live session.

A real gateway in front of the real llama-server, driven by the official ``openai``
and ``anthropic`` SDKs: a streamed turn is in flight (apart from the totals) until its
answer ends, the session is named by the harness that sent it, and on the Anthropic
route — whose server reply carries no ``timings`` — the prefill is not reported
as 0 ms but the gateway's own time to the first token is shown as such.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

import anthropic
from sakur4.backends.launcher import LlamaServer
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

pytestmark = pytest.mark.backend


@pytest.fixture(scope="module")
def gw(llama_ring: LlamaServer, module_gateways: Any) -> Any:
    """One gateway for the module: its start-up (the probe) is most of each test's time."""
    return module_gateways.start(llama_ring.url)


def _api(gw: Any, session: str) -> dict[str, Any]:
    store = open_store(gw.store)
    try:
        pid = ensure_project(store, gw.project).id
    finally:
        store.close()
    url = f"{gw.url}/sakur4/api/projects/{pid}/sessions/{quote(session, safe='')}"
    answer = httpx.get(url, timeout=60)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def _index(gw: Any) -> dict[str, Any]:
    data = httpx.get(f"{gw.url}/sakur4/api/projects", timeout=60).json()
    return {s["session"]: s for p in data["projects"] for s in p["sessions"]}


def test_a_streamed_turn_is_in_flight_until_it_ends_and_named_by_its_harness(gw: Any) -> None:
    session = "truth-openai"
    client = openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Sakur4-Session": session, "User-Agent": "opencode/1.0.3"},
    )
    messages: list[Any] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Say hello."},
    ]
    with client:
        client.chat.completions.create(model="any", messages=messages, max_tokens=2)
        stream = client.chat.completions.create(
            model="any",
            messages=[
                *messages,
                {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "Again."},
            ],
            max_tokens=2,
            stream=True,
        )
        # The headers are in, the answer is not: the second turn is in flight.
        during = _api(gw, session)
        assert [t["outcome"] for t in during["turns"]][-1] == "in flight"
        assert during["totals"]["in_flight"] == 1
        assert during["totals"]["turns"] == 1
        first = during["turns"][0]
        assert during["totals"]["reprefilled"] == first["server_processed"]
        chunks = list(stream)
        assert chunks
    gw.served.wait(gw.served.arrived)  # the two turns and the reading between, all done
    after = _api(gw, session)
    assert after["totals"]["in_flight"] == 0
    assert after["totals"]["turns"] == 2
    assert after["turns"][-1]["outcome"] in ("reused", "full-re-prefill")
    assert after["harness"] == "OpenCode 1.0.3"
    assert _index(gw)[session]["harness"] == "OpenCode 1.0.3"


def test_the_anthropic_route_reports_no_prefill_time_and_the_first_token_is_timed(
    llama_ring: LlamaServer, gw: Any
) -> None:
    # The fact first: llama-server's own /v1/messages reply carries usage, no timings.
    body = {"model": "x", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi."}]}
    reply = httpx.post(f"{llama_ring.url}/v1/messages", json=body, timeout=300).json()
    assert "usage" in reply
    assert "timings" not in reply
    session = "truth-anthropic"
    with anthropic.Anthropic(
        base_url=gw.url,
        api_key="unused",
        max_retries=0,
        default_headers={"X-Sakur4-Session": session},
    ) as client:
        history: list[Any] = [{"role": "user", "content": "Say hello."}]
        client.messages.create(model="local", max_tokens=2, messages=history)
        history += [
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Again."},
        ]
        with client.messages.stream(model="local", max_tokens=2, messages=history) as stream:
            assert [e.type for e in stream][-1] == "message_stop"
    store = open_store(gw.store)
    try:
        receipts = list_receipts(store, ensure_project(store, gw.project).id, session=session)
    finally:
        store.close()
    assert [r.detail["upstream"] for r in receipts] == ["messages", "messages"]
    assert [r.prefill_ms for r in receipts] == [None, None]  # the server said nothing
    assert "first_token_ms" not in receipts[0].detail  # not streamed: no first token seen
    assert receipts[1].detail["first_token_ms"] > 0
    data = _api(gw, session)
    assert data["totals"]["prefill_ms"] is None  # never 0 ms
    assert data["totals"]["first_token_ms"] == receipts[1].detail["first_token_ms"]
    assert data["turns"][1]["row"]["prefill ms"].endswith(" to first token")
    assert data["harness"].startswith("Anthropic/Python")
