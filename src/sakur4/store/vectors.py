"""Vector KNN over the ``embedding`` table: sqlite-vec in the database, or an exact scan.

Both modes search the same rows with the same metric (cosine distance, float32)
and order ties by owner id, so they return the same neighbours; a test runs
both on the same data. ``doctor`` reports which one is active.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sakur4.errors import InputError
from sakur4.store.db import Store

Mode = Literal["sqlite-vec", "exact"]


@dataclass(frozen=True)
class Neighbour:
    owner_id: int
    distance: float


def _blob(vector: Sequence[float] | np.ndarray) -> bytes:
    arr = np.asarray(vector, dtype=np.float32)
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all():
        raise InputError("a vector must be a non-empty, finite, one-dimensional list of floats")
    return arr.tobytes()


def put_vector(
    store: Store,
    *,
    project_id: int | None,
    owner: str,
    owner_id: int,
    model: str,
    vector: Sequence[float] | np.ndarray,
) -> None:
    """Store (or replace) the vector of one owner row under one embedding model."""
    blob = _blob(vector)
    with store.tx() as c:
        c.execute(
            "INSERT INTO embedding (project_id, owner, owner_id, model, dim, vector) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (owner, owner_id, model) "
            "DO UPDATE SET vector = excluded.vector, dim = excluded.dim, "
            "project_id = excluded.project_id",
            (project_id, owner, owner_id, model, len(blob) // 4, blob),
        )


def default_mode(store: Store) -> Mode:
    return "sqlite-vec" if store.vec_version else "exact"


def knn(
    store: Store,
    *,
    project_id: int,
    owner: str,
    model: str,
    query: Sequence[float] | np.ndarray,
    k: int,
    mode: Mode | None = None,
) -> list[Neighbour]:
    """The ``k`` rows of ``project_id`` nearest to ``query`` by cosine distance."""
    blob = _blob(query)
    dim = len(blob) // 4
    mode = mode or default_mode(store)
    if k <= 0:
        return []
    if mode == "sqlite-vec":
        if not store.vec_version:
            raise InputError("sqlite-vec is not loaded in this store connection")
        rows = store.query(
            "SELECT owner_id, vec_distance_cosine(vector, ?) AS d FROM embedding "
            "WHERE project_id = ? AND owner = ? AND model = ? AND dim = ? "
            "ORDER BY d, owner_id LIMIT ?",
            (blob, project_id, owner, model, dim, k),
        )
        return [Neighbour(int(r[0]), float(r[1])) for r in rows]
    rows = store.query(
        "SELECT owner_id, vector FROM embedding "
        "WHERE project_id = ? AND owner = ? AND model = ? AND dim = ?",
        (project_id, owner, model, dim),
    )
    if not rows:
        return []
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    mat = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim)
    q = np.frombuffer(blob, dtype=np.float32)
    norms = np.linalg.norm(mat, axis=1) * np.linalg.norm(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        dist = 1.0 - (mat @ q) / norms
    dist = np.where(norms == 0, np.nan, dist).astype(np.float32)
    order = np.lexsort((ids, dist))[:k]
    return [Neighbour(int(ids[i]), float(dist[i])) for i in order]
