from __future__ import annotations

import random

import pytest

from sakur4.errors import InputError
from sakur4.store import Store
from sakur4.store.projects import Project, add_project
from sakur4.store.vectors import knn, put_vector


def _fill(store: Store, project_id: int, n: int, dim: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        vec = [rng.gauss(0, 1) for _ in range(dim)]
        put_vector(store, project_id=project_id, owner="episode", owner_id=i, model="m", vector=vec)


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
            store, project_id=project.id, owner="episode", model="m", query=q, k=10, mode="exact"
        )
        assert [n.owner_id for n in a] == [n.owner_id for n in b]
        assert [n.distance for n in a] == pytest.approx([n.distance for n in b], abs=1e-5)


def test_knn_is_scoped_to_the_project(store: Store, project: Project, tmp_path) -> None:  # type: ignore[no-untyped-def]
    other_root = tmp_path / "other"
    other_root.mkdir()
    other = add_project(store, other_root)
    put_vector(store, project_id=other.id, owner="episode", owner_id=1, model="m", vector=[1, 0])
    put_vector(store, project_id=project.id, owner="episode", owner_id=2, model="m", vector=[0, 1])
    for mode in ("sqlite-vec", "exact"):
        got = knn(
            store, project_id=project.id, owner="episode", model="m", query=[1, 0], k=5, mode=mode
        )  # type: ignore[arg-type]
        assert [n.owner_id for n in got] == [2]


def test_bad_vectors_are_refused(store: Store, project: Project) -> None:
    for bad in ([], [float("nan")], [[1.0]]):
        with pytest.raises(InputError):
            put_vector(store, project_id=project.id, owner="e", owner_id=1, model="m", vector=bad)  # type: ignore[arg-type]
