"""Where vLLM's prefix cache lets a prompt resume on a sliding-window model: a pure
function of what was sent, as measured by the probe (:mod:`sakur4.backends.vllm_experiment`).

vLLM (0.32, the hybrid KV cache manager) hashes prompts in whole blocks (128 tokens).
Full-attention layers keep every full block, so for them any prefix resumes in whole
blocks. Sliding-window layers keep only *tails*: by default
(``prefix_cache_retention_interval`` 0) a request caches their blocks only in the
``tail`` blocks (``ceil((window - 1) / block)``: 4 for Gemma 3's 512) that end at

- its replay boundary, the last full block before its last token
  (``(n - 1) // block * block``: an exact resend or an extension resumes there), and
- its shared-prefix junction, where the full-attention layers' hit ended when the
  sliding-window layers' hit was shorter (``get_computed_blocks``' Marconi junction);
  that hit covers generated tokens too (they are cached in full-attention blocks).

A prompt resumes at the largest block boundary ``b`` at or before both the full
hit and its last token whose ``tail`` blocks before ``b`` are all kept for this prefix
(``SlidingWindowManager.find_longest_cache_hit``, blocks counted from 0 near the
head), else at 0. So a change in the middle resumes at an earlier prompt's boundary
or junction, not at the block before the change: a cut at 1,000 after one 2,048-token
prompt resumes at 0, not 896 (measured; docs/verification/vllm-resume.md).

What is kept is followed along the slot's cached tokens only (the last prompt and its
answer): blocks of another branch that vLLM still holds are not counted, so a prompt
that returns to an abandoned branch is predicted low, never high.
"""

from __future__ import annotations

from collections.abc import Iterable


def tail(boundary: int, block: int, window: int) -> frozenset[int]:
    """The sliding-window blocks a request keeps for ``boundary``: the ``window`` blocks
    before it (fewer near the head)."""
    end = boundary // block
    return frozenset(range(max(0, end - window), end))


def held_before(kept: frozenset[int], boundary: int, block: int, window: int) -> bool:
    """Whether a hit may end at ``boundary`` (a whole block): the ``window`` blocks
    before it (fewer near the head) are all ``kept``."""
    end = boundary // block
    return end > 0 and all(k in kept for k in range(max(0, end - window), end))


def hit(kept: Iterable[int] | frozenset[int], full: int, block: int, window: int) -> int:
    """Where a prompt resumes whose full-attention hit is ``full`` tokens: the largest
    block boundary at or before it whose ``window`` blocks before it are all ``kept``."""
    held = kept if isinstance(kept, frozenset) else frozenset(kept)
    for end in range(full // block, 0, -1):
        if held_before(held, end * block, block, window):
            return end * block
    return 0


def kept_below(kept: frozenset[int], common: int, block: int) -> frozenset[int]:
    """The kept blocks that lie wholly in the first ``common`` tokens (the prefix a new
    prompt shares with the cached one): the rest belong to the old branch."""
    return frozenset(k for k in kept if (k + 1) * block <= common)


def after_request(
    kept: frozenset[int], full: int, served: int, n: int, block: int, window: int
) -> frozenset[int]:
    """What is kept after a request of ``n`` prompt tokens whose full-attention hit was
    ``full`` and which was served ``served``: its replay boundary's tail, and the
    junction's where the full hit was longer."""
    out = kept | tail((n - 1) // block * block, block, window)
    if full > served:
        out |= tail(full, block, window)
    return out
