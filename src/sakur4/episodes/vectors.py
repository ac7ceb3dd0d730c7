"""Vectors for episodes, written under the embedder's name so models never mix."""

from __future__ import annotations

from collections.abc import Sequence

from sakur4.bounds import INT_MAX
from sakur4.embedders import Embedder
from sakur4.store.db import Store
from sakur4.store.vectors import put_vector

OWNER = "episode"
# A vector stands for the head of a long episode: servers refuse inputs longer
# than their batch, and lexical recall still covers the whole text.
EMBED_CHARS = 1500
BATCH = 64


def _embed_rows(
    store: Store, project_id: int, rows: Sequence[tuple[int, str]], embedder: Embedder
) -> int:
    for start in range(0, len(rows), BATCH):
        chunk = rows[start : start + BATCH]
        vectors = embedder.embed([text[:EMBED_CHARS] for _, text in chunk])
        for (eid, _), vec in zip(chunk, vectors, strict=True):
            put_vector(
                store,
                project_id=project_id,
                owner=OWNER,
                owner_id=eid,
                model=embedder.name,
                vector=vec,
            )
    return len(rows)


def embed_episodes(
    store: Store, project_id: int, episode_ids: Sequence[int], embedder: Embedder
) -> int:
    """Embed the given episodes of ``project_id`` that still have content; return how many.

    Errors from the embedder (a :class:`sakur4.errors.BackendError`) propagate:
    the episodes stay stored and :func:`embed_pending` can fill the gap later.
    """
    rows: list[tuple[int, str]] = []
    for start in range(0, len(episode_ids), 500):
        chunk = list(episode_ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        rows += [
            (int(r[0]), str(r[1]))
            for r in store.query(
                f"SELECT id, content FROM episodic_stream WHERE project_id = ? AND id IN ({marks}) "
                "AND content IS NOT NULL AND content != '' ORDER BY id",
                [project_id, *chunk],
            )
        ]
    return _embed_rows(store, project_id, rows, embedder)


def embed_pending(
    store: Store, project_id: int, embedder: Embedder, limit: int | None = None
) -> int:
    """Embed the project's episodes that have no vector under this embedder yet."""
    rows = [
        (int(r[0]), str(r[1]))
        for r in store.query(
            "SELECT e.id, e.content FROM episodic_stream e WHERE e.project_id = ? "
            "AND e.content IS NOT NULL AND e.content != '' AND NOT EXISTS ("
            "SELECT 1 FROM embedding v WHERE v.owner = ? AND v.owner_id = e.id AND v.model = ?) "
            "ORDER BY e.id LIMIT ?",
            (project_id, OWNER, embedder.name, INT_MAX if limit is None else limit),
        )
    ]
    return _embed_rows(store, project_id, rows, embedder)
