"""bench/recall.py --engines (issue 39): SQLite and a real PostgreSQL filled with the
same episodes, recall timed on both. A small store here; the 100k run is the bench's."""

from __future__ import annotations

from pathlib import Path

import recall as bench  # bench/

import fixtures_postgresql
from fixtures_postgresql import PostgresServer
from sakur4.store import Store

postgresql_server = fixtures_postgresql.postgresql_server  # the tests' real server

N = 200


def fill_both(tmp_path: Path, server: PostgresServer) -> dict[str, tuple[Store, int]]:
    for name in ("p", "o"):
        (tmp_path / name).mkdir()
    stores = {}
    for engine, target in (
        ("sqlite", str(tmp_path / "s.db")),
        ("postgresql", server.new_schema_url()),
    ):
        store, pid, _ = bench.populate(target, tmp_path, N)
        assert store.engine == engine
        stores[engine] = (store, pid)
    return stores


def test_both_engines_hold_the_same_episodes_and_both_are_timed(
    tmp_path: Path, postgresql_server: PostgresServer
) -> None:
    stores = fill_both(tmp_path, postgresql_server)
    digests = {engine: bench.data_digest(store) for engine, (store, _) in stores.items()}
    assert digests["sqlite"] == digests["postgresql"]
    assert digests["sqlite"].startswith(f"{N + N // 10}:")
    queries = ["store1 parse2", "token3", "w5000 error4"]
    figures = bench.side_by_side(stores, queries)
    assert set(figures) == {"sqlite", "postgresql"}
    assert all(0 < p50 <= p95 for p50, p95 in figures.values())
    # A word of the first episode's rare enough for SQLite to rank by (it leaves out a
    # word in half the episodes): both engines find that episode.
    first = stores["sqlite"][0].query("SELECT content FROM episodic_stream WHERE id = 1")
    rare = next(w for w in first[0][0].split() if w.startswith("w"))
    for store, pid in stores.values():
        assert 1 in [h.episode.id for h in bench.recall(store, pid, rare, bench.K)], store.engine
        store.close()


def test_the_digest_sees_an_episode_whose_text_differs(
    tmp_path: Path, postgresql_server: PostgresServer
) -> None:
    """The bench refuses to compare engines whose digests differ: a digest of the ids,
    sessions and kinds alone would pass two stores with different text."""
    stores = fill_both(tmp_path, postgresql_server)
    store, _ = stores["postgresql"]
    with store.tx() as conn:
        conn.execute("UPDATE episodic_stream SET content = content || ' x' WHERE id = 7")
    assert bench.data_digest(store) != bench.data_digest(stores["sqlite"][0])
    for s, _ in stores.values():
        s.close()
