"""A BERT encoder forward pass in numpy (inference only), with mean pooling.

Follows Hugging Face's ``BertModel`` exactly: embeddings (word + position +
token type) and LayerNorm; per layer, self-attention with an additive padding
mask, output projection + residual + LayerNorm, an erf-GELU feed-forward +
residual + LayerNorm. float32 throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]


def _erf(x: F32) -> F32:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and BERT's
    # "gelu" is the erf form, not the tanh approximation.
    a1, a2, a3, a4, a5, p = (
        0.254829592,
        -0.284496736,
        1.421413741,
        -1.453152027,
        1.061405429,
        0.3275911,
    )
    s = np.sign(x)
    ax = np.abs(x)
    t = 1.0 / (1.0 + p * ax)
    y = 1.0 - ((((a5 * t + a4) * t + a3) * t + a2) * t + a1) * t * np.exp(-ax * ax)
    out: F32 = (s * y).astype(np.float32)
    return out


def _gelu(x: F32) -> F32:
    return (0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))).astype(np.float32)


def _layer_norm(x: F32, w: F32, b: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: F32 = ((x - mean) / np.sqrt(var + eps) * w + b).astype(np.float32)
    return out


class Bert:
    def __init__(self, weights: dict[str, np.ndarray], config: dict[str, Any]) -> None:
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_pos = int(config["max_position_embeddings"])
        w = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
        self.w = w
        # Linear weights are stored (out, in); transpose once so a layer is x @ W.
        self.lin: dict[str, F32] = {
            k: np.ascontiguousarray(v.T)
            for k, v in w.items()
            if k.endswith(".weight") and v.ndim == 2
        }

    def _linear(self, x: F32, name: str) -> F32:
        return (x @ self.lin[f"{name}.weight"] + self.w[f"{name}.bias"]).astype(np.float32)

    def _ln(self, x: F32, name: str) -> F32:
        return _layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def sentence_vectors(self, batch: Sequence[Sequence[int]]) -> F32:
        """Mean-pooled, L2-normalised sentence vectors for a batch of token id lists."""
        n, length = len(batch), max(len(ids) for ids in batch)
        if length > self.max_pos:
            raise ValueError(f"sequence of {length} tokens exceeds {self.max_pos} positions")
        ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for i, row in enumerate(batch):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1.0
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._ln(x.astype(np.float32), "embeddings.LayerNorm")
        hidden = x.shape[-1]
        dh = hidden // self.heads
        # Padding keys get a large negative score, so they take no attention weight.
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(dh))
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def heads(t: F32) -> F32:
                return t.reshape(n, length, self.heads, dh).transpose(0, 2, 1, 3)

            q = heads(self._linear(x, f"{p}.attention.self.query"))
            k = heads(self._linear(x, f"{p}.attention.self.key"))
            v = heads(self._linear(x, f"{p}.attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(n, length, hidden)
            x = self._ln(
                self._linear(ctx, f"{p}.attention.output.dense") + x,
                f"{p}.attention.output.LayerNorm",
            )
            inner = _gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._ln(self._linear(inner, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(
            mask.sum(axis=1, keepdims=True), 1.0
        )
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: F32 = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out
