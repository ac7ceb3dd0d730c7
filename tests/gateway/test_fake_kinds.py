"""The gateway in front of the kinds that cannot run here, through the real ``openai``
SDK, against fakes of their documented shapes (tests/fake_kinds.py) and a fake router
(a stand-in for the SGLang Model Gateway / llm-d: it pins a routing key to one
upstream and sets an affinity cookie). What a fake can show: the requests Sakur4 sends
(no llama.cpp fields, the routing key on every one) and how it reads what comes back
(receipts unverifiable where nothing is reported, the upstream's figure where it is)."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import httpx
import openai
import pytest

from fake_kinds import MODEL, FakeServer
from sakur4.receipts import Receipt, list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

LLAMA_ONLY = ("cache_prompt", "id_slot", "n_probs", "slot_id")


def receipts(gw: Any, session: str) -> list[Receipt]:
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        found = list_receipts(store, project.id, session=session, limit=50)
    finally:
        store.close()
    return sorted(found, key=lambda r: r.turn)


def converse(gw: Any, session: str, turns: int, stream: bool = False) -> list[int]:
    """``turns`` turns of one growing conversation; the receipt id of each."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"Session {session}. " + "You write code. " * 60}
    ]
    ids = []
    with openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Sakur4-Session": session},
    ) as client:
        for t in range(turns):
            messages.append({"role": "user", "content": f"step {t}: " + "refactor it. " * 30})
            if stream:
                with client.chat.completions.with_streaming_response.create(
                    model=MODEL,
                    messages=messages,
                    max_tokens=4,
                    stream=True,  # type: ignore[arg-type]
                ) as raw:
                    ids.append(int(raw.headers["x-sakur4-receipt"]))
                    for _ in raw.iter_lines():
                        pass
            else:
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=messages,
                    max_tokens=4,  # type: ignore[arg-type]
                )
                raw.parse()
                ids.append(int(raw.headers["x-sakur4-receipt"]))
            messages.append({"role": "assistant", "content": f"done {t}."})
    return ids


def chats(fake: FakeServer) -> list[dict[str, Any]]:
    """The chat requests the gateway sent for harness turns (not the probe's resends)."""
    return [b for b in fake.sent if not str(b["messages"][0]["content"]).startswith("Probe ")]


def test_fake_generic_server_receipts_are_unverifiable_and_layouts_estimated(
    start_gateway: Any,
) -> None:
    fake = FakeServer("openai-compatible")
    gw = start_gateway("http://fake:1", transport=fake, backend_window=4096)
    session = f"generic-{uuid.uuid4()}"
    converse(gw, session, 3)
    converse(gw, session + "-s", 2, stream=True)
    for name in (session, session + "-s"):
        found = receipts(gw, name)
        assert found
        for r in found:
            assert r.cache_verdict == "unverifiable"
            assert r.server_cached is None  # never a verified figure from an estimate
            assert r.detail["layout"] == "estimated"
            assert r.profile == "window-first"
            assert r.predicted_reuse == 0
            # The estimate errs high: what the fake counted fits in what was planned.
            assert r.detail["server_counted_prompt"] <= r.prompt_tokens
            assert r.detail["layout_distrusted"] is False  # nothing learned to distrust


def test_fake_generic_server_without_a_window_is_refused_naming_the_setting(
    start_gateway: Any,
) -> None:
    gw = start_gateway("http://fake:1", transport=FakeServer("openai-compatible"))
    with (
        openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0) as client,
        pytest.raises(openai.APIStatusError) as refused,
    ):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert refused.value.status_code == 503
    assert "SAKUR4_BACKEND_WINDOW" in str(refused.value.body)


def test_fake_kinds_get_no_llama_cpp_fields(start_gateway: Any) -> None:
    for kind in ("sglang", "ollama", "lmstudio", "openai-compatible"):
        fake = FakeServer(kind)  # type: ignore[arg-type]
        gw = start_gateway("http://fake:1", transport=fake, backend_window=8192)
        converse(gw, f"{kind}-{uuid.uuid4()}", 2)
        sent = chats(fake)
        assert len(sent) == 2
        assert [k for b in sent for k in LLAMA_ONLY if k in b] == [], kind


def test_fake_ollama_receipts_are_its_cached_tokens(start_gateway: Any) -> None:
    fake = FakeServer("ollama", window=8192)
    gw = start_gateway("http://fake:1", transport=fake)
    session = f"ollama-{uuid.uuid4()}"
    converse(gw, session, 3)
    found = receipts(gw, session)
    assert [r.cache_verdict != "unverifiable" for r in found] == [True] * 3
    assert found[-1].server_cached is not None
    assert found[-1].server_cached > 0


class FakeRouter(httpx.AsyncBaseTransport):
    """A fake sticky router over two fake SGLang upstreams: a request with an
    ``x-smg-routing-key`` goes where its key was first placed (placed by hash, as
    smg's consistent hashing would); every answer sets an ``llm-d-session`` cookie
    naming the upstream, as llm-d's session-affinity scorer does."""

    def __init__(self) -> None:
        self.upstreams = [FakeServer("sglang"), FakeServer("sglang")]
        self.pinned: dict[str, int] = {}
        self.served: list[tuple[str | None, int, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = request.headers.get("x-smg-routing-key")
        if key is None:
            index = 0
        else:
            index = self.pinned.setdefault(key, hashlib.sha256(key.encode()).digest()[0] % 2)
        if request.url.path == "/v1/chat/completions":
            self.served.append((key, index, request.headers.get("cookie")))
        response = await self.upstreams[index].handle_async_request(request)
        response.headers["set-cookie"] = f"llm-d-session=upstream-{index}; Path=/; HttpOnly"
        return response


def test_fake_router_pins_each_session_by_its_routing_key_and_receipts_stay_verified(
    start_gateway: Any,
) -> None:
    router = FakeRouter()
    gw = start_gateway("http://fake:1", transport=router, routing_headers="x-smg-routing-key")
    sessions = [f"routed-{i}-{uuid.uuid4()}" for i in range(4)]
    for name in sessions:
        converse(gw, name, 3)
    turns = [s for s in router.served if s[0] is not None]
    keys = {key for key, _, _ in turns}
    assert len(keys) == len(sessions)  # one stable key per session
    for key in keys:
        upstreams = {index for k, index, _ in turns if k == key}
        assert len(upstreams) == 1, key  # pinned: every turn on one upstream
        cookies = [cookie for k, _, cookie in turns if k == key]
        # The router's affinity cookie is echoed from the session's second request on.
        assert cookies[0] is None
        assert all(c is not None and c.startswith("llm-d-session=upstream-") for c in cookies[1:])
    for name in sessions:
        found = receipts(gw, name)
        assert len(found) == 3
        # The upstream holds the session's prefix: reuse reported and verified each turn.
        assert all(r.cache_verdict != "unverifiable" for r in found[1:])
        assert all((r.server_cached or 0) > 0 for r in found[1:])
