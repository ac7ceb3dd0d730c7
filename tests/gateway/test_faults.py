"""Faults between the gateway and the backend: clear errors, the gateway stays up,
and no episode is lost or duplicated."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sakur4.backends.launcher import RUN_TO_CAP, LlamaServer
from sakur4.receipts import list_receipts, reprefilled_tokens
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say one word."},
]


def chat(gw: Any, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        timeout=300,
        json={"messages": messages, "max_tokens": 2, **extra},
        headers={"X-Sakur4-Session": "faults"},
    )


def episode_count(gw: Any) -> int:
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        return int(
            store.query("SELECT count(*) FROM episodic_stream WHERE project_id = ?", (project.id,))[
                0
            ][0]
        )
    finally:
        store.close()


@pytest.mark.backend
@pytest.mark.parametrize(
    ("fault", "status", "words"),
    [
        ("501", 501, "not_supported_error"),
        ("500", 503, "HTTP 500"),
        ("garbage", 503, "malformed JSON"),
    ],
)
def test_backend_errors_are_clear_and_the_next_request_works(
    llama_ring: LlamaServer, start_gateway: Any, fault: str, status: int, words: str
) -> None:
    gw = start_gateway(llama_ring.url)
    assert chat(gw, MESSAGES).status_code == 200
    before = episode_count(gw)
    gw.transport.faults.append(fault)
    bad = chat(
        gw,
        [*MESSAGES, {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Again."}],
    )
    assert bad.status_code == status
    error = bad.json()["error"]
    assert words in error["message"]
    assert llama_ring.url in error["message"], "the error names the backend"
    good = chat(
        gw,
        [*MESSAGES, {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Again."}],
    )
    assert good.status_code == 200
    # The failed turn's two new messages were recorded once; the retry reused them.
    assert episode_count(gw) == before + 2


@pytest.mark.backend
def test_stream_cut_midway_ends_with_an_error_event(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring.url)
    gw.transport.faults.append("cut")
    with httpx.stream(
        "POST",
        gw.url + "/v1/chat/completions",
        timeout=300,
        json={"messages": MESSAGES, "max_tokens": 2, "stream": True},
    ) as r:
        text = "".join(r.iter_text())
    assert r.status_code == 200
    assert "without [DONE]" in text
    assert '"error"' in text
    assert chat(gw, MESSAGES).status_code == 200


@pytest.mark.backend
def test_unverifiable_reuse_is_counted_as_full_re_prefill(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring.url)
    gw.transport.strip_reuse = True
    messages = list(MESSAGES)
    for i in range(3):
        assert chat(gw, messages).status_code == 200
        messages += [
            {"role": "assistant", "content": f"ok {i}"},
            {"role": "user", "content": f"more {i}"},
        ]
    store = open_store(gw.store)
    try:
        receipts = list_receipts(store, ensure_project(store, gw.project).id)
    finally:
        store.close()
    assert len(receipts) == 3
    for r in receipts:
        assert r.cache_verdict == "unverifiable"
        assert r.server_cached is None
        assert reprefilled_tokens(r) == r.prompt_tokens


@pytest.mark.backend
def test_backend_killed_mid_stream_then_back(start_gateway: Any, own_backend: Any) -> None:
    server = own_backend
    with server:
        gw = start_gateway(server.url)
        with httpx.stream(
            "POST",
            gw.url + "/v1/chat/completions",
            timeout=300,
            json={"messages": MESSAGES, "max_tokens": 400, "stream": True, **RUN_TO_CAP},
        ) as r:
            assert r.status_code == 200
            seen = ""
            for piece in r.iter_text():
                seen += piece
                if seen.count("data:") == 3:
                    server.stop(grace=0)  # killed mid-stream
        assert '"error"' in seen
        assert server.url in seen or "backend" in seen
        down = chat(gw, MESSAGES)
        assert down.status_code == 503
        assert "cannot connect" in down.json()["error"]["message"]
        server.start()
        assert chat(gw, MESSAGES).status_code == 200
