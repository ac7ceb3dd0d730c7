"""A receipt's steps and the stored episodes give one figure (issue 41), on a real
multi-turn session through the gateway in front of the real llama-server.

OpenCode's receipts said a step of 110 tokens for an episode stored at 2,563 (its
system prompt, stored folded), and 4,810 for one stored at 6. Two causes: a refused
turn's deleted episodes stayed in the session's cache, and SQLite gives their ids to
the next rows stored, so the next turn planned (and folded, and sized) the refused
turn's episodes under other messages' ids; and a step from Live was sized by the
cached message's span (its template tokens with it) where the store keeps the
episode's own count. The session here (the demo's scripted coding agent, tool calls
and long results crossing the trigger) has a refused turn in its middle, a pasted
file past the window, then goes on: every step of every receipt names a stored
episode of its size, and the harness's instructions are never folded.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from replayed import replay
from sakur4.backends.launcher import LlamaServer
from sakur4.demo.scenario import TOOLS, build_session
from sakur4.episodes.stream import fetch_episodes, session_episodes
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project
from sakur4.vocabulary import Nature, Tier

SESSION = "receipt-steps"
PASTE = "total = sum(row.amount for row in batch if row.flag)  # pasted\n" * 700


@pytest.mark.backend
def test_every_step_names_a_stored_episode_of_its_size(
    llama_ring_cms: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring_cms.url, checkpoint_min_step=256, live_results=1)
    calls = replay(build_session(turns=6, file_chars=2600))
    refused_at = len(calls) // 2
    statuses: list[int] = []
    with openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Sakur4-Session": SESSION},
    ) as client:
        for n, request in enumerate(calls):
            sends = [list(request.messages)]
            if n == refused_at:
                # The user pastes a file past the window (no fence: kept as words):
                # refused; the session goes on with other messages in its place.
                pasted = [*calls[n - 1].messages, {"role": "user", "content": PASTE}]
                sends.insert(0, pasted)
            for messages in sends:
                try:
                    client.chat.completions.create(
                        model="any", messages=messages, max_tokens=2, tools=TOOLS, temperature=0
                    )
                    statuses.append(200)
                except openai.BadRequestError:
                    statuses.append(400)
    assert statuses.count(400) == 1
    assert statuses[refused_at] == 400
    assert len(statuses) == len(calls) + 1

    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        receipts = list_receipts(store, project.id, session=SESSION, limit=1000)
        steps = [s for r in receipts for s in r.steps]
        stored = fetch_episodes(store, project.id, sorted({s["episode"] for s in steps}))
        assert sum(1 for s in steps if s["from"] == "live" and s["to"] == "masked") >= 3
        for r in receipts:
            for s in r.steps:
                episode = stored[s["episode"]]
                assert s["tokens"] == episode.tokens, (r.turn, s, episode.tokens)
                if s["from"] == "live" and not s.get("piece"):
                    # Before: the cached span's size (its template tokens with it), and
                    # after the refused turn another episode's figure altogether.
                    assert s["tokens_before"] == episode.tokens, (r.turn, s, episode.tokens)
        # The harness's instructions and the user's words are never folded.
        for e in session_episodes(store, project.id, SESSION):
            if e.nature in (Nature.INSTRUCTION, Nature.REQUEST, Nature.UNCLASSIFIED):
                assert e.tier is Tier.LIVE, (e.id, e.role, e.nature, e.tier)
    finally:
        store.close()
