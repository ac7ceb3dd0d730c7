"""The /v1/embeddings client: against a real llama-server, and with faults staged
through an injected transport."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from sakur4.embedders import make_embedder
from sakur4.embedders.openai_compat import OpenAICompatEmbedder
from sakur4.errors import BackendRefused, BackendUnavailable, SettingsError
from sakur4.settings import Settings


@pytest.mark.backend
def test_real_llama_server_embeds(embedding_server: str) -> None:
    assert isinstance(make_embedder(Settings.load(embedder=embedding_server)), OpenAICompatEmbedder)
    emb = OpenAICompatEmbedder(embedding_server, batch=4)
    texts = [f"text number {i} about parsing python files" for i in range(6)]
    vecs = emb.embed(texts)  # two requests
    assert vecs.shape == (len(texts), emb.dim)
    assert emb.dim > 0
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert emb.name.startswith("openai-compat:")
    assert "gemma3" in emb.name
    # Order is kept across batches: each text's vector is the one it gets alone.
    alone = emb.embed([texts[5]])[0]
    assert float(alone @ vecs[5]) > 0.999


@pytest.mark.backend
def test_real_server_similarity_is_meaningful(embedding_server: str) -> None:
    emb = OpenAICompatEmbedder(embedding_server)
    a, b, c = emb.embed(
        ["the store could not be opened", "the store could not be opened", "bananas are yellow"]
    )
    assert float(a @ b) > float(a @ c)


def _with(handler: httpx.MockTransport) -> OpenAICompatEmbedder:
    return OpenAICompatEmbedder("http://embed.test#m", transport=handler)


def test_server_error_is_backend_unavailable() -> None:
    emb = _with(httpx.MockTransport(lambda r: httpx.Response(500, json={"error": "boom"})))
    with pytest.raises(BackendUnavailable, match=r"http://embed.test.*500.*boom"):
        emb.embed(["x"])


def test_refusal_is_backend_refused() -> None:
    body = {"error": {"code": 501, "message": "embeddings not enabled", "type": "x"}}
    emb = _with(httpx.MockTransport(lambda r: httpx.Response(501, json=body)))
    with pytest.raises(BackendRefused, match="embeddings not enabled"):
        emb.embed(["x"])


def test_connection_refused_names_the_backend() -> None:
    def fail(r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=r)

    emb = _with(httpx.MockTransport(fail))
    with pytest.raises(BackendUnavailable, match=r"embed\.test"):
        emb.embed(["x"])


def test_wrong_number_of_vectors_is_refused() -> None:
    body = {"data": [{"index": 0, "embedding": [1.0, 0.0]}]}
    emb = _with(httpx.MockTransport(lambda r: httpx.Response(200, json=body)))
    with pytest.raises(BackendUnavailable, match="1 vectors for 2 texts"):
        emb.embed(["x", "y"])


def test_malformed_answer_is_refused() -> None:
    emb = _with(httpx.MockTransport(lambda r: httpx.Response(200, text="<html>")))
    with pytest.raises(BackendUnavailable, match="non-JSON"):
        emb.embed(["x"])


def test_out_of_order_answer_is_reordered() -> None:
    body = {"data": [{"index": 1, "embedding": [0.0, 2.0]}, {"index": 0, "embedding": [3.0, 0.0]}]}
    emb = _with(httpx.MockTransport(lambda r: httpx.Response(200, json=body)))
    got = emb.embed(["x", "y"])
    assert got.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_not_a_url_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="not 'none', 'local' or an http"):
        make_embedder(Settings.load(embedder="sentence-transformers"))


def test_none_means_no_embedder() -> None:
    assert make_embedder(Settings.load()) is None
