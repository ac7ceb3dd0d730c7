"""The simulator's model of llama-server's chunk reuse (``--cache-reuse``)."""

from __future__ import annotations

from simserver import reuse_chunks


def test_cache_reuse_shifts_chunks_after_a_removed_span() -> None:
    cached = list(range(100))
    # Tokens 10-39 removed: the 60 after them are shifted into place, not re-processed.
    assert reuse_chunks(cached, [*range(10), *range(40, 100), 500], 10, 16) == 70
    # Replaced by new text: nothing after the replacement is reused.
    assert reuse_chunks(cached, [*range(10), 900, 901, *range(40, 100)], 10, 16) == 10
    # A run shorter than the chunk size is not reused.
    assert reuse_chunks(cached, [*range(10), *range(40, 50), 777], 10, 16) == 10
