"""all-MiniLM-L6-v2 in numpy reproduces the model's published similarities."""

from __future__ import annotations

import numpy as np
import pytest

from sakur4.embedders import make_embedder
from sakur4.embedders.minilm import MiniLM
from sakur4.settings import Settings


@pytest.fixture(scope="module")
def model() -> MiniLM:
    return MiniLM()


def test_published_similarities(model: MiniLM) -> None:
    # sentence-transformers' quickstart prints these for all-MiniLM-L6-v2:
    # [[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]]
    e = model.embed(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    sims = e @ e.T
    assert sims[0, 1] == pytest.approx(0.6660, abs=5e-4)
    assert sims[0, 2] == pytest.approx(0.1046, abs=5e-4)
    assert sims[1, 2] == pytest.approx(0.1411, abs=5e-4)


def test_paraphrases_rank_above_unrelated_text(model: MiniLM) -> None:
    q, para, other = model.embed(
        [
            "the database file is locked by another process",
            "another program holds a lock on the SQLite store",
            "tree-sitter parses Rust source into a syntax tree",
        ]
    )
    assert float(q @ para) > float(q @ other) + 0.2


def test_shape_norm_and_padding_do_not_change_a_vector(model: MiniLM) -> None:
    short = "open the fold"
    alone = model.embed([short])[0]
    batch = model.embed([short, "a much longer text " * 20, ""])
    assert batch.shape == (3, 384)
    assert batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    # Padded in a batch with a long text, the short text's vector is unchanged.
    assert np.allclose(batch[0], alone, atol=1e-5)


def test_empty_input(model: MiniLM) -> None:
    assert model.embed([]).shape == (0, 384)


def test_local_setting_builds_it() -> None:
    emb = make_embedder(Settings.load(embedder="local"))
    assert emb is not None
    assert emb.name == "all-MiniLM-L6-v2"
    assert emb.dim == 384
