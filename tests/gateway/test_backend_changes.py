"""The gateway keeps up with what changes around it (issue 15, rows 10 and 11): a
gateway restarted on the same store, and a backend stopped or restarted with another
window. Real llama-servers, real uvicorn-served gateways."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sakur4.backends.launcher import RUN_TO_CAP, LlamaServer, ServerFlags
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi."}]


def chat(gw: Any, messages: list[dict[str, Any]], session: str) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 1},
        headers={"X-Sakur4-Session": session},
        timeout=300,
    )


def turns(gw: Any, session: str) -> tuple[list[int], list[int]]:
    """(receipt turns, episode turns) of ``session``, oldest first."""
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        receipts = [r.turn for r in list_receipts(store, project.id, session)]
        episodes = [
            int(r[0])
            for r in store.query(
                "SELECT turn FROM episodic_stream WHERE session = ? ORDER BY id", (session,)
            )
        ]
    finally:
        store.close()
    return receipts, episodes


@pytest.mark.backend
def test_turn_numbers_continue_after_a_gateway_restart(
    llama_ring: LlamaServer, gateways: Any
) -> None:
    # Row 10: a restarted gateway numbered the same session's turns from 1 again.
    first = gateways.start(llama_ring.url)
    messages = list(HELLO)
    for n in range(2):
        r = chat(first, messages, "restarted")
        assert r.status_code == 200, r.text
        messages += [
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"More {n}."},
        ]
    gateways.stop(first)
    second = gateways.start(llama_ring.url)
    r = chat(second, messages, "restarted")
    assert r.status_code == 200, r.text
    assert r.headers["x-sakur4-summary"].startswith("turn 3:")
    receipts, episodes = turns(second, "restarted")
    assert receipts == [1, 2, 3]
    assert episodes == [1, 1, 2, 2, 3, 3]  # each message kept the turn that brought it


@pytest.mark.backend
def test_health_and_window_follow_the_backend(own_backend: Any, gateways: Any) -> None:
    # Row 11: /health said ok with the backend stopped, and kept the old window after
    # a restart with another -c (over-window prompts were forwarded).
    server = own_backend
    server.start()
    gw = gateways.start(server.url)
    health = httpx.get(gw.url + "/health", timeout=60)
    assert health.status_code == 200
    assert health.json()["window"] == 4096
    assert chat(gw, HELLO, "moving").status_code == 200

    server.stop()
    down = httpx.get(gw.url + "/health", timeout=60)
    assert down.status_code == 503, down.text
    assert down.json()["status"] == "unavailable"
    assert "cannot connect" in down.json()["error"]
    assert chat(gw, HELLO, "moving").status_code == 503

    server.flags = ServerFlags(ctx=2048)
    server.start()
    # No /health in between: the failed turn alone makes the next one re-read.
    long_turn = [*HELLO, {"role": "user", "content": "word " * 3000}]  # within 4,096
    r = chat(gw, long_turn, "moving")
    assert r.status_code == 400, r.text
    assert "everything older folded" in r.json()["error"]["message"]  # planned, not forwarded
    up = httpx.get(gw.url + "/health", timeout=60)
    assert up.status_code == 200
    assert up.json()["window"] == 2048
    ok = chat(gw, HELLO, "moving")
    assert ok.status_code == 200, ok.text
    assert "of 2,048 tokens" in ok.headers["x-sakur4-summary"]


@pytest.mark.backend
def test_backend_killed_mid_forwarded_messages_turn_is_noticed(
    own_backend: Any, gateways: Any
) -> None:
    # Issue 27: the forwarded Anthropic path (the server's own /v1/messages) called the
    # backend outside the gateway's watch, so a backend lost there went unnoticed: after
    # it came back with a smaller window the next turn was planned for the old one and
    # forwarded. The fault is real: the llama-server process is killed mid-answer.
    server = own_backend
    server.start()
    gw = gateways.start(server.url)
    assert httpx.get(gw.url + "/health", timeout=60).json()["messages_upstream"] == "messages"
    headers = {"X-Sakur4-Session": "forwarded", "x-api-key": "unused"}
    body = {
        "model": "local",
        "max_tokens": 400,
        "ignore_eos": True,  # llama-server's own option: the answer runs its length
        "stop_sequences": RUN_TO_CAP["stop"],  # instead of the server's (-r)
        "stream": True,
        "messages": [{"role": "user", "content": "Count from one to two hundred."}],
    }
    with httpx.stream(
        "POST", gw.url + "/v1/messages", json=body, headers=headers, timeout=300
    ) as r:
        assert r.status_code == 200
        seen = ""
        for piece in r.iter_text():
            seen += piece
            if "content_block_delta" in seen and server.running:
                server.stop(grace=0)  # killed mid-answer
    assert "event: error" in seen, seen[-500:]
    server.flags = ServerFlags(ctx=2048)
    server.start()
    long_turn = {
        "model": "local",
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "word " * 3000}],  # within 4,096
    }
    r2 = httpx.post(gw.url + "/v1/messages", json=long_turn, headers=headers, timeout=300)
    assert r2.status_code == 400, r2.text
    assert "everything older folded" in r2.json()["error"]["message"]  # planned, not forwarded
