"""Where a server can resume a cached prompt, and what follows from it: one answer per
checkpoint source (:func:`resumes`), so the planner's resume points, the profile
input and the checkpoint predictor's rules come from one object and cannot disagree.

- any prefix (``exact-prefix``, ``kv-shift``): a prompt resumes where it first differs
  from the cached one; on vLLM only in whole blocks (prefix caching hashes full
  128-token blocks: a divergence at 1,000 reuses 896, not 1,000; on a sliding-window
  model only where its layers kept the blocks before, as the probe measures:
  block_cache.py, the rules carry it to the predictor); the profile input
  is "detected" ("shifting" for ``kv-shift``: the server also shifts text kept after
  a removal into place, which the planner prices itself), the rules full attention's;
- the checkpoint ring (``checkpoint-ring``): only where the slot's predicted
  checkpoints lie; "detected", the ring's rules (a recurrent model's memory when the
  experiment fitted those);
- ``uncertain``: predicted the same careful way as the ring, profile input
  "uncertain", the predictor's default rules;
- none (``none``, ``slot-restore``): every change re-processes from the head; the
  profile input is "none". A restored slot state resumes, but the gateway restores
  no slot, so ``slot-restore`` plans as none (it was "detected" once, issue 38).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sakur4.backends import block_cache
from sakur4.backends.experiment import CheckpointSource
from sakur4.backends.ring import (
    DEFAULT_RULES,
    FULL_ATTENTION,
    RECURRENT,
    CheckpointRules,
    SlotPrediction,
)

# What the engine's profile choice takes (engine.choose_profile).
SourceClass = Literal["detected", "none", "uncertain", "shifting"]


@dataclass(frozen=True, slots=True)
class ResumeModel:
    """How one server resumes: ``prefix`` (any prefix, in whole ``block``-token blocks;
    with ``window`` blocks, vLLM on a sliding-window model: only where the prediction's
    kept blocks allow, block_cache.py), ``ring`` (the slot prediction's checkpoints), or
    neither (nothing resumes)."""

    name: str
    prefix: bool = False
    block: int = 1
    ring: bool = False
    window: int = 0

    def resume_at(self, divergence: int, cached: int, prediction: SlotPrediction) -> int:
        """Tokens reused by a prompt that first differs at ``divergence`` from a cached
        prompt of ``cached`` tokens (``prediction``: the slot after it)."""
        if divergence <= 0:
            return 0
        if self.prefix and self.window:
            reach = min(divergence, prediction.cached_len)
            return block_cache.hit(prediction.kept, reach, self.block, self.window)
        if self.prefix:
            return min(divergence, cached) // self.block * self.block
        if self.ring:
            return prediction.resume_at(divergence)
        return 0

    def positions(
        self, candidates: Iterable[int], cached: int, prediction: SlotPrediction
    ) -> tuple[int, ...] | None:
        """Where a cut may resume (None: at any token); ``candidates`` are where the
        planner may cut (message boundaries and the cached end)."""
        if self.prefix and self.window:
            return tuple(
                b
                for b in range(self.block, cached + 1, self.block)
                if block_cache.held_before(prediction.kept, b, self.block, self.window)
            )
        if self.prefix:
            if self.block == 1:
                return None
            return tuple(range(self.block, cached + 1, self.block))
        if self.ring:
            return prediction.resume_positions(candidates)
        return ()


ANY_PREFIX = ResumeModel("any prefix", prefix=True)
CHECKPOINT_RING = ResumeModel("checkpoint ring", ring=True)
NO_RESUME = ResumeModel("none")


@dataclass(frozen=True, slots=True)
class Resumes:
    """Everything that follows from where a server resumes: the planner's model, the
    profile input, and the checkpoint predictor's rules (None: nothing to predict)."""

    model: ResumeModel
    profile_input: SourceClass
    rules: CheckpointRules | None


def resumes(
    source: CheckpointSource, *, block: int = 1, recurrent: bool = False, window: int = 0
) -> Resumes:
    """The one answer for ``source`` (``block``: the prefix cache's granularity;
    ``recurrent``: the experiment fitted a recurrent model's memory; ``window``: the
    blocks vLLM's sliding-window layers need kept before a hit, as the probe measured)."""
    if source == "exact-prefix" and block > 1 and window > 0:
        model = ResumeModel(
            f"whole {block}-token blocks where a sliding window's {window} blocks are kept",
            True,
            block,
            window=window,
        )
        rules = CheckpointRules(n_swa=0, block=block, window_blocks=window)
        return Resumes(model, "detected", rules)
    if source in ("exact-prefix", "kv-shift"):
        prefix = ANY_PREFIX
        if block > 1:
            prefix = ResumeModel(f"any prefix, whole {block}-token blocks", True, block)
        # A server that shifts kept text into place plans removals (profile ShiftFirst).
        shifting: SourceClass = "shifting" if source == "kv-shift" else "detected"
        return Resumes(prefix, shifting, FULL_ATTENTION)
    if source == "checkpoint-ring":
        return Resumes(CHECKPOINT_RING, "detected", RECURRENT if recurrent else DEFAULT_RULES)
    if source == "uncertain":
        return Resumes(CHECKPOINT_RING, "uncertain", None)
    return Resumes(NO_RESUME, "none", None)  # none, slot-restore
