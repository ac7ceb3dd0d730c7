"""vLLM's prefix cache on a sliding-window model (backends/block_cache.py), on fake data:
token tuples shaped like prompts the real vLLM 0.32 served (Gemma 3 270M, 128-token
blocks, 4 kept blocks), each held against the ``cached_tokens`` it reported then
(2026-12-07, recorded in docs/verification/vllm-resume.md). The real server's own test
is tests/backends/test_vllm_resume.py."""

from __future__ import annotations

import itertools

import pytest

from probe_results import probe_result
from sakur4.backends import block_cache
from sakur4.backends.experiment import ExperimentStep
from sakur4.backends.resume import resumes
from sakur4.backends.ring import CheckpointRules, SentPrompt, SlotPrediction, advance, empty_slot
from sakur4.backends.vllm import block_reuse
from sakur4.cli.probe import _show as show
from sakur4.probe import ProbeResult

RULES = CheckpointRules(n_swa=0, block=128, window_blocks=4)


def fake_tokens(seed: int, n: int) -> tuple[int, ...]:
    return tuple(seed * 100_000 + i for i in range(n))


def fake_chain(first: int, steps: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    """Prompts as the real run sent them: each keeps the previous one's first ``d``
    tokens and ends at ``n`` with tokens nothing else has."""
    prompts = [fake_tokens(0, first)]
    for i, (d, n) in enumerate(steps, start=1):
        prompts.append(prompts[-1][:d] + fake_tokens(i, n - d))
    return prompts


# (divergence, length) of each request after a 1,500-token prompt, and what vLLM served.
CHAIN = [(1500, 1700), (1000, 1800), (1100, 1900), (1900, 2300), (300, 1200), (1250, 1600)]
CHAIN += [(700, 1400), (2000, 2100)]
SERVED = [0, 1408, 0, 896, 1792, 0, 1152, 256, 1280]


def predicted(
    rules: CheckpointRules, prompts: list[tuple[int, ...]], generated: int = 1
) -> list[int]:
    state: SlotPrediction = empty_slot(rules)
    for p in prompts:
        state = advance(state, SentPrompt(p, generated=generated))
    return list(state.reuse)


def test_fake_chain_predicts_what_vllm_served_at_every_change() -> None:
    prompts = fake_chain(1500, CHAIN)
    assert predicted(RULES, prompts) == SERVED
    # The whole-block rule (the model before issue 40) predicted more at 4 of the 9.
    whole = [0] + [
        block_reuse(block_cache_common(a, b), len(b)) for a, b in itertools.pairwise(prompts)
    ]
    assert whole == [0, 1408, 896, 1024, 1792, 256, 1152, 640, 1280]


def block_cache_common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_fake_answer_counts_for_the_junction_as_vllm_cached_it() -> None:
    """1,000 tokens answered with 600, then the prompt with that answer and 1,000 more
    (served 896: the first prompt's boundary), then one changed at 1,560: served 1,536,
    the junction where the full-attention layers' hit (the answer included) ended."""
    first = fake_tokens(0, 1000)
    answer = fake_tokens(1, 600)
    second = first + answer + fake_tokens(2, 1000)
    third = second[:1560] + fake_tokens(3, 500)
    state = advance(empty_slot(RULES), SentPrompt(first, generated=600))
    state = advance(state, SentPrompt(second, generated=1))
    state = advance(state, SentPrompt(third, generated=1))
    assert list(state.reuse) == [0, 896, 1536]


def test_fake_served_figure_moves_the_kept_blocks_on() -> None:
    """The server's word (``reused``) decides whether a junction was pinned."""
    prompts = fake_chain(1500, [(1000, 1800), (1100, 1900)])
    state = advance(empty_slot(RULES), SentPrompt(prompts[0]))
    # Told it served 896 where 0 was predicted: the blocks before 896 were kept...
    state = advance(state, SentPrompt(prompts[1], reused=896))
    assert state.reuse[-1] == 0
    state = advance(state, SentPrompt(prompts[2]))
    # ...and still are: a change at 1,100 resumes there again.
    assert state.reuse[-1] == 896


def test_the_planner_model_resumes_only_where_blocks_are_kept() -> None:
    prompts = fake_chain(1500, [(1500, 1700), (1000, 1800)])
    state = empty_slot(RULES)
    for p in prompts:
        state = advance(state, SentPrompt(p))
    model = resumes("exact-prefix", block=128, window=4).model
    # Kept along the last prompt: the junction at 896 (where the full-attention layers'
    # hit ended) and its own boundary, 1,792; the earlier tails lay past its change.
    assert model.resume_at(1100, len(prompts[-1]), state) == 896
    assert model.resume_at(1700, len(prompts[-1]), state) == 896
    assert model.resume_at(1800, len(prompts[-1]), state) == 1792
    assert model.resume_at(500, len(prompts[-1]), state) == 0
    assert model.positions([], len(prompts[-1]), state) == (896, 1792)
    # Without a window: whole blocks anywhere (the dense rule, full attention).
    dense = resumes("exact-prefix", block=128).model
    assert dense.resume_at(1100, len(prompts[-1]), state) == 1024


def test_tail_and_hit_near_the_head() -> None:
    assert block_cache.tail(384, 128, 4) == frozenset({0, 1, 2})
    assert block_cache.hit(frozenset({0, 1, 2}), 500, 128, 4) == 384
    assert block_cache.hit(frozenset({1, 2, 3, 4}), 700, 128, 4) == 640
    assert block_cache.hit(frozenset({2, 3, 4}), 700, 128, 4) == 0


def test_fake_vllm_probe_result_keeps_the_measured_model_and_shows_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stored vLLM result (built by hand) plans with the window it measured, read back
    as stored, and ``sakur4 probe`` shows it with its block model's column."""
    step = ExperimentStep("change", 1408, 900, 0, 1408, None, None, block_predicted=0)
    found = probe_result(
        kind="vllm",
        checkpoint_source="exact-prefix",
        prefix_block=128,
        window_blocks=4,
        experiment=(step,),
    )
    again = ProbeResult.from_dict(found.as_dict())
    assert again.resume_model.window == 4
    assert again.checkpoint_rules() == CheckpointRules(n_swa=0, block=128, window_blocks=4)
    # A result stored before the measurement plans as before: whole blocks anywhere.
    old = {k: v for k, v in found.as_dict().items() if k not in ("prefix_block", "window_blocks")}
    assert ProbeResult.from_dict(old).resume_model.window == 0
    show(again)
    out = capsys.readouterr().out
    assert "128 tokens, a sliding window's hit needs its 4 blocks before it kept" in out
    assert "block model" in out
