"""A scripted agent session through the gateway against the real llama-server.

Driven by the official ``openai`` client, streaming and not, with tool calls and
long tool outputs, crossing the trigger several times. What is asserted comes
from the receipts and from the server's own timings, and from the requests the
server actually received.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from replayed import replay
from sakur4.anchors import pin_anchor
from sakur4.backends.launcher import LlamaServer
from sakur4.demo.scenario import TOOLS, build_session
from sakur4.episodes import open_fold
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

SESSION = "scripted-session"


def run_session(gw: Any, *, turns: int = 12, file_chars: int = 2600) -> list[Any]:
    session = build_session(turns=turns, file_chars=file_chars)
    store = open_store(gw.store)
    project = ensure_project(store, gw.project)
    client = openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Sakur4-Session": SESSION},
    )
    receipts_seen = []
    try:
        for n, request in enumerate(replay(session)):
            if request.pin:
                pin_anchor(store, project.id, request.pin, priority=10)
            kwargs: dict[str, Any] = {
                "model": "any",
                "messages": request.messages,
                "max_tokens": 2,
                "tools": TOOLS,
                "temperature": 0,
            }
            if n % 2:
                with client.chat.completions.create(stream=True, **kwargs) as stream:
                    chunks = list(stream)
                assert chunks, "the stream must carry the answer"
            else:
                raw = client.chat.completions.with_raw_response.create(**kwargs)
                assert raw.parse().choices
                receipts_seen.append(raw.headers["x-sakur4-receipt"])
        return list_receipts(store, project.id, session=SESSION, limit=1000)
    finally:
        client.close()
        store.close()


def check_session(gw: Any, receipts: list[Any], *, exact_resume: bool = True) -> None:
    assert len(receipts) == len(gw.transport.sent)
    # No request failed: every receipt was completed with the server's own figures.
    assert all(not r.detail.get("failed") for r in receipts)
    assert all(r.cache_verdict != "unverifiable" for r in receipts)
    events = [r for r in receipts if r.verdict in ("reclaimed", "stepping")]
    assert len(events) >= 2, [(r.turn, r.prompt_tokens, r.verdict) for r in receipts]
    joins = [r for r in receipts if "joins the head block" in r.detail["reason"]]
    for r in receipts[1:]:
        if r in joins:
            continue  # the anchor pinned mid-session joins the head: a re-prefill, said why
        # Otherwise never from zero: the head (at least) is always a resume point.
        assert r.server_cached is not None
        assert r.server_cached > 0, r.as_dict()
    assert len(joins) <= 1, "a rider joins the head block once"
    for r in receipts:
        assert r.predicted_reuse is not None
        assert r.server_cached is not None
        # The prediction is safe: the server reused at least what the plan counted on
        # (a restored checkpoint resumes one token short of its end).
        assert r.server_cached >= r.predicted_reuse - 1, r.as_dict()
    for r in events:
        # After an eviction the server resumed exactly at the chosen cut (a join plans
        # from 0; a server that reuses any prefix still keeps the unchanged tokens).
        assert r.chosen_cut is not None
        if r not in joins:
            assert r.server_cached >= r.chosen_cut - 1, r.as_dict()
            if exact_resume:
                assert r.server_cached <= r.chosen_cut + 1, r.as_dict()
    # The pinned correction is in every prompt the server received once pinned.
    pinned_from = next(
        i
        for i, b in enumerate(gw.transport.sent)
        if any("Correction" in str(m.get("content")) for m in b["messages"])
    )
    for body in gw.transport.sent[pinned_from:]:
        assert any(
            "[anchor " in str(m.get("content")) and "json/decoder.py" in str(m.get("content"))
            for m in body["messages"]
        ), "the anchor block is missing from a prompt"
    # Every episode stepped down can still be opened.
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        stepped = {s["episode"] for r in receipts for s in r.steps if s["to"] != "dropped"}
        assert stepped
        for episode_id in stepped:
            assert open_fold(store, project.id, episode_id).content
    finally:
        store.close()


@pytest.mark.backend
def test_session_on_the_checkpoint_ring(llama_ring_cms: LlamaServer, start_gateway: Any) -> None:
    # Four results kept Live: pressure builds to the trigger instead of being
    # relieved below it, so the session crosses it several times.
    gw = start_gateway(llama_ring_cms.url, checkpoint_min_step=256, live_results=4)
    receipts = run_session(gw)
    check_session(gw, receipts)
    assert receipts[0].profile == "cache-first"


@pytest.mark.backend
def test_session_with_swa_full(llama_swa_full: LlamaServer, start_gateway: Any) -> None:
    gw = start_gateway(llama_swa_full.url, live_results=4)
    receipts = run_session(gw)
    # A server that reuses any prefix keeps every token that did not change, so it
    # resumes at the cut or past it (9 and 27 tokens past were seen: the changed
    # message's role header and unchanged first words); the ring resumes exactly.
    check_session(gw, receipts, exact_resume=False)
    # The probe found a checkpoint source (every prefix), so the profile is cache-first.
    assert receipts[0].profile == "cache-first"
    assert receipts[0].profile_reason == "probe: checkpoint source detected"
