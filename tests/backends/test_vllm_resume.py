"""Where the real vLLM resumes after a change in the middle (slow tier: ``-m vllm``):
the probe measures the block and the sliding-window blocks a hit needs, and the
planner's resume model, fed what was sent as the gateway feeds it, predicts vLLM's own
``cached_tokens`` at every request of a chat script with cuts (issue 40 item 4)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from sakur4.backends.ring import SentPrompt, advance, common_prefix, empty_slot
from sakur4.backends.vllm import VllmClient
from sakur4.backends.vllm_layout import VllmLayouts
from sakur4.backends.vllm_server import SERVED_MODEL, VllmServer
from sakur4.probe import probe
from sakur4.settings import Settings

WORDS = str.split(
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when"
)


def text(n: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n))


@pytest.mark.backend
@pytest.mark.vllm
def test_probe_measures_where_vllm_resumes(vllm_server: VllmServer) -> None:
    found = asyncio.run(probe(vllm_server.url, Settings(backend_timeout=300.0)))
    assert found.checkpoint_source == "exact-prefix"
    # Gemma 3 270M: 128-token blocks; its 512-token window needs 4 blocks kept.
    assert (found.prefix_block, found.window_blocks) == (128, 4)
    assert found.resume_model.window == 4
    assert found.experiment, "the steps are kept with the result"
    for step in found.experiment:
        assert step.reused == step.block_predicted, step
    # The change in the middle: whole blocks would have said 896; vLLM reused nothing.
    change = next(s for s in found.experiment if s.name == "change")
    assert (change.divergence, change.reused) == (900, 0)


# The script: what each request does to the messages before it is sent.
APPEND, CUT_MIDDLE, CUT_HEAD, CUT_LAST = (
    "append",
    "cut a middle result",
    "cut near the head",
    "cut the last result",
)
SCRIPT = [APPEND, APPEND, APPEND, CUT_MIDDLE, APPEND, APPEND, CUT_HEAD, APPEND, CUT_LAST, APPEND]


@pytest.mark.backend
@pytest.mark.vllm
def test_predicted_reuse_is_served_at_every_request_of_a_script_with_cuts(
    vllm_server: VllmServer,
) -> None:
    """Answers are the model's own (re-rendered by the template, as a harness sends them
    back); cuts replace a message's text with a stub, as a fold does."""
    found = asyncio.run(probe(vllm_server.url, Settings(backend_timeout=300.0)))
    model, rules = found.resume_model, found.checkpoint_rules()
    assert rules is not None
    assert model.window == 4

    async def go() -> list[tuple[str, int, int, int, int]]:
        rows: list[tuple[str, int, int, int, int]] = []
        async with VllmClient(vllm_server.url, timeout=600.0, model=SERVED_MODEL) as client:
            layouts = VllmLayouts(client)
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": f"Session {uuid.uuid4()}. " + text(500, 1)},
                {"role": "user", "content": "Result 0: " + text(350, 2)},
            ]
            state = empty_slot(rules)
            sent: tuple[int, ...] = ()
            for i, event in enumerate(SCRIPT):
                if event == CUT_MIDDLE:
                    messages[3]["content"] = "[result 1 folded]"
                elif event == CUT_HEAD:
                    messages[1]["content"] = "[result 0 folded]"
                elif event == CUT_LAST:
                    messages[-1]["content"] = "[the last result folded]"
                body = {
                    "model": SERVED_MODEL,
                    "messages": messages,
                    "max_tokens": 24,
                    "temperature": 0,
                }
                layout = await layouts.layout(body)
                divergence = common_prefix(sent, layout.tokens)
                planned = model.resume_at(divergence, len(sent), state) if sent else 0
                answer = await client.chat(body)
                served = answer.report.reused
                assert served is not None
                generated = int(answer.json["usage"]["completion_tokens"])
                state = advance(
                    state, SentPrompt(layout.tokens, layout.user_starts, generated, served)
                )
                rows.append((event, len(layout.tokens), divergence, planned, served))
                assert state.reuse[-1] == served, (i, event, rows)
                sent = layout.tokens
                content = answer.json["choices"][0]["message"].get("content") or ""
                messages.append({"role": "assistant", "content": content})
                messages.append({"role": "user", "content": f"Result {i + 1}: " + text(300, i + 3)})
        return rows

    rows = asyncio.run(go())
    cuts = [r for r in rows if r[0] != APPEND]
    # At a cut the planner's view (the change's position on the slot's prediction) is
    # what vLLM served.
    assert all(planned == served for _, _, _, planned, served in cuts), rows
    # And the cuts did cost what the whole-block rule would not have predicted.
    assert any(served < div // 128 * 128 for _, _, div, _, served in cuts), rows
