"""Vector KNN over the ``embedding`` table: an exact numpy scan of a matrix held in memory.

The rows stay the truth. Each open store keeps, per (project, owner, model, dim),
the vectors as one float32 matrix, loaded from the table on first use and then
brought up to date before every search from ``embedding_change`` (a log the
store's triggers write for every insert, update and delete, by any connection or
process): the changed rows are re-read and appended, replaced or removed. A
search is one matrix-vector product over the project's rows, whether or not
sqlite-vec loads; at 100k vectors it replaced a 100+ ms row-by-row
``vec_distance_cosine`` scan (docs/design/memory.md).

``mode="sqlite-vec"`` still runs that in-database scan, as a cross-check: both use
cosine distance on float32 and order ties by owner id, so they return the same
neighbours (a test runs both on the same data).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sakur4.errors import InputError
from sakur4.store.db import Store
from sakur4.store.dialect import table_exists_sql

Mode = Literal["memory", "sqlite-vec"]
Scope = tuple[int, str, str, int]  # (project_id, owner, model, dim)

# Past this many changed rows since the last look, one full reload is cheaper
# than re-reading them one IN-list at a time.
RELOAD_CHANGES = 2_000
SQL_PARAMS = 500


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


@dataclass
class _Matrix:
    """One scope's vectors in memory: rows ``[:n]`` are live, the rest is room to grow."""

    dim: int
    seq: int = -1  # the last embedding_change applied (-1: none read yet)
    logged: bool = False  # the store has the embedding_change log
    n: int = 0
    ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    rows: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=np.float32))
    norms: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    row_of: dict[int, int] = field(default_factory=dict)  # owner id -> row
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, ids: list[int], blobs: list[bytes]) -> None:
        n = len(ids)
        self.rows = np.empty((n + max(16, n // 16), self.dim), dtype=np.float32)
        self.rows[:n] = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(n, self.dim)
        self.ids = np.empty(len(self.rows), dtype=np.int64)
        self.ids[:n] = ids
        self.norms = np.empty(len(self.rows), dtype=np.float32)
        self.norms[:n] = np.linalg.norm(self.rows[:n], axis=1)
        self.n = n
        self.row_of = {owner_id: i for i, owner_id in enumerate(ids)}

    def put(self, owner_id: int, blob: bytes) -> None:
        i = self.row_of.get(owner_id)
        if i is None:
            if self.n == len(self.rows):
                grow = max(16, self.n // 2)
                self.rows = np.concatenate([self.rows, np.empty((grow, self.dim), np.float32)])
                self.ids = np.concatenate([self.ids, np.empty(grow, np.int64)])
                self.norms = np.concatenate([self.norms, np.empty(grow, np.float32)])
            i = self.n
            self.n += 1
            self.row_of[owner_id] = i
            self.ids[i] = owner_id
        self.rows[i] = np.frombuffer(blob, dtype=np.float32)
        # The same reduction as a full load's, so a row's distance does not depend
        # on how it arrived.
        self.norms[i] = np.linalg.norm(self.rows[i : i + 1], axis=1)[0]

    def remove(self, owner_id: int) -> None:
        i = self.row_of.pop(owner_id, None)
        if i is None:
            return
        last = self.n - 1
        if i != last:  # the last row takes the freed place: rows stay contiguous
            moved = int(self.ids[last])
            self.rows[i], self.ids[i], self.norms[i] = self.rows[last], moved, self.norms[last]
            self.row_of[moved] = i
        self.n = last

    def nearest(self, q: np.ndarray, k: int) -> list[Neighbour]:
        n = self.n
        if n == 0 or k <= 0:
            return []
        ids = self.ids[:n]
        with np.errstate(divide="ignore", invalid="ignore"):
            # A zero row gives 0/0 = NaN, which sorts last, as sqlite-vec's NULL does.
            dist = 1.0 - (self.rows[:n] @ q) / (self.norms[:n] * np.linalg.norm(q))
        if k < n:
            part = np.argpartition(dist, k - 1)[:k]
            kth = dist[part].max()
            # Every row tied with the k-th is a candidate, so ties go by owner id
            # exactly as a full sort would order them.
            cand = np.flatnonzero(dist <= kth) if not np.isnan(kth) else np.arange(n)
        else:
            cand = np.arange(n)
        top = cand[np.lexsort((ids[cand], dist[cand]))][:k]
        return [Neighbour(int(ids[i]), float(dist[i])) for i in top]


# id(store) -> that store's matrices; an entry goes when its Store is collected.
_held: dict[int, dict[Scope, _Matrix]] = {}
_held_lock = threading.Lock()


def _matrix(store: Store, scope: Scope) -> _Matrix:
    with _held_lock:
        per_store = _held.get(id(store))
        if per_store is None:
            per_store = _held[id(store)] = {}
            weakref.finalize(store, _held.pop, id(store), None)
        m = per_store.get(scope)
        if m is None:
            m = per_store[scope] = _Matrix(dim=scope[3])
        return m


def _latest_change(store: Store, m: _Matrix) -> int | None:
    """The newest embedding_change seq (0 when empty); None on a store without the log
    (one opened without migrating), whose rows are then re-read on every search."""
    if not m.logged:
        if not store.query(table_exists_sql(store.engine), ("embedding_change",)):
            return None
        m.logged = True  # a migration is never undone
    return int(store.query("SELECT coalesce(max(seq), 0) FROM embedding_change")[0][0])


def _refresh(store: Store, scope: Scope, m: _Matrix) -> None:
    """Bring ``m`` up to the rows as they are now.

    The log position is read before the rows: a change committed in between is
    then both in what was read and in the log past that position, and re-applying
    it re-reads its row, which is idempotent. So nothing is missed and nothing
    needs a read transaction (a read-only store can take none of the write kind)."""
    project_id, owner, model, dim = scope
    seq = _latest_change(store, m)
    if seq is not None and seq == m.seq:
        return
    changed: list[int] | None = None
    if seq is not None and m.seq >= 0:
        changed = [
            int(r[0])
            for r in store.query(
                "SELECT DISTINCT owner_id FROM embedding_change WHERE seq > ? AND seq <= ? "
                "AND project_id = ? AND owner = ? AND model = ?",
                (m.seq, seq, project_id, owner, model),
            )
        ]
        if len(changed) > RELOAD_CHANGES:
            changed = None
    if changed is None:
        rows = store.query(
            "SELECT owner_id, vector FROM embedding "
            "WHERE project_id = ? AND owner = ? AND model = ? AND dim = ?",
            (project_id, owner, model, dim),
        )
        m.reset([int(r[0]) for r in rows], [bytes(r[1]) for r in rows])
    else:
        for start in range(0, len(changed), SQL_PARAMS):
            chunk = changed[start : start + SQL_PARAMS]
            marks = ",".join("?" * len(chunk))
            # "+project_id": look rows up by (owner, owner_id, model), never by
            # walking the project's whole scope index.
            now = {
                int(r[0]): bytes(r[1])
                for r in store.query(
                    f"SELECT owner_id, vector FROM embedding WHERE owner = ? AND model = ? "
                    f"AND owner_id IN ({marks}) AND +project_id = ? AND dim = ?",
                    (owner, model, *chunk, project_id, dim),
                )
            }
            for owner_id in chunk:
                blob = now.get(owner_id)
                if blob is None:
                    m.remove(owner_id)
                else:
                    m.put(owner_id, blob)
    m.seq = seq if seq is not None else -1


def knn(
    store: Store,
    *,
    project_id: int,
    owner: str,
    model: str,
    query: Sequence[float] | np.ndarray,
    k: int,
    mode: Mode = "memory",
) -> list[Neighbour]:
    """The ``k`` rows of ``project_id`` nearest to ``query`` by cosine distance,
    nearest first, ties by owner id."""
    blob = _blob(query)
    dim = len(blob) // 4
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
    scope = (project_id, owner, model, dim)
    m = _matrix(store, scope)
    with m.lock:
        _refresh(store, scope, m)
        return m.nearest(np.frombuffer(blob, dtype=np.float32), k)
