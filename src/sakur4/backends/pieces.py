"""Token pieces per model: the bytes each token id stands for, learned from the server's
own answers, so a prompt's byte offsets can come from its ids alone.

A token's piece is part of the model's vocabulary, so it never changes while the server
serves the same model: ``/tokenize`` with pieces (1.6x the time of ids alone at 100k
tokens) is needed only for a text with many ids not seen yet, or one the proof fails;
a few unknown ids are asked for by id. The pieces are learned under the identity of
what served them (the model file and the server build, from ``/props``) and forgotten
as soon as that identity is another. Size: one entry per id the server ever returned,
so at most the vocabulary (262,144 for Gemma 3, the largest in common use);
:data:`MAX_PIECES` caps it for a server whose ids are not a vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# Gemma 3's vocabulary (the largest of the common ones: Llama 3 128,256, Qwen 3 151,936).
MAX_PIECES = 262_144

# What served a set of pieces: the model's path (or alias) and the server's build.
Identity = tuple[str | None, str | None]


class PieceCache:
    """Token id -> bytes for one model; empty again whenever the model changes."""

    def __init__(self, limit: int = MAX_PIECES) -> None:
        self.limit = limit
        self.identity: Identity | None = None
        self._bytes: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._bytes)

    def serving(self, identity: Identity | None) -> None:
        """The server now serves ``identity`` (None: unknown): pieces learned under
        another are dropped."""
        if identity != self.identity:
            self._bytes.clear()
            self.identity = identity

    def learn(self, pieces: Iterable[tuple[int, bytes]]) -> None:
        """Remember (id, bytes) pairs as the server gave them (a later answer wins, so a
        wrong entry is mended by the next answer that has its id)."""
        self._bytes.update(pieces)
        while len(self._bytes) > self.limit:
            self._bytes.popitem()  # the newest: what was known before stays

    def unknown(self, ids: Sequence[int]) -> set[int]:
        """The ids in ``ids`` without a piece."""
        return set(ids).difference(self._bytes)

    def pieces(self, ids: Sequence[int]) -> list[bytes]:
        """The pieces of ``ids``, all known (see :meth:`unknown`)."""
        get = self._bytes.__getitem__
        return [get(t) for t in ids]
