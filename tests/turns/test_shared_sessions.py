"""A session's state as a replica writes and reads it (issue 39 item 4): exact.

A prediction read back must predict what the one written does, to the token: the
plan's checkpoints and reuse come from it. Generated predictions (replayed histories of
prompts under varied checkpoint rules, some with the server's reported reuse) and
layouts are written and read back equal; a whole session state comes back equal in
every field a plan reads, its caches empty."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sakur4 import engine
from sakur4.backends.ring import CheckpointRules, SentPrompt, predict_slot
from sakur4.turns.sessions import FailedTurn, SessionBook, SessionState
from sakur4.turns.shared import (
    layout_from,
    layout_json,
    prediction_from,
    prediction_json,
    restore_state,
    state_json,
)
from sakur4.turns.slots import SlotSent

RULES = st.builds(
    CheckpointRules,
    n_swa=st.sampled_from([0, 4, 16]),
    n_ubatch=st.sampled_from([4, 8]),
    n_batch=st.sampled_from([8, 32]),
    min_step=st.sampled_from([4, 64]),
    max_checkpoints=st.integers(0, 5),
    recurrent=st.booleans(),
    # vLLM's kept blocks on a sliding-window model (backends/block_cache.py).
    block=st.sampled_from([1, 4]),
    window_blocks=st.sampled_from([0, 2]),
)


@st.composite
def prompts(draw: st.DrawFn) -> SentPrompt:
    tokens = tuple(draw(st.lists(st.integers(0, 5), max_size=80)))
    starts = tuple(sorted(set(draw(st.lists(st.integers(0, max(0, len(tokens) - 1)))))))
    reused = draw(st.none() | st.integers(0, len(tokens)))
    return SentPrompt(tokens, starts, draw(st.integers(1, 6)), reused)


@settings(max_examples=200, deadline=None)
@given(rules=RULES, history=st.lists(prompts(), max_size=6))
def test_a_prediction_comes_back_exactly(rules: CheckpointRules, history: list[SentPrompt]) -> None:
    p = predict_slot(history, rules)
    back = prediction_from(_through_text(prediction_json(p)))
    assert back == p
    assert back.cached == p.cached
    for at in range(p.cached_len + 2):
        assert back.resume_at(at) == p.resume_at(at)


@settings(max_examples=100, deadline=None)
@given(
    spans=st.lists(st.tuples(st.text(max_size=8), st.integers(0, 50)), max_size=10),
)
def test_a_layout_comes_back_exactly(spans: list[tuple[str, int]]) -> None:
    at, made = 0, []
    for key, width in spans:
        made.append(engine.Span(key, at, at + width))
        at += width
    layout = engine.Layout(tuple(made))
    assert layout_from(_through_text(layout_json(layout))) == layout


def test_a_session_state_comes_back_with_its_caches_empty() -> None:
    sent = SentPrompt((1, 2, 3, 4), (0, 2), 3, 2)
    prediction = predict_slot([sent])
    state = SessionState(
        7,
        "s",
        0,
        turn=5,
        layout=engine.Layout((engine.Span("a", 0, 2), engine.Span("b", 2, 4))),
        prediction=prediction,
        ratio=1.2345678901234567,
        harness=[{"role": "user", "content": [{"type": "text", "text": "hi ✓"}]}],
        tools=[{"type": "function", "function": {"name": "read", "parameters": {}}}],
        recorded=[{"role": "user", "content": "hi ✓"}],
        ids=[11],
        failed=FailedTurn(9, ({"role": "user", "content": "again"},)),
    )
    state.episodes = {11: object()}  # type: ignore[dict-item]  # a cache, any content
    text = state_json(state, SlotSent(sent, prediction, "billing"))
    other = SessionBook("x-session-id")
    fresh = other.state(7, "s", 1)
    assert restore_state(fresh, text, other)
    for name in ("turn", "slot", "ratio", "layout", "prediction", "harness", "tools"):
        assert getattr(fresh, name) == getattr(state, name), name
    assert (fresh.recorded, fresh.ids, fresh.failed) == (state.recorded, state.ids, state.failed)
    assert fresh.known_ids(state.recorded) == [11]  # the recorded messages still map
    assert fresh.episodes == {}
    assert fresh.view is None
    held = other.slots.sent(0)
    assert held is not None
    assert held.header == "billing"
    assert held.last == sent
    assert held.prediction == prediction


def _through_text(d: Any) -> Any:
    return json.loads(json.dumps(d))
