"""A probe result built by hand, for tests that need a gateway without probing a server."""

from __future__ import annotations

from dataclasses import replace

from sakur4.probe import ProbeResult

_BASE = ProbeResult(
    url="http://127.0.0.1:9",
    probed_at="now",
    kind="llama.cpp",
    version=None,
    model=None,
    n_ctx=4096,
    n_ctx_train=None,
    total_slots=1,
    slot_actions="unsupported",
    exact_tokenization=True,
    reuse_verifiable=True,
    reuse_field="timings.cache_n",
    checkpoint_source="checkpoint-ring",
    sources=(),
    reason="",
    experiment=(),
    prefill_tokens_per_s=None,
    advice=(),
)


def probe_result(**changes: object) -> ProbeResult:
    """A llama.cpp probe result (ring, 4,096 tokens, one slot) with ``changes`` applied."""
    return replace(_BASE, **changes)  # type: ignore[arg-type]
