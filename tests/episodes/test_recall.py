"""Recall: BM25 + vectors fused, scoped to the project, folded found, dropped not."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from sakur4.embedders.minilm import MiniLM
from sakur4.episodes import record_episodes, remember, set_tiers
from sakur4.episodes.recall import LexicalQuery, _best, lexical_query, recall
from sakur4.episodes.stream import forget_turn
from sakur4.episodes.vectors import embed_pending
from sakur4.errors import InputError
from sakur4.store import Store, open_store
from sakur4.store.migrations import apply_migrations
from sakur4.store.projects import Project, add_project
from sakur4.store.vectors import put_vector
from sakur4.vocabulary import Tier
from zipf_corpus import zipf_corpus

TEXTS = [
    "The SQLite store was locked by another process during migration.",
    "Tree-sitter grammar for Rust parses impl blocks into symbols.",
    "The gateway streams tool calls back to the harness unchanged.",
    "Budget exceeded: pinned anchors need more tokens than the window allows.",
    "We renamed parse_file to parse_source in the ledger indexer.",
]


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


def _record(store: Store, project_id: int, session: str = "s1") -> list[int]:
    msgs = [{"role": "user", "content": t} for t in TEXTS]
    return record_episodes(store, project_id, session, 1, msgs)


def test_lexical_recall_ranks_and_shows_scores(store: Store, project: Project) -> None:
    ids = _record(store, project.id)
    hits = recall(store, project.id, "locked store", k=3)
    assert hits[0].episode.id == ids[0]
    assert hits[0].lexical_rank == 1
    assert hits[0].bm25 is not None
    assert hits[0].bm25 < 0
    assert hits[0].vector_rank is None
    assert hits[0].score == pytest.approx(1 / 61)


def test_folded_found_in_full_dropped_not(store: Store, project: Project) -> None:
    msgs = [
        {"role": "tool", "tool_call_id": "c", "content": f"migration log line {i}"}
        for i in range(3)
    ]
    ids = record_episodes(store, project.id, "s1", 1, msgs, droppable_kinds={"tool_result"})
    set_tiers(store, project.id, {ids[0]: Tier.MASKED})
    set_tiers(store, project.id, {ids[1]: Tier.ARCHIVED})
    set_tiers(store, project.id, {ids[2]: Tier.DROPPED})
    hits = {h.episode.id: h for h in recall(store, project.id, "migration log", k=10)}
    assert set(hits) == {ids[0], ids[1]}
    assert hits[ids[1]].episode.content == "migration log line 1"
    assert hits[ids[1]].episode.tier is Tier.ARCHIVED


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "AND",
        "OR NOT",
        "NEAR(a b",
        "*",
        "col:store",
        "-store",
        "(",
        "'; DROP",
        "",
        "  ",
        'store" OR "x',
        "^store",
        "store*",
        "{a b}:c",
        "\\",
        "NEAR/3",
        "ü\u0000",
    ],
)
def test_fts_syntax_in_queries_never_errors(store: Store, project: Project, query: str) -> None:
    _record(store, project.id)
    recall(store, project.id, query)


def test_lexical_query_quotes_every_term(store: Store, project: Project) -> None:
    _record(store, project.id)
    remember(store, project.id, "or near x")  # each word in under half the episodes
    got = lexical_query(store, 'Store" OR NEAR(x store')
    assert got == LexicalQuery('"store" OR "or" OR "near" OR "x"', ranked=True)
    assert lexical_query(store, "!!!") is None


def test_filters(store: Store, project: Project) -> None:
    a = _record(store, project.id, "s1")
    b = _record(store, project.id, "s2")
    note = remember(store, project.id, "the store lock again")
    assert {h.episode.id for h in recall(store, project.id, "store", session="s2")} == {b[0]}
    assert {h.episode.id for h in recall(store, project.id, "store", kind="note")} == {note}
    now = datetime.now(UTC)
    assert recall(store, project.id, "store", since=now + timedelta(hours=1)) == []
    assert len(recall(store, project.id, "store", until=now + timedelta(hours=1))) == 3
    assert a[0] in {
        h.episode.id for h in recall(store, project.id, "store", since=now - timedelta(hours=1))
    }
    with pytest.raises(InputError, match="timezone"):
        recall(store, project.id, "store", since=datetime.now())
    with pytest.raises(InputError, match="unknown kind"):
        recall(store, project.id, "store", kind="memo")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        recall(store, project.id, "store", k=0)


def test_two_projects_never_see_each_other(
    store: Store, project: Project, tmp_path: Path, minilm: MiniLM
) -> None:
    (tmp_path / "other").mkdir()
    other = add_project(store, tmp_path / "other")
    mine = _record(store, project.id)
    theirs = _record(store, other.id)  # the very same texts and session name
    for pid in (project.id, other.id):
        embed_pending(store, pid, minilm)
    for query in ("store locked", "tree-sitter grammar", "database busy"):
        got = {h.episode.id for h in recall(store, project.id, query, k=20, embedder=minilm)}
        assert got
        assert got <= set(mine)
        got = {h.episode.id for h in recall(store, other.id, query, k=20, embedder=minilm)}
        assert got <= set(theirs)


def test_hybrid_finds_a_paraphrase_with_no_shared_word(
    store: Store, project: Project, minilm: MiniLM
) -> None:
    ids = _record(store, project.id)
    assert embed_pending(store, project.id, minilm) == len(TEXTS)
    assert embed_pending(store, project.id, minilm) == 0  # nothing left to do
    query = "database busy because a different program held it"
    assert ids[0] not in {h.episode.id for h in recall(store, project.id, query)}  # no shared word
    hits = recall(store, project.id, query, k=5, embedder=minilm)
    top = hits[0]
    assert top.episode.id == ids[0]
    assert top.vector_rank == 1
    assert top.distance is not None
    assert top.distance < 0.7
    # Both sources agree on the lock episode for a query sharing its words.
    both = recall(store, project.id, "SQLite store locked", k=5, embedder=minilm)[0]
    assert both.episode.id == ids[0]
    assert (both.lexical_rank, both.vector_rank) == (1, 1)
    assert both.score == pytest.approx(2 / 61)


def test_dropped_episodes_lose_their_vectors(
    store: Store, project: Project, minilm: MiniLM
) -> None:
    msgs = [{"role": "tool", "tool_call_id": "c", "content": TEXTS[0]}]
    ids = record_episodes(store, project.id, "s1", 1, msgs, droppable_kinds={"tool_result"})
    embed_pending(store, project.id, minilm)
    set_tiers(store, project.id, {ids[0]: Tier.DROPPED})
    assert store.query("SELECT count(*) FROM embedding")[0][0] == 0
    assert recall(store, project.id, "locked store", embedder=minilm) == []


def test_words_in_half_the_episodes_are_left_out(store: Store, project: Project) -> None:
    msgs = [{"role": "user", "content": f"the report number {i}"} for i in range(10)]
    msgs.append({"role": "user", "content": "the parser crashed on decorators"})
    ids = record_episodes(store, project.id, "s1", 1, msgs)
    # "the" is in every episode: its IDF is floored, so it is not worth scoring.
    assert lexical_query(store, "the parser") == LexicalQuery('"parser"', ranked=True)
    assert lexical_query(store, "number 3") == LexicalQuery('"3"', ranked=True)
    assert lexical_query(store, "nowhere") is None
    hits = recall(store, project.id, "the parser", k=3)
    assert [h.episode.id for h in hits] == [ids[-1]]


def test_when_no_word_discriminates_newest_come_first(store: Store, project: Project) -> None:
    msgs = [{"role": "user", "content": f"the report {'x ' * i}"} for i in range(6)]
    ids = record_episodes(store, project.id, "s1", 1, msgs)
    # Both words are everywhere ("report" is the rarer, in 6 of 6 like "the"). On
    # PostgreSQL "the" is a stop word, in no episode's words: "report" is matched.
    rarest = '"the"' if store.engine == "sqlite" else '"report"'
    assert lexical_query(store, "the report") == LexicalQuery(rarest, ranked=False)
    hits = recall(store, project.id, "THE report", k=3)
    assert [h.episode.id for h in hits] == ids[::-1][:3]
    assert all(h.bm25 is not None for h in hits)


class _Toward:
    """An embedder stand-in: every text maps to one fixed direction."""

    name = "toward-x"
    dim = 2

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.tile(np.array([1.0, 0.0], dtype=np.float32), (len(texts), 1))


def test_filters_never_hide_an_exact_match_in_either_leg(
    store: Store, project: Project, tmp_path: Path
) -> None:
    """Both legs rank first and filter after; when the filter leaves too few, they must
    go deeper rather than answer short (the exact answer is what filtering first gives)."""
    (tmp_path / "other").mkdir()
    other = add_project(store, tmp_path / "other")
    # Lexical: another project's 300 episodes outrank ours on the query word (and
    # 400 more keep it in under half the episodes, so BM25 ranks by it).
    record_episodes(
        store, other.id, "s", 1,
        [{"role": "user", "content": f"parser parser parser {i}"} for i in range(300)]
        + [{"role": "user", "content": f"filler {i}"} for i in range(400)],
    )  # fmt: skip
    ours = record_episodes(
        store, project.id, "s", 1,
        [{"role": "user", "content": f"the parser and {i} other words here"} for i in range(3)],
    )  # fmt: skip
    assert lexical_query(store, "parser") == LexicalQuery('"parser"', ranked=True)
    assert {h.episode.id for h in recall(store, project.id, "parser", k=3)} == set(ours)
    # Vector: 300 tool results lie nearer the query than the 5 notes a kind filter wants.
    tools = record_episodes(
        store, project.id, "t", 1,
        [{"role": "tool", "tool_call_id": "c", "content": f"result {i}"} for i in range(300)],
    )  # fmt: skip
    notes = [remember(store, project.id, f"note {i}") for i in range(5)]
    for eid in tools:
        put_vector(store, project_id=project.id, owner="episode", owner_id=eid,
                   model=_Toward.name, vector=[1.0, 0.01])  # fmt: skip
    for eid in notes:
        put_vector(store, project_id=project.id, owner="episode", owner_id=eid,
                   model=_Toward.name, vector=[0.0, 1.0])  # fmt: skip
    hits = recall(store, project.id, "zzz", k=5, kind="note", embedder=_Toward())
    assert [h.episode.id for h in hits] == notes
    assert all(h.vector_rank is not None for h in hits)


def test_hybrid_recall_leaves_no_thread_behind(store: Store, project: Project) -> None:
    """The vector leg runs on its own thread during the call only: a thread left alive
    would stop this process from ever indexing with its worker pool (ledger/index.py)."""
    ids = _record(store, project.id)
    for eid in ids:
        put_vector(store, project_id=project.id, owner="episode", owner_id=eid,
                   model=_Toward.name, vector=[1.0, 0.0])  # fmt: skip
    before = threading.active_count()
    hits = recall(store, project.id, "locked store", k=5, embedder=_Toward())
    assert {h.episode.id for h in hits} == set(ids)
    assert hits[0].lexical_rank is not None
    assert hits[0].vector_rank is not None
    assert threading.active_count() == before


def _statement_spy(store: Store) -> tuple[list[str], Callable[..., list[object]]]:
    """A stand-in for ``store.query`` that records each statement it passes on."""
    statements: list[str] = []
    query = store.query

    def spy(sql: str, params: object = ()) -> list[object]:
        statements.append(sql)
        return query(sql, params)

    return statements, spy


def test_bm25_top_rows_equal_the_full_ranking(store: Store, project: Project) -> None:
    """The BM25 leg scores only the rows its commonest words cannot keep out of the top
    (MaxScore); its list must be exactly ``ORDER BY bm25, rowid LIMIT`` over every
    match, ties included, and the skipping must actually happen."""
    vocab = zipf_corpus(store, project.id, 1500, seed=3)
    rng = np.random.default_rng(4)
    query = store.query
    statements, spy = _statement_spy(store)

    store.query = spy  # type: ignore[method-assign]
    compared = skipped = 0
    for _ in range(150):
        text = " ".join(rng.choice(vocab[:120], size=int(rng.integers(2, 5))))
        lexq = lexical_query(store, text)
        if lexq is None or not lexq.ranked:
            continue
        for limit in (3, 10, 40):
            statements.clear()
            got = _best(store, lexq, limit)
            took_skip = any("+rowid IN" in sql for sql in statements) and not any(
                sql.endswith("MATCH ? ORDER BY s, rowid LIMIT ?") for sql in statements
            )  # the rows skipping gave were kept: every match was not scored after all
            want = query(
                "SELECT rowid, bm25(episode_fts) AS s FROM episode_fts "
                "WHERE episode_fts MATCH ? ORDER BY s, rowid LIMIT ?",
                [lexq.match, limit],
            )
            assert got == [(int(r[0]), float(r[1])) for r in want], (text, limit)
            compared += 1
            skipped += bool(took_skip)
    assert compared > 200
    assert skipped > compared // 4  # the skipping path is the one tested, often


def test_newest_first_skips_another_projects_newer_rows(
    store: Store, project: Project, tmp_path: Path
) -> None:
    """Newest first walks the index backwards: rows of another project recorded later
    come first in that walk and must be passed over, not end the answer short."""
    (tmp_path / "other").mkdir()
    other = add_project(store, tmp_path / "other")
    ours = record_episodes(
        store, project.id, "s", 1,
        [{"role": "user", "content": f"the alpha beta {i}"} for i in range(4)],
    )  # fmt: skip
    record_episodes(
        store, other.id, "s", 1,
        [{"role": "user", "content": f"the alpha beta {i}"} for i in range(300)],
    )  # fmt: skip
    # "beta" is in fewer rows than "alpha" below, both in half or more: beta is matched.
    record_episodes(store, other.id, "t", 1, [{"role": "user", "content": "the alpha"}])
    assert lexical_query(store, "alpha beta") == LexicalQuery('"beta"', ranked=False)
    hits = recall(store, project.id, "alpha beta", k=3)
    assert [h.episode.id for h in hits] == ours[::-1][:3]
    assert [h.episode.id for h in recall(store, project.id, "alpha beta", k=10)] == ours[::-1]


def _uncounted(store: Store) -> Store:
    """The same connection as a new Store: no word counts held (they are per Store)."""
    return Store(
        path=store.path, conn=store.conn, vec_version=store.vec_version, engine=store.engine
    )


def _same_as_counted_afresh(store: Store, texts: list[str]) -> None:
    for text in texts:
        held, fresh = lexical_query(store, text), lexical_query(_uncounted(store), text)
        assert (held is None) == (fresh is None), text
        if held is not None and fresh is not None:
            assert (held.match, held.ranked, held.matches, held.docs) == (
                fresh.match, fresh.ranked, fresh.matches, fresh.docs,
            ), text  # fmt: skip


def test_held_word_counts_follow_every_change(
    store: Store, project: Project, store_target: str
) -> None:
    """Word counts are kept between queries and brought up to date from the rows added
    since; any other change (another connection's insert, a drop, a delete, an insert
    below the highest id) must show in the next query as a fresh count would."""
    texts = ["alpha", "alpha beta", "beta gamma", "gamma", "delta alpha", "the alpha"]

    def record(session: str, contents: list[str]) -> list[int]:
        msgs = [{"role": "tool", "tool_call_id": "c", "content": c} for c in contents]
        return record_episodes(store, project.id, session, 1, msgs, droppable_kinds={"tool_result"})

    record("s1", ["the alpha", "the beta", "the gamma"] * 5)
    _same_as_counted_afresh(store, texts)
    # Appended rows: counted on top of what is held.
    record("s2", ["alpha alpha", "the delta"] * 4)
    _same_as_counted_afresh(store, texts)
    # Another connection appends.
    other = open_store(store_target)
    try:
        record_episodes(
            other, project.id, "s3", 1,
            [{"role": "tool", "tool_call_id": "c", "content": "beta beta"}] * 9,
        )  # fmt: skip
    finally:
        other.close()
    _same_as_counted_afresh(store, texts)
    # A drop empties content in place (the row keeps its id).
    alpha = [int(r[0]) for r in store.query("SELECT id FROM episodic_stream "
                                           "WHERE content LIKE '%alpha%'")]  # fmt: skip
    set_tiers(store, project.id, dict.fromkeys(alpha[:6], Tier.DROPPED))
    _same_as_counted_afresh(store, texts)
    # A delete.
    assert forget_turn(store, project.id, "s3", 1) == 9
    _same_as_counted_afresh(store, texts)
    # A row given an id below the highest (the gap a delete left).
    gap = int(store.query("SELECT max(id) FROM episodic_stream")[0][0]) - 3
    with store.tx() as c:
        c.execute("DELETE FROM episodic_stream WHERE id = ?", [gap])
    _same_as_counted_afresh(store, texts)
    with store.tx() as c:
        c.execute(
            "INSERT INTO episodic_stream (id, project_id, session, turn, seq, role, kind, "
            "content, content_hash, tokens) SELECT ?, project_id, session, turn, 999, role, "
            "kind, 'delta delta gamma', 'h', 3 FROM episodic_stream LIMIT 1",
            [gap],
        )
    _same_as_counted_afresh(store, texts)


def test_a_store_from_before_the_counter_migrates_and_recalls(tmp_path: Path) -> None:
    """m006 adds the counter to a store that already holds episodes: they stay, are
    found, and held counts follow changes to them afterwards."""
    path = tmp_path / "old.db"
    old = open_store(path, migrate=False)
    apply_migrations(old, upto=5)
    (tmp_path / "p").mkdir()
    pid = add_project(old, tmp_path / "p").id
    # Rows as that schema held them (today's record_episodes writes m008's columns too).
    with old.tx() as c:
        ids = [
            int(c.execute(
                "INSERT INTO episodic_stream (project_id, session, turn, seq, role, kind, "
                "tool_call_id, content, payload, content_hash, tokens, droppable) "
                "VALUES (?, 's', 1, ?, 'tool', 'tool_result', 'c', ?, NULL, ?, 3, 1)",
                (pid, i, t, f"h{i}"),
            ).lastrowid or 0)
            for i, t in enumerate([*TEXTS, *["x"] * 6])
        ]  # fmt: skip
    assert not old.query("SELECT 1 FROM sqlite_master WHERE name = 'episode_fts_epoch'")
    old.close()
    store = open_store(path)
    try:
        assert store.query("SELECT n FROM episode_fts_epoch")[0][0] == 0
        assert store.query("SELECT count(*) FROM episodic_stream")[0][0] == len(ids)
        assert recall(store, pid, "locked store")[0].episode.id == ids[0]
        set_tiers(store, pid, {ids[0]: Tier.DROPPED})
        assert store.query("SELECT n FROM episode_fts_epoch")[0][0] == 1
        assert ids[0] not in {h.episode.id for h in recall(store, pid, "locked store")}
        _same_as_counted_afresh(store, ["locked store", "sqlite", "x"])
    finally:
        store.close()


def test_bm25_skipping_is_not_trusted_once_the_index_changed(
    store: Store, project: Project
) -> None:
    """The skipping rests on counts taken before the ranking: if a row came or went in
    between, every match is scored instead (the answer a full ranking gives now)."""
    vocab = zipf_corpus(store, project.id, 1500, seed=5)
    rng = np.random.default_rng(6)
    query = store.query
    statements, spy = _statement_spy(store)

    def skipped(lexq: LexicalQuery) -> list[tuple[int, float]] | None:
        statements.clear()
        store.query = spy  # type: ignore[method-assign]
        try:
            got = _best(store, lexq, 10)
        finally:
            store.query = query  # type: ignore[method-assign]
        full = any(sql.endswith("MATCH ? ORDER BY s, rowid LIMIT ?") for sql in statements)
        return None if full else got

    for _ in range(100):  # a query whose ranking does skip
        lexq = lexical_query(store, " ".join(rng.choice(vocab[:120], size=3)))
        if lexq is not None and lexq.ranked and skipped(lexq) is not None:
            break
    else:
        pytest.fail("no query skipped")
    record_episodes(store, project.id, "late", 1, [{"role": "user", "content": vocab[0]}])
    assert skipped(lexq) is None  # scored in full
    got = _best(store, lexq, 10)
    want = store.query(
        "SELECT rowid, bm25(episode_fts) AS s FROM episode_fts WHERE episode_fts MATCH ? "
        "ORDER BY s, rowid LIMIT 10",
        [lexq.match],
    )
    assert got == [(int(r[0]), float(r[1])) for r in want]
