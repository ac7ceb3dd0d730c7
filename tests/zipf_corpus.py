"""A recall corpus of Zipf-drawn words, shared by the SQLite and PostgreSQL recall tests."""

from __future__ import annotations

import numpy as np

from sakur4.episodes import record_episodes
from sakur4.store import Store


def zipf_corpus(store: Store, project_id: int, n: int, seed: int) -> list[str]:
    """``n`` episodes of Zipf-drawn words (a few common, a long tail), some short and
    some repeating a common word many times: rows that only a common word matches
    can then rank high, which is what skipping such rows must get right."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(400)]
    msgs = []
    for i in range(n):
        ws = [vocab[(int(r) - 1) % len(vocab)] for r in rng.zipf(1.3, int(rng.integers(1, 60)))]
        if i % 7 == 0:
            ws = ws[:2] + [ws[0]] * int(rng.integers(2, 12))  # short, one word repeated
        msgs.append({"role": "user", "content": " ".join(ws)})
    record_episodes(store, project_id, "s", 1, msgs)
    return vocab
