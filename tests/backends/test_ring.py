"""The checkpoint-ring predictor: held against numbers recorded from the real server,
against the real server itself (its ``-lv 4`` log and reported ``cache_n``), and
against properties that must hold for any history."""

from __future__ import annotations

import asyncio
import random
import re
import secrets
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakur4.backends.launcher import LlamaServer
from sakur4.backends.layout import TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.ring import (
    DEFAULT_RULES,
    FULL_ATTENTION,
    RECURRENT,
    CheckpointRules,
    SentPrompt,
    advance,
    common_prefix,
    empty_slot,
    predict_slot,
)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def fresh(n: int, salt: int) -> tuple[int, ...]:
    """n token ids that share nothing with any other salt's."""
    return tuple(100_000 + salt * 10_000 + i for i in range(n))


# -- recorded: a raw-prompt session on llama-server b11434 (-lv 4), default ring -------

BASE = fresh(2200, 0)
RECORDED = [
    # (prompt, cache_n reported, checkpoints created (n_tokens) — from the server log)
    (BASE[:300], 0, (296,)),
    (BASE[:1500], 295, (984, 1496)),
    (BASE[:1600], 1500, (1500, 1596)),
    (BASE[:1100] + fresh(200, 1), 1100, (1100, 1296)),
    (BASE[:900] + fresh(300, 2), 295, (684, 1196)),
    (BASE[:900] + fresh(300, 2) + BASE[2000:2100], 1200, (1200, 1296)),
    (BASE[:900] + fresh(300, 2), 1199, (1199,)),
    (BASE[:250] + fresh(500, 3), 0, (234, 746)),
]


def test_recorded_session_is_predicted_exactly() -> None:
    p = predict_slot([SentPrompt(tokens) for tokens, _, _ in RECORDED])
    assert list(p.reuse) == [reused for _, reused, _ in RECORDED]
    assert list(p.created) == [created for _, _, created in RECORDED]


def test_resume_points_after_the_recorded_session() -> None:
    p = predict_slot([SentPrompt(tokens) for tokens, _, _ in RECORDED])
    # The slot holds the last prompt: 750 tokens, all still in the 1024-cell SWA
    # cache. A change more than a window (512) in resumes right there; one within
    # the first 512 tokens needs a checkpoint: 234 (resume 233), or none at all.
    assert [ck.n_tokens for ck in p.checkpoints] == [234, 746]
    assert p.resume_at(700) == 700
    assert p.resume_at(500) == 233
    assert p.resume_at(200) == 0
    assert p.resume_positions([100, 300, 600, 749]) == (0, 233, 600, 749)


def test_a_reported_reuse_replaces_the_prediction() -> None:
    history = [SentPrompt(BASE[:300]), SentPrompt(BASE[:1500], reused=0)]
    p = predict_slot(history)
    assert p.reuse[1] == 295  # what the model expected ...
    assert p.created[1] == (984, 1496)  # ... but it replays from what the server said
    assert p.memory_from == 1500 - DEFAULT_RULES.swa_cells


def test_full_attention_resumes_anywhere() -> None:
    p = predict_slot([SentPrompt(BASE[:1500]), SentPrompt(BASE[:1600])], FULL_ATTENTION)
    assert p.checkpoints == ()
    assert p.reuse == (0, 1500)
    assert [p.resume_at(x) for x in (0, 1, 777, 1599)] == [0, 1, 777, 1599]


def test_user_message_starts_place_checkpoints_by_min_step() -> None:
    users = (10, 300, 600, 900)
    tokens = fresh(1000, 5)
    wide = predict_slot([SentPrompt(tokens, users)], CheckpointRules(min_step=8192))
    narrow = predict_slot([SentPrompt(tokens, users)], CheckpointRules(min_step=256))
    assert wide.created[0] == (
        10,
        484,
        900,
        996,
    )  # first user (empty ring), end-516, last user, end-4
    assert narrow.created[0] == (10, 300, 484, 600, 900, 996)


# -- recorded: a hybrid (recurrent) model built here, llama-server b11434 (-lv 4) -------
# scripts/build-recurrent-model.py (lfm2, random weights); docs/DESIGN.md "A recurrent
# model, built here". Its state keeps only its last position: a prompt resumes at the
# exact end of that state or at a checkpoint, never at the divergence itself.


def test_recurrent_probe_experiment_recorded_here_is_predicted_exactly() -> None:
    base, pool = fresh(400, 30), fresh(400, 31)
    tail = base[:380] + pool[380:]
    history = [
        SentPrompt(base[:64]),  # cold
        SentPrompt(base),  # extend: the state's exact end resumes (64, not checkpoint 60)
        SentPrompt(base),  # repeat: one token must be evaluated -> checkpoint 396
        SentPrompt(tail),  # tail changed at 380 -> back to checkpoint 64
        SentPrompt(tail[:100] + tail[108:]),  # 8 removed at 100 -> checkpoint 64
    ]
    assert predict_slot(history, RECURRENT).reuse == (0, 64, 396, 64, 64)  # as reported
    # The sliding-window rules mispredict it (they resume where the window reaches).
    assert predict_slot(history, DEFAULT_RULES).reuse != (0, 64, 396, 64, 64)


def test_recurrent_chat_session_recorded_here_is_predicted_exactly() -> None:
    # Chat requests (max_tokens 4) as the server tokenized them: lengths, where each
    # first differs from the slot, user-message starts; cache_n and the checkpoints
    # the log showed created.
    p1 = fresh(3114, 40)
    p2 = p1[:3113] + fresh(518, 41)  # + assistant reply + user 2
    p3 = p2[:3630] + fresh(522, 42)  # + user 3
    p4 = p3[:3646] + fresh(509, 43)  # user 3 replaced
    p5 = p2[:3129] + fresh(506, 44)  # user 2 replaced
    p6 = p1[:1141] + fresh(2491, 45)  # a change in the middle of the system prompt
    session = [
        (p1, (2279,), 0, (2279, 2598, 3110)),
        (p1, (2279,), 3110, (3110,)),
        (p2, (2279, 3121), 3110, (3115, 3121, 3627)),
        (p3, (2279, 3121, 3638), 3627, (3638, 4148)),
        (p4, (2279, 3121, 3638), 3638, (3638, 3639, 4151)),
        (p5, (2279, 3121), 3121, (3121, 3631)),
        (p6, (2280, 3122), 0, (2280, 3116, 3122, 3628)),
    ]
    p = predict_slot([SentPrompt(t, u, generated=4) for t, u, _, _ in session], RECURRENT)
    assert list(p.reuse) == [reused for _, _, reused, _ in session]
    assert list(p.created) == [created for _, _, _, created in session]
    # After it: a change anywhere resumes only at a checkpoint at or before it.
    assert p.resume_at(3630) == 3628
    assert p.resume_at(3000) == 2280
    assert p.resume_at(2000) == 0


# -- properties ----------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[SentPrompt]:
    out = []
    base = fresh(3000, 9)
    for i in range(draw(st.integers(1, 6))):
        keep = draw(st.integers(0, 2500))
        add = draw(st.integers(1, 600))
        n = keep + add
        users = tuple(sorted(draw(st.sets(st.integers(1, n - 1), max_size=5)))) if n > 1 else ()
        out.append(SentPrompt(base[:keep] + fresh(add, 20 + i), users))
    return out


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(0, 3200), st.sampled_from([8192, 256]))
def test_predictions_stay_within_what_the_server_can_do(
    history: list[SentPrompt], cut: int, step: int
) -> None:
    rules = CheckpointRules(min_step=step, max_checkpoints=6)
    p = predict_slot(history, rules)
    assert len(p.checkpoints) <= rules.max_checkpoints
    assert 0 <= p.resume_at(cut) <= min(cut, p.cached_len)
    for sent, reused in zip(history, p.reuse, strict=True):
        assert 0 <= reused < len(sent.tokens)  # at least one token is always evaluated
    for ck in p.checkpoints:
        assert ck.resume <= p.cached_len


# -- live: the real server and its log ------------------------------------------------

CREATED = re.compile(r"task (\d+) \| created context checkpoint .* n_tokens = (\d+)")
NEW_PROMPT = re.compile(r"task (\d+) \| new prompt")


def created_per_task(log: str, last: int) -> list[tuple[int, ...]]:
    """Checkpoints each of the last ``last`` prompt tasks created, from a -lv 4 log."""
    order: list[int] = []
    made: dict[int, list[int]] = {}
    for line in log.splitlines():
        if m := NEW_PROMPT.search(line):
            order.append(int(m.group(1)))
            made[int(m.group(1))] = []
        elif (m := CREATED.search(line)) and int(m.group(1)) in made:
            made[int(m.group(1))].append(int(m.group(2)))
    return [tuple(made[t]) for t in order[-last:]]


async def _reset(c: LlamaCppClient) -> None:
    await c.slot_action(0, "erase")  # an empty slot and ring: what predict_slot starts from


@pytest.mark.backend
def test_raw_prompts_match_the_server(llama_ring_cms: LlamaServer) -> None:
    async def go() -> list[SentPrompt]:
        async with LlamaCppClient(llama_ring_cms.url, timeout=600) as c:
            await _reset(c)
            words = " ".join(f"w{i % 97}" for i in range(1300)) + secrets.token_hex(4)
            base = await c.tokenize(words)
            other = await c.tokenize(" ".join(f"z{i % 89}" for i in range(200)))
            prompts = [
                base[:200],
                base[:1100],  # longer than the 1024-cell SWA cache
                base[:900] + other[:80],  # in-window change: direct reuse
                base[:500] + other[:60],  # beyond the window: snaps back to 196
            ]
            sent = []
            for tokens in prompts:
                answer = await c.completion({"prompt": tokens, "n_predict": 1, "id_slot": 0})
                sent.append(SentPrompt(tuple(tokens), reused=answer.report.reused))
            return sent

    sent = run(go())
    rules = llama_ring_cms.flags.rules()
    predicted = predict_slot([SentPrompt(s.tokens) for s in sent], rules)
    assert list(predicted.reuse) == [s.reused for s in sent]
    assert predicted.reuse[3] == 195  # the snap back really happened
    assert list(predicted.created) == created_per_task(llama_ring_cms.log_text(), len(sent))


@pytest.mark.backend
def test_chat_turns_match_the_server(llama_ring_cms: LlamaServer) -> None:
    """User-message checkpoints (-cms 256) from the layout's user starts."""
    rng = random.Random(7)
    tag = secrets.token_hex(3)

    def para(n: int) -> str:
        return " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "eps"]) for _ in range(n))

    convs: list[list[dict[str, str]]] = []
    msgs = [{"role": "system", "content": f"[{tag}] terse. " + para(20)}]
    for turn in range(3):
        msgs = [*msgs, {"role": "user", "content": f"q{turn}: " + para(70)}]
        convs.append(msgs)
        msgs = [*msgs, {"role": "assistant", "content": para(40)}]
    convs.append([convs[-1][0], *convs[-1][3:]])  # drop the first turn

    async def go() -> tuple[list[SentPrompt], list[int | None]]:
        async with LlamaCppClient(llama_ring_cms.url, timeout=600) as c:
            await _reset(c)
            layouts = TokenLayouts(c)
            sent, observed = [], []
            for conv in convs:
                body = {"messages": conv, "max_tokens": 1, "id_slot": 0}
                layout = await layouts.layout(body)
                answer = await c.chat(body)
                assert answer.report.prompt_tokens == len(layout.tokens)
                sent.append(SentPrompt(layout.tokens, layout.user_starts))
                observed.append(answer.report.reused)
            return sent, observed

    sent, observed = run(go())
    predicted = predict_slot(sent, llama_ring_cms.flags.rules())
    assert list(predicted.reuse) == observed
    assert list(predicted.created) == created_per_task(llama_ring_cms.log_text(), len(sent))
    assert any(set(c) & set(s.user_starts) for c, s in zip(predicted.created, sent, strict=True))


@settings(max_examples=100, deadline=None)
@given(histories(), st.sampled_from([8192, 256]), st.integers(0, 3200))
def test_a_prediction_carried_forward_is_the_replayed_one(
    history: list[SentPrompt], step: int, cut: int
) -> None:
    """The gateway advances one prediction per request instead of replaying its history
    every turn: the two must be the same prediction."""
    rules = CheckpointRules(min_step=step, max_checkpoints=6)
    carried = empty_slot(rules)
    for sent in history:
        carried = advance(carried, sent)
    assert carried == predict_slot(history, rules)
    assert carried.resume_at(cut) == predict_slot(history, rules).resume_at(cut)


def test_common_prefix_compares_blocks_and_items() -> None:
    long = tuple(range(10_000))
    assert common_prefix(long, long) == 10_000
    assert common_prefix(long, (*long[:9_000], -1)) == 9_000
    assert common_prefix(long[:5], long) == 5
    assert common_prefix((1, 2, None), (1, 2, 3)) == 2  # a generated token matches nothing
    assert common_prefix([1, 2, 3], (1, 2, 4)) == 2  # a list against a tuple, item by item
    assert common_prefix("header-a", "header-b") == 7
