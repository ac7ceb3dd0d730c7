"""An embedder backed by any OpenAI-compatible ``POST /v1/embeddings`` server.

The setting is the server's base URL (``http://127.0.0.1:8080``); a fragment
names the model (``http://host:port#nomic-embed``), otherwise the first model the
server lists is used. The model id, not the URL, is the vectors' key, so moving
the server to another port keeps its vectors usable. Vectors are normalised here:
servers differ on whether they do it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urldefrag

import httpx
import numpy as np

from sakur4.embedders import Vectors
from sakur4.errors import BackendError, BackendRefused, BackendUnavailable, SettingsError

# One request carries at most this many texts: servers bound their batch size.
BATCH = 32


class OpenAICompatEmbedder:
    """``/v1/embeddings`` over httpx; every failure is a :class:`BackendError` naming the URL."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        batch: int = BATCH,
    ) -> None:
        base, model = urldefrag(url)
        if not base.startswith(("http://", "https://")):
            raise SettingsError(f"embedder {url!r} is not 'none', 'local' or an http(s) base URL")
        self.base = base.rstrip("/").removesuffix("/v1")
        self._model = model or None
        self._dim: int | None = None
        self._timeout = timeout
        self._batch = max(1, batch)
        self._transport = transport

    def _client(self) -> httpx.Client:
        # A client per call, closed when it is done: the embedder is handed around
        # (gateway, doctor, CLI) with no owner to close a long-lived connection pool.
        return httpx.Client(base_url=self.base, timeout=self._timeout, transport=self._transport)

    @property
    def model(self) -> str:
        if self._model is None:
            with self._client() as client:
                body = self._call(client, "GET", "/v1/models")
            try:
                self._model = str(body["data"][0]["id"])
            except (KeyError, IndexError, TypeError) as e:
                raise BackendUnavailable(self.base, "/v1/models listed no model") from e
        return self._model

    @property
    def name(self) -> str:
        return f"openai-compat:{self.model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows: list[Vectors] = []
        model = self.model
        with self._client() as client:
            for start in range(0, len(texts), self._batch):
                chunk = list(texts[start : start + self._batch])
                rows.append(self._embed_batch(client, model, chunk))
        if not rows:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return np.concatenate(rows)

    def _embed_batch(self, client: httpx.Client, model: str, batch: list[str]) -> Vectors:
        # An empty string embeds to nothing useful on some servers (or errors): send a space.
        inputs = [t if t.strip() else " " for t in batch]
        body = self._call(client, "POST", "/v1/embeddings", {"model": model, "input": inputs})
        try:
            items = sorted(body["data"], key=lambda d: int(d["index"]))
            mat = np.asarray([d["embedding"] for d in items], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as e:
            raise BackendUnavailable(self.base, f"malformed /v1/embeddings answer: {e}") from e
        if mat.ndim != 2 or mat.shape[0] != len(batch) or mat.shape[1] == 0:
            raise BackendUnavailable(
                self.base,
                f"/v1/embeddings returned {mat.shape[0] if mat.ndim else 0} vectors "
                f"for {len(batch)} texts",
            )
        if not np.isfinite(mat).all():
            raise BackendUnavailable(self.base, "/v1/embeddings returned non-finite numbers")
        if self._dim is not None and mat.shape[1] != self._dim:
            raise BackendUnavailable(
                self.base, f"vector length changed from {self._dim} to {mat.shape[1]}"
            )
        self._dim = int(mat.shape[1])
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        unit: Vectors = np.divide(mat, norms, out=np.zeros_like(mat), where=norms > 0)
        return unit

    def _call(
        self, client: httpx.Client, method: str, path: str, payload: dict[str, Any] | None = None
    ) -> Any:
        try:
            r = client.request(method, path, json=payload)
        except httpx.TimeoutException as e:
            raise BackendUnavailable(self.base, f"{method} {path} timed out") from e
        except httpx.HTTPError as e:
            raise BackendUnavailable(self.base, f"{method} {path} failed: {e}") from e
        if r.status_code >= 400:
            detail = _error_text(r)
            cls: type[BackendError] = BackendRefused if r.status_code < 500 else BackendUnavailable
            if r.status_code == 501:
                cls = BackendRefused
            raise cls(
                self.base, f"{method} {path} answered {r.status_code}: {detail}", r.status_code
            )
        try:
            return r.json()
        except ValueError as e:
            raise BackendUnavailable(self.base, f"{method} {path} answered non-JSON") from e


def _error_text(r: httpx.Response) -> str:
    try:
        err = r.json().get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err or r.text[:200])
    except ValueError:
        return r.text[:200] or r.reason_phrase
