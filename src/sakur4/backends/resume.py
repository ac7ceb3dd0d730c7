"""Where a server can resume a cached prompt: one object per checkpoint source, so the
gateway's planner inputs and its reuse predictions ask the object instead of
dispatching on the source's name.

- any prefix (``exact-prefix``, ``kv-shift``): a prompt resumes where it first differs
  from the cached one; on vLLM only in whole blocks (prefix caching hashes full
  128-token blocks: a divergence at 1,000 reuses 896, not 1,000);
- the checkpoint ring (``checkpoint-ring``, and ``uncertain``, predicted the same
  careful way): only where the slot's predicted checkpoints lie;
- none (``none``, ``slot-restore``): every change re-processes from the head.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sakur4.backends.experiment import CheckpointSource
from sakur4.backends.identify import BackendKind
from sakur4.backends.ring import SlotPrediction
from sakur4.backends.vllm import BLOCK_TOKENS


@dataclass(frozen=True, slots=True)
class ResumeModel:
    """How one server resumes: ``prefix`` (any prefix, in whole ``block``-token blocks),
    ``ring`` (the slot prediction's checkpoints), or neither (nothing resumes)."""

    name: str
    prefix: bool = False
    block: int = 1
    ring: bool = False

    def resume_at(self, divergence: int, cached: int, prediction: SlotPrediction) -> int:
        """Tokens reused by a prompt that first differs at ``divergence`` from a cached
        prompt of ``cached`` tokens (``prediction``: the slot after it)."""
        if divergence <= 0:
            return 0
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
        if self.prefix:
            if self.block == 1:
                return None
            return tuple(range(self.block, cached + 1, self.block))
        if self.ring:
            return prediction.resume_positions(candidates)
        return ()


ANY_PREFIX = ResumeModel("any prefix", prefix=True)
VLLM_BLOCKS = ResumeModel(f"any prefix, whole {BLOCK_TOKENS}-token blocks", True, BLOCK_TOKENS)
CHECKPOINT_RING = ResumeModel("checkpoint ring", ring=True)
NO_RESUME = ResumeModel("none")


def resume_model(kind: BackendKind, source: CheckpointSource) -> ResumeModel:
    """The resume model of a server of ``kind`` whose probe found ``source``."""
    if source in ("exact-prefix", "kv-shift"):
        return VLLM_BLOCKS if kind == "vllm" else ANY_PREFIX
    if source in ("checkpoint-ring", "uncertain"):
        return CHECKPOINT_RING
    return NO_RESUME
