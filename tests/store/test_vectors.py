from __future__ import annotations

import random

import numpy as np
import pytest

from sakur4.errors import InputError
from sakur4.store import Store, open_store
from sakur4.store.migrations import apply_migrations
from sakur4.store.projects import Project, add_project
from sakur4.store.vectors import _Matrix, knn, put_vector


def _fill(store: Store, project_id: int, n: int, dim: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        vec = [rng.gauss(0, 1) for _ in range(dim)]
        put_vector(store, project_id=project_id, owner="episode", owner_id=i, model="m", vector=vec)


@pytest.mark.parametrize("engine", ["sqlite"])  # sqlite-vec is SQLite's
def test_sqlite_vec_and_exact_scan_agree(store: Store, project: Project) -> None:
    assert store.vec_version, "sqlite-vec must load in CI (sqlean.py + sqlite-vec)"
    _fill(store, project.id, 300, 16, seed=7)
    rng = random.Random(99)
    for _ in range(20):
        q = [rng.gauss(0, 1) for _ in range(16)]
        a = knn(
            store,
            project_id=project.id,
            owner="episode",
            model="m",
            query=q,
            k=10,
            mode="sqlite-vec",
        )
        b = knn(
            store, project_id=project.id, owner="episode", model="m", query=q, k=10, mode="memory"
        )
        assert [n.owner_id for n in a] == [n.owner_id for n in b]
        assert [n.distance for n in a] == pytest.approx([n.distance for n in b], abs=1e-5)


def test_knn_is_scoped_to_the_project(store: Store, project: Project, tmp_path) -> None:  # type: ignore[no-untyped-def]
    other_root = tmp_path / "other"
    other_root.mkdir()
    other = add_project(store, other_root)
    put_vector(store, project_id=other.id, owner="episode", owner_id=1, model="m", vector=[1, 0])
    put_vector(store, project_id=project.id, owner="episode", owner_id=2, model="m", vector=[0, 1])
    for mode in ("sqlite-vec", "memory") if store.vec_version else ("memory",):
        got = knn(
            store, project_id=project.id, owner="episode", model="m", query=[1, 0], k=5, mode=mode
        )  # type: ignore[arg-type]
        assert [n.owner_id for n in got] == [2]


def test_bad_vectors_are_refused(store: Store, project: Project) -> None:
    for bad in ([], [float("nan")], [[1.0]]):
        with pytest.raises(InputError):
            put_vector(store, project_id=project.id, owner="e", owner_id=1, model="m", vector=bad)  # type: ignore[arg-type]


def _ids(store: Store, project_id: int, q: list[float], k: int = 50) -> list[int]:
    return [
        n.owner_id
        for n in knn(store, project_id=project_id, owner="episode", model="m", query=q, k=k)
    ]


def _truth(store: Store, project_id: int, q: list[float], k: int = 50) -> list[int]:
    """The exact answer from the rows themselves: sqlite-vec's in-database scan, or on
    PostgreSQL (no pgvector here) a matrix loaded afresh from the rows now."""
    if store.engine == "postgresql":
        rows = store.query(
            "SELECT owner_id, vector FROM embedding WHERE project_id = ? AND owner = 'episode' "
            "AND model = 'm' AND dim = ?",
            (project_id, len(q)),
        )
        fresh = _Matrix(dim=len(q))
        fresh.reset([int(r[0]) for r in rows], [bytes(r[1]) for r in rows])
        return [n.owner_id for n in fresh.nearest(np.asarray(q, dtype=np.float32), k)]
    got = knn(
        store,
        project_id=project_id,
        owner="episode",
        model="m",
        query=q,
        k=k,
        mode="sqlite-vec",
    )
    return [n.owner_id for n in got]


def test_the_held_matrix_follows_writes_from_another_connection(
    store: Store, project: Project, store_target: str
) -> None:
    """A second process writing the same store: every insert, update and delete it
    commits is seen by the first connection's next search, with no reload asked for."""
    _fill(store, project.id, 200, 8, seed=1)
    rng = random.Random(5)
    queries = [[rng.gauss(0, 1) for _ in range(8)] for _ in range(5)]
    before = [_ids(store, project.id, q) for q in queries]  # loads the matrix
    other = open_store(store_target)
    try:
        near = before[0][0]
        far = before[0][-1]
        # Update: the nearest row now points away; a far row now matches the query.
        put_vector(
            other, project_id=project.id, owner="episode", owner_id=near, model="m",
            vector=[-x for x in queries[0]],
        )  # fmt: skip
        put_vector(
            other, project_id=project.id, owner="episode", owner_id=far, model="m",
            vector=queries[0],
        )  # fmt: skip
        # Insert, and delete through a plain DELETE (as dropping an episode does).
        for i in range(300, 320):
            vec = [rng.gauss(0, 1) for _ in range(8)]
            put_vector(other, project_id=project.id, owner="episode", owner_id=i, model="m",
                       vector=vec)  # fmt: skip
        with other.tx() as c:
            c.execute("DELETE FROM embedding WHERE owner_id IN (?, ?)", (before[1][0], 301))
        for q in queries:
            assert _ids(store, project.id, q) == _truth(store, project.id, q)
        assert _ids(store, project.id, queries[0])[0] == far
        assert near not in _ids(store, project.id, queries[0], k=150)
    finally:
        other.close()


def test_a_reused_row_id_is_not_taken_for_the_old_row(store: Store, project: Project) -> None:
    """SQLite gives a new row the id of a deleted last row; the held matrix must not
    mistake the new vector for the one it had."""
    _fill(store, project.id, 20, 4, seed=2)
    q = [1.0, 0.0, 0.0, 0.0]
    assert _ids(store, project.id, q) == _truth(store, project.id, q)
    last = store.query("SELECT id, owner_id FROM embedding ORDER BY id DESC LIMIT 1")[0]
    with store.tx() as c:
        c.execute("DELETE FROM embedding WHERE id = ?", (last[0],))
    put_vector(store, project_id=project.id, owner="episode", owner_id=99, model="m", vector=q)
    if store.engine == "sqlite":  # PostgreSQL's identity never hands an id out twice
        assert store.query("SELECT owner_id FROM embedding WHERE id = ?", (last[0],))[0][0] == 99
    assert _ids(store, project.id, q)[0] == 99
    assert last[1] not in _ids(store, project.id, q)


def test_a_vector_moved_to_another_project_leaves_the_first(
    store: Store, project: Project, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "other").mkdir()
    other = add_project(store, tmp_path / "other")
    put_vector(store, project_id=project.id, owner="episode", owner_id=1, model="m", vector=[1, 0])
    assert _ids(store, project.id, [1, 0]) == [1]
    assert _ids(store, other.id, [1, 0]) == []
    put_vector(store, project_id=other.id, owner="episode", owner_id=1, model="m", vector=[1, 0])
    assert _ids(store, project.id, [1, 0]) == []
    assert _ids(store, other.id, [1, 0]) == [1]


def test_ties_are_ordered_by_owner_id_at_the_cut(store: Store, project: Project) -> None:
    """Rows at the same distance as the k-th are all candidates: the held matrix
    answers exactly what a full sort does, not whichever tie the partition kept."""
    for i in (7, 3, 9, 1, 5, 2):
        put_vector(store, project_id=project.id, owner="episode", owner_id=i, model="m",
                   vector=[1, 1])  # fmt: skip
    put_vector(store, project_id=project.id, owner="episode", owner_id=4, model="m", vector=[1, 0])
    assert _ids(store, project.id, [1, 0], k=3) == [4, 1, 2]
    assert _ids(store, project.id, [1, 0], k=3) == _truth(store, project.id, [1, 0], k=3)


def test_a_store_without_the_change_log_is_read_afresh(store_target: str, project_dir) -> None:  # type: ignore[no-untyped-def]
    """A store at the schema before the log (m003): each search reads the rows, so a
    write is never missed."""
    old = open_store(store_target, migrate=False)
    try:
        apply_migrations(old, upto=3)
        pid = add_project(old, project_dir).id
        put_vector(old, project_id=pid, owner="episode", owner_id=1, model="m", vector=[1, 0])
        assert _ids(old, pid, [1, 0]) == [1]
        put_vector(old, project_id=pid, owner="episode", owner_id=2, model="m", vector=[1, 0])
        assert _ids(old, pid, [1, 0]) == [1, 2]
    finally:
        old.close()
