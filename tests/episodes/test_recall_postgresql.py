"""Recall's word leg on PostgreSQL (episodes/lexical_postgresql.py): it reads the words
stored by m011, never parses the text again, and its skipping of the commonest words
gives exactly the full ranking (issue 39's recall goal)."""

from __future__ import annotations

import numpy as np
import pytest

from sakur4.episodes import lexical_postgresql as pg
from sakur4.episodes import record_episodes
from sakur4.episodes.recall import lexical_query, recall
from sakur4.store import Store
from sakur4.store.projects import Project
from zipf_corpus import zipf_corpus

pytestmark = pytest.mark.parametrize("engine", ["postgresql"], indirect=True)


def _spy(store: Store) -> list[str]:
    """Every statement ``store.query`` is given from now on."""
    statements: list[str] = []
    query = store.query

    def spy(sql: str, params: object = ()) -> list[object]:
        statements.append(sql)
        return query(sql, params)

    store.query = spy  # type: ignore[method-assign]
    return statements


def test_recall_ranks_from_the_stored_words(store: Store, project: Project) -> None:
    """The full-text index covers the stored column, kept in the row, and no statement
    of recall parses an episode's text: ranking from the text cost ~0.1 ms a match (9.3 s a query at
    100k episodes)."""
    [indexdef] = store.query(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "AND indexname = 'episode_fts'"
    )
    assert "(content_tsv)" in indexdef[0]
    # Kept in the row, the text moved out first: words in the TOAST table cost a look-up
    # there for each row ranked (p50 44 ms against 21 ms at 100k episodes).
    [storage] = store.query(
        "SELECT attstorage FROM pg_attribute "
        "WHERE attrelid = 'episodic_stream'::regclass AND attname = 'content_tsv'"
    )
    assert storage[0] == "m"
    msgs = [{"role": "user", "content": f"the report number {i} on parsers"} for i in range(10)]
    msgs.append({"role": "user", "content": "the parser crashed on decorators"})
    ids = record_episodes(store, project.id, "s1", 1, msgs)
    statements = _spy(store)
    # Ranked (a rare word), and newest first (every word in half the episodes or more).
    assert recall(store, project.id, "crashed parsers", k=1)[0].episode.id == ids[-1]
    assert [h.episode.id for h in recall(store, project.id, "report parser", k=2)] == [
        ids[9],
        ids[8],
    ]
    searched = [sql for sql in statements if "@@" in sql]
    assert searched
    assert not [sql for sql in statements if "to_tsvector" in sql]
    assert all("e.content_tsv @@" in sql for sql in searched)
    assert all("ts_rank(e.content_tsv" in sql for sql in searched if "ts_rank" in sql)


def test_top_rows_equal_the_full_ranking(store: Store, project: Project) -> None:
    """The word leg scores only the rows its commonest words cannot keep out of the top;
    its list must be exactly ``ORDER BY score, id LIMIT`` over every match, ties
    included, and the skipping must actually happen."""
    vocab = zipf_corpus(store, project.id, 1500, seed=3)
    rng = np.random.default_rng(4)
    scope = ("e.project_id = ? AND e.tier != 'dropped'", [project.id])
    compared = skipped = 0
    for _ in range(100):
        text = " ".join(rng.choice(vocab[:120], size=int(rng.integers(2, 5))))
        lexq = lexical_query(store, text)
        if lexq is None or not lexq.ranked:
            continue
        docs = [(w, n) for w, (_, n) in zip(lexq.words, lexq.docs, strict=True)]
        words = [w for w, _ in docs]
        weights = [pg.idf(lexq.state.rows, n) for _, n in docs]
        for limit in (3, 10, 40):
            statements = _spy(store)
            got = pg.best(store, docs, lexq.state.rows, scope, limit)
            del store.query  # the spy goes: the class's method again
            every = list(range(len(words)))
            ranked_all = [sql for sql in statements if "ORDER BY s" in sql]
            full = [sql for sql in ranked_all if sql.count("|| w.q") == len(words) - 1]
            want = pg._ranked(store, words, weights, every, scope, limit)
            assert got == want, (text, limit)
            compared += 1
            skipped += len(words) > 1 and not full
    assert compared > 150
    assert skipped > compared // 4  # the skipping path is the one tested, often
