"""Classifying the cache experiment: each kind of server, from what it would report."""

from __future__ import annotations

from dataclasses import replace

from probe_results import probe_result
from sakur4.backends.experiment import (
    ExperimentPlan,
    ExperimentStep,
    classify,
)
from sakur4.backends.resume import resumes
from sakur4.backends.ring import DEFAULT_RULES, RECURRENT
from sakur4.probe import ProbeResult, _advice, _with_stored

PLAN = ExperimentPlan()


def steps(
    extend: int | None,
    repeat: int | None,
    tail: int | None,
    middle: int | None,
    ring: tuple[int, int, int, int] = (59, 395, 58, 57),
    restore: int | None = None,
    recurrent: tuple[int, int, int, int] = (64, 396, 64, 64),
) -> tuple[ExperimentStep, ...]:
    p = PLAN
    r = recurrent
    out = [
        ExperimentStep("cold", p.head, 0, 0, p.head, 1.0, 0, 0),
        ExperimentStep("extend", p.total, p.head, extend, None, None, ring[0], r[0]),
        ExperimentStep("repeat", p.total, p.total, repeat, None, None, ring[1], r[1]),
        ExperimentStep("tail", p.total, p.tail_keep, tail, None, None, ring[2], r[2]),
        ExperimentStep(
            "middle", p.total - p.middle_len, p.middle, middle, None, None, ring[3], r[3]
        ),
    ]
    if restore is not None:
        n = p.total - p.middle_len
        out.append(ExperimentStep("restore", n + p.restore_extra, n, restore, None, None, None))
    return tuple(out)


def test_exact_prefix() -> None:
    c = classify(steps(64, 399, 380, 100))
    assert c.source == "exact-prefix"
    assert resumes(c.source).profile_input == "detected"
    assert c.reuse_verifiable


def test_block_granular_prefix_cache_is_still_exact_prefix() -> None:
    assert classify(steps(64, 384, 368, 96)).source == "exact-prefix"  # 16-token blocks


def test_checkpoint_ring_as_measured_here() -> None:
    c = classify(steps(59, 395, 58, 57))  # the real server's figures (ring mode)
    assert c.source == "checkpoint-ring"
    assert "predicted every step exactly" in c.reason
    assert resumes(c.source).profile_input == "detected"


def test_checkpoint_ring_of_a_hybrid_recurrent_model_as_measured_here() -> None:
    # The lfm2 model built by scripts/build-recurrent-model.py: the cold prompt's exact
    # end resumes (64), every change snaps back to a checkpoint; the sliding-window ring
    # model said 59, 395, 63, 63 for the same history.
    c = classify(steps(64, 396, 64, 64, ring=(59, 395, 63, 63)))
    assert c.source == "checkpoint-ring"
    assert c.recurrent
    assert "hybrid/recurrent" in c.reason
    assert not classify(steps(59, 395, 58, 57)).recurrent  # Gemma 3: sliding window


def test_a_recurrent_ring_predicts_with_recurrent_rules_and_advises_no_swa_full() -> None:
    ring = probe_result(n_ctx=8192, sources=("checkpoint-ring",))
    recurrent = replace(ring, recurrent_memory=True)
    assert recurrent.checkpoint_rules() == RECURRENT
    assert ring.checkpoint_rules() == DEFAULT_RULES
    assert ProbeResult.from_dict(recurrent.as_dict()).recurrent_memory  # stored and read back
    # A gateway planning with a stored probe keeps its recurrent rules.
    quick = replace(ring, checkpoint_source="uncertain")
    assert _with_stored(quick, recurrent).checkpoint_rules() == RECURRENT
    advice = " ".join(_advice("llama.cpp", "checkpoint-ring", "unsupported", True, None, True))
    assert "hybrid/recurrent" in advice
    assert "does not change that" in advice
    assert "sliding-window" not in advice


def test_a_sliding_window_model_is_told_to_turn_the_ram_prompt_cache_off_with_swa_full() -> None:
    """With `--swa-full` the RAM prompt cache swapped saved prompts into the slot that a
    sliding-window state cannot resume from: 4 of 8 drops re-processed in full, none
    with `-cram 0` (bench/swa_prompt_cache.py, docs/DESIGN.md)."""
    advice = " ".join(_advice("llama.cpp", "checkpoint-ring", "supported", True, None))
    assert "`--swa-full -cram 0`" in advice
    assert "swa_prompt_cache.py" in advice


def test_kv_shift() -> None:
    c = classify(steps(64, 399, 380, 391))  # --swa-full --cache-reuse 256, measured
    assert c.source == "kv-shift"


def test_nothing_reused_is_none() -> None:
    c = classify(steps(0, 0, 0, 0))
    assert c.source == "none"
    assert resumes(c.source).profile_input == "none"
    assert c.sources == ()


def test_appends_reused_but_a_removal_re_prefills_everything_is_none() -> None:
    assert classify(steps(59, 395, 58, 0)).source == "none"


def test_unreported_reuse_is_uncertain_and_unverifiable() -> None:
    c = classify(steps(None, None, None, None))
    assert c.source == "uncertain"
    assert not c.reuse_verifiable
    assert resumes(c.source).profile_input == "uncertain"


def test_reuse_beyond_the_prefix_without_shifting_fits_no_model() -> None:
    c = classify(steps(64, 399, 390, 100))  # tail reused more than it shares
    assert c.source == "uncertain"
    assert c.reuse_verifiable


def test_a_restored_slot_that_does_not_resume_is_not_a_source() -> None:
    c = classify(steps(59, 395, 58, 57, restore=0))
    assert c.source == "checkpoint-ring"
    assert c.sources == ("checkpoint-ring",)
    assert "did not resume" in c.reason


def test_a_restored_slot_that_resumes_is_a_source() -> None:
    c = classify(steps(64, 399, 380, 100, restore=392))
    assert c.sources == ("exact-prefix", "slot-restore")
    only_restore = classify(steps(59, 395, 58, 0, restore=392))
    assert only_restore.source == "slot-restore"
