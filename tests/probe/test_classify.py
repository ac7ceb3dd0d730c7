"""Classifying the cache experiment: each kind of server, from what it would report."""

from __future__ import annotations

from sakur4.backends.experiment import (
    ExperimentPlan,
    ExperimentStep,
    classify,
    source_class,
)

PLAN = ExperimentPlan()


def steps(
    extend: int | None,
    repeat: int | None,
    tail: int | None,
    middle: int | None,
    ring: tuple[int, int, int, int] = (59, 395, 58, 57),
    restore: int | None = None,
) -> tuple[ExperimentStep, ...]:
    p = PLAN
    out = [
        ExperimentStep("cold", p.head, 0, 0, p.head, 1.0, 0),
        ExperimentStep("extend", p.total, p.head, extend, None, None, ring[0]),
        ExperimentStep("repeat", p.total, p.total, repeat, None, None, ring[1]),
        ExperimentStep("tail", p.total, p.tail_keep, tail, None, None, ring[2]),
        ExperimentStep("middle", p.total - p.middle_len, p.middle, middle, None, None, ring[3]),
    ]
    if restore is not None:
        n = p.total - p.middle_len
        out.append(ExperimentStep("restore", n + p.restore_extra, n, restore, None, None, None))
    return tuple(out)


def test_exact_prefix() -> None:
    c = classify(steps(64, 399, 380, 100))
    assert c.source == "exact-prefix"
    assert source_class(c.source) == "detected"
    assert c.reuse_verifiable


def test_block_granular_prefix_cache_is_still_exact_prefix() -> None:
    assert classify(steps(64, 384, 368, 96)).source == "exact-prefix"  # 16-token blocks


def test_checkpoint_ring_as_measured_here() -> None:
    c = classify(steps(59, 395, 58, 57))  # the real server's figures (ring mode)
    assert c.source == "checkpoint-ring"
    assert "predicted every step exactly" in c.reason
    assert source_class(c.source) == "detected"


def test_kv_shift() -> None:
    c = classify(steps(64, 399, 380, 391))  # --swa-full --cache-reuse 256, measured
    assert c.source == "kv-shift"


def test_nothing_reused_is_none() -> None:
    c = classify(steps(0, 0, 0, 0))
    assert c.source == "none"
    assert source_class(c.source) == "none"
    assert c.sources == ()


def test_appends_reused_but_a_removal_re_prefills_everything_is_none() -> None:
    assert classify(steps(59, 395, 58, 0)).source == "none"


def test_unreported_reuse_is_uncertain_and_unverifiable() -> None:
    c = classify(steps(None, None, None, None))
    assert c.source == "uncertain"
    assert not c.reuse_verifiable
    assert source_class(c.source) == "uncertain"


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
