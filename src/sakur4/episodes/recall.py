"""Recall: BM25 over episode text, plus vector similarity when an embedder is given,
fused into one ranked list by reciprocal rank (SPEC §6).

Always scoped to one project. Folded episodes (masked, referenced, archived) are
found with their full content; dropped ones have none and are never returned.
Each hit shows what each source said (its rank and raw score), so a user can
see why it ranked where it did.
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from sakur4.embedders import Embedder
from sakur4.episodes import lexical_postgresql as pg
from sakur4.episodes.model import Episode
from sakur4.episodes.stream import fetch_episodes
from sakur4.episodes.vectors import OWNER
from sakur4.errors import InputError
from sakur4.store.db import Store
from sakur4.store.vectors import knn
from sakur4.vocabulary import KINDS, Kind

# Reciprocal-rank fusion constant (Cormack et al. 2009): damps the top ranks so
# neither source dominates on rank 1 alone.
RRF_K = 60
MAX_TERMS = 32
MAX_K = 200
SQL_PARAMS = 500  # bound parameters per statement, well under SQLite's limit


@dataclass(frozen=True)
class RecallHit:
    episode: Episode
    score: float  # fused: sum over sources of 1 / (RRF_K + rank)
    lexical_rank: int | None  # 1-based rank in the BM25 list, None if not found there
    bm25: float | None  # FTS5 bm25() (PostgreSQL: lexical_postgresql's): lower is better
    vector_rank: int | None
    distance: float | None  # cosine distance to the query vector


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _terms(text: str) -> list[str]:
    """The user's words, lower-cased, first occurrence first, at most ``MAX_TERMS``.

    Each is later quoted (:func:`_quoted`), which makes every FTS5 operator
    (``AND``, ``NEAR``, ``*``, ``:``, ``"``, parentheses, ``-``) plain text, so no
    query can be a syntax error.
    """
    return list(dict.fromkeys(t.lower() for t in re.findall(r"\w+", text)))[:MAX_TERMS]


@dataclass(frozen=True)
class IndexState:
    """The index as one statement saw it: the counter ``episode_fts_epoch`` (None on a
    store without it), the highest row id and the number of rows (bm25()'s N)."""

    epoch: int | None
    last: int
    rows: int


@dataclass(frozen=True)
class LexicalQuery:
    """What the BM25 leg runs: an FTS5 MATCH expression, and whether BM25 can rank it."""

    match: str  # on PostgreSQL, what the words would be on SQLite: it runs ``words``
    ranked: bool  # False: every word is in half the episodes or more, so newest first
    # At most this many rows match (the sum of the kept words' document counts):
    # how deep ranking inside FTS5 may have to go before the project filter.
    matches: int = field(default=0, compare=False)
    # Each phrase of ``match`` (quoted) with its document count, in ``match``'s order,
    # and the index they were counted in: what bm25() computes each phrase's IDF from.
    docs: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    state: IndexState = field(default=IndexState(None, 0, 0), compare=False)
    # The user's words ``match`` quotes, unquoted, in its order.
    words: tuple[str, ...] = field(default=(), compare=False)


def _index_state(store: Store, counts: _Counts) -> IndexState:
    if store.engine == "postgresql":
        return _index_state_postgresql(store, counts)
    if not counts.logged:
        if not store.query("SELECT 1 FROM sqlite_master WHERE name = 'episode_fts_epoch'"):
            row = store.query("SELECT coalesce(max(id), 0), count(*) FROM episode_fts_docsize")[0]
            return IndexState(None, int(row[0]), int(row[1]))
        counts.logged = True  # a migration is never undone
    # (FTS5 keeps one docsize row per row it indexes: their count is bm25()'s N.)
    row = store.query(
        "SELECT (SELECT n FROM episode_fts_epoch WHERE id = 1), "
        "(SELECT coalesce(max(id), 0) FROM episode_fts_docsize), "
        "(SELECT count(*) FROM episode_fts_docsize)"
    )[0]
    return IndexState(int(row[0]), int(row[1]), int(row[2]))


def _index_state_postgresql(store: Store, counts: _Counts) -> IndexState:
    """PostgreSQL's count of rows is a walk of the table (~0.2 s at 100k): it is held
    with the counter and the highest id, and while the counter stands only the rows
    appended since are counted (the rule the word counts follow)."""
    with counts.lock:
        held = counts.rows_at
        epoch, last, more = pg.index_state(store, held[1] if held else 0)
        if held is not None and held[0] == epoch:
            more += held[2]
        elif held is not None:  # something changed below the highest id: count again
            epoch, last, more = pg.index_state(store, 0)
        counts.rows_at = (epoch, last, more)
        return IndexState(epoch, last, more)


@dataclass
class _Count:
    count: int  # rows with id <= upto holding the word; "at least" when not exact
    upto: int
    exact: bool


@dataclass
class _Counts:
    """One store's word counts, good while ``episode_fts_epoch`` is what it was: then
    the rows a count covered are unchanged and every later row has a higher id, so
    only the rows past its ``upto`` need counting (migration m006)."""

    logged: bool = False  # the store has the counter
    rows_at: tuple[int, int, int] | None = None  # PostgreSQL: (epoch, last id, rows)
    epoch: int | None = None
    words: dict[str, _Count] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


HELD_WORDS = 20_000  # past this many words held, a store's counts start afresh

# id(store) -> that store's counts; an entry goes when its Store is collected.
_held: dict[int, _Counts] = {}
_held_lock = threading.Lock()


def _counts_of(store: Store) -> _Counts:
    with _held_lock:
        counts = _held.get(id(store))
        if counts is None:
            counts = _held[id(store)] = _Counts()
            weakref.finalize(store, _held.pop, id(store), None)
        return counts


def _doc_counts(store: Store, asks: list[tuple[str, int]], last: int, cap: int) -> list[int]:
    """For each (word, after): how many rows with ``after < id <= last`` hold the word,
    counted only up to ``cap`` (a count of ``cap`` means "that many or more"): a word
    in nearly every row would otherwise cost a walk of nearly the whole index."""
    if store.engine == "postgresql":
        return pg.doc_counts(store, asks, last, cap)
    sql = " UNION ALL ".join(
        "SELECT count(*) FROM (SELECT 1 FROM episode_fts WHERE episode_fts MATCH ? "
        "AND rowid > ? AND rowid <= ? LIMIT ?)"
        for _ in asks
    )
    params = [x for t, after in asks for x in (_quoted(t), after, last, cap)]
    return [int(r[0]) for r in store.query(sql, params)]


def _word_counts(store: Store, state: IndexState, terms: list[str], half: int) -> dict[str, int]:
    """How many rows of the index hold each word, up to ``half`` ("that many or more").

    Kept per store between calls (:class:`_Counts`): a word counted before is counted
    again only over the rows added since, so the commonest words (a walk of half the
    index each) cost nearly nothing the second time."""
    if state.epoch is None:  # a store without the counter: count every time
        counted = _doc_counts(store, [(t, 0) for t in terms], state.last, half)
        return dict(zip(terms, counted, strict=True))
    held = _counts_of(store)
    with held.lock:
        if held.epoch != state.epoch or len(held.words) > HELD_WORDS:
            held.epoch = state.epoch
            held.words.clear()
        out: dict[str, int] = {}
        todo: list[tuple[str, _Count | None]] = []
        for t in terms:
            c = held.words.get(t)
            if c is not None and c.upto > state.last:  # counted in a later index
                c = None
            if c is not None and c.upto == state.last:
                if c.exact or c.count >= half:
                    out[t] = min(c.count, half)
                    continue
                c = None
            todo.append((t, c))
        asks = [(t, c.upto if c else 0) for t, c in todo]
        new = _doc_counts(store, asks, state.last, half) if asks else []
        recount: list[str] = []
        for (t, c), n in zip(todo, new, strict=True):
            count = (c.count if c else 0) + n
            exact = (c.exact if c else True) and n < half
            if exact or count >= half:
                held.words[t] = _Count(count, state.last, exact)
                out[t] = min(count, half)
            else:  # an old "at least" that may now be under half: count it whole
                recount.append(t)
        if recount:
            for t, n in zip(
                recount,
                _doc_counts(store, [(t, 0) for t in recount], state.last, half),
                strict=True,
            ):
                held.words[t] = _Count(n, state.last, n < half)
                out[t] = n
        return out


def lexical_query(store: Store, text: str) -> LexicalQuery | None:
    """The user's words as an FTS5 query (each quoted, joined by OR), without the words
    found in half the episodes or more.

    FTS5's bm25() floors the IDF of such a word at 1e-6, so it adds nothing to any
    score, yet every episode containing it must be scored: "the" in a 100k-episode
    store made a query cost 400 ms. Dropping those words keeps the ranking of
    every episode that matches a remaining word. When every word is that common,
    BM25 has nothing to rank by: the rarest word is matched and the newest episodes
    come first, which FTS5 can serve without scoring every match.
    """
    terms = _terms(text)
    if not terms:
        return None
    # N as bm25() sees it: every row of the index, all projects (as its IDF counts).
    state = _index_state(store, _counts_of(store))
    total = state.rows
    half = (total + 1) // 2  # the least count with count >= total / 2
    docs = _word_counts(store, state, terms, half)
    kept = [t for t in terms if 0 < docs[t] < half]
    if kept:
        match = " OR ".join(_quoted(t) for t in kept)
        counts = tuple((_quoted(t), docs[t]) for t in kept)
        return LexicalQuery(
            match,
            ranked=True,
            matches=sum(docs[t] for t in kept),
            docs=counts,
            state=state,
            words=tuple(kept),
        )
    found = [t for t in terms if docs[t]]
    if not found:
        return None
    # Every word that common: the rarest is matched (the first of equals). Each word is
    # counted only as far as the rarest so far, past which it cannot be rarer. On
    # PostgreSQL a count reads the rows (~1 s for a word in 100k): the words are
    # counted whole once and held, as the words under half are.
    if store.engine == "postgresql":
        whole = _word_counts(store, state, found, total + 1)
        rarest = min(found, key=lambda t: whole[t])  # the first of equals
        return LexicalQuery(
            _quoted(rarest), ranked=False, matches=whole[rarest], state=state, words=(rarest,)
        )
    rarest, fewest = found[0], total + 1
    for t in found:
        count = _doc_counts(store, [(t, 0)], state.last, fewest)[0]
        if count < fewest:
            rarest, fewest = t, count
    return LexicalQuery(_quoted(rarest), ranked=False, matches=fewest, state=state, words=(rarest,))


def _timestamp(when: datetime) -> str:
    if when.tzinfo is None:
        raise InputError("recall time filters need a timezone-aware datetime")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _filters(
    kind: Kind | None, session: str | None, since: datetime | None, until: datetime | None
) -> tuple[str, list[object]]:
    sql = " AND e.tier != 'dropped'"
    params: list[object] = []
    if kind is not None:
        if kind not in KINDS:
            raise InputError(f"unknown kind {kind!r}; kinds are {', '.join(KINDS)}")
        sql += " AND e.kind = ?"
        params.append(kind)
    if session is not None:
        sql += " AND e.session = ?"
        params.append(session)
    if since is not None:
        sql += " AND e.created_at >= ?"
        params.append(_timestamp(since))
    if until is not None:
        sql += " AND e.created_at < ?"
        params.append(_timestamp(until))
    return sql, params


# FTS5's bm25() (fts5_aux.c): each phrase of the query adds to a row's score
# idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * D / avgdl)), with k1 = 1.2 and
# b = 0.75, tf its count in the row and D the row's length. Whatever tf and D are,
# that stays below idf * (k1 + 1): a bound on what a phrase can add.
BM25_K1 = 1.2
# Relative slack when a sum FTS5 computed meets a bound computed here: far above
# double rounding (~1e-16 a step), far below any gap worth a comparison.
SLACK = 1e-9


def _bound(rows: int, docs: int) -> float:
    """The most a phrase found in ``docs`` of the index's ``rows`` rows can add to a
    row's bm25() score: its IDF (floored as bm25() floors it) times k1 + 1."""
    idf = math.log((rows - docs + 0.5) / (docs + 0.5))
    return (idf if idf > 0 else 1e-6) * (BM25_K1 + 1)


_SCORED = "SELECT rowid, bm25(episode_fts) AS s FROM episode_fts WHERE episode_fts MATCH ? "


def _best(store: Store, lexq: LexicalQuery, limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best rows of the whole index by (bm25, rowid), best first: what
    ``ORDER BY bm25(…), rowid LIMIT`` over every match gives, without scoring
    every match when the query's commonest words cannot reach the top.

    bm25() scores each row it is asked for (~0.8 µs a row at 100k, most of the BM25
    leg), and most of a query's matches are rows holding only its commonest word.
    So (MaxScore, Turtle & Flood 1995): the rarest phrases' own scores give a floor
    for the ``limit``-th best score; the commonest phrases whose bounds
    (:func:`_bound`) together stay under it are *skippable*: a row holding only
    those scores below the floor. Only rows holding another phrase are scored —
    by bm25() over the whole query, so each score is the one a full ranking
    gives. The answer is kept only if ``limit`` rows came back and the last of
    them still beats the skippable phrases' bound: then every row left out ranks
    below all of them, so the list is exactly the full ranking's first ``limit``.
    Otherwise every match is scored, as before."""
    rarest = sorted(lexq.docs, key=lambda pd: pd[1])
    seed = 0  # the fewest rarest phrases whose rows can fill the limit
    while seed < len(rarest) and sum(d for _, d in rarest[:seed]) < limit:
        seed += 1
    # The bounds hold for the index the words were counted in; without the counter
    # (a store not migrated) nothing could tell whether it has changed since.
    rest = rarest[seed:] if lexq.state.epoch is not None else []
    floor_row = (
        store.query(
            "SELECT bm25(episode_fts) AS s FROM episode_fts WHERE episode_fts MATCH ? "
            "ORDER BY s LIMIT 1 OFFSET ?",
            [" OR ".join(p for p, _ in rarest[:seed]), limit - 1],
        )
        if rest
        else []
    )
    skip: set[str] = set()
    skip_bound = 0.0
    if floor_row:  # the seed's rows alone fill the limit
        floor = -float(floor_row[0][0]) * (1 - SLACK)
        for phrase, docs in reversed(rest):  # commonest first
            bound = _bound(lexq.state.rows, docs)
            if (skip_bound + bound) * (1 + SLACK) >= floor:
                break
            skip.add(phrase)
            skip_bound += bound
    if skip:
        scored = " OR ".join(p for p, _ in lexq.docs if p not in skip)
        rows = store.query(
            # "+rowid": test each match against the list; without it the planner looks
            # each listed row up in the index one at a time, re-reading every phrase.
            _SCORED + "AND +rowid IN (SELECT rowid FROM episode_fts WHERE episode_fts "
            "MATCH ?) ORDER BY s, rowid LIMIT ?",
            [lexq.match, scored, limit],
        )
        now = _index_state(store, _counts_of(store))
        same = (now.epoch, now.rows) == (lexq.state.epoch, lexq.state.rows)
        if same and len(rows) == limit and -float(rows[-1][1]) > skip_bound * (1 + SLACK):
            return [(int(r[0]), float(r[1])) for r in rows]
    rows = store.query(_SCORED + "ORDER BY s, rowid LIMIT ?", [lexq.match, limit])
    return [(int(r[0]), float(r[1])) for r in rows]


def _passing(
    store: Store, project_id: int, ids: list[int], where: str, params: list[object], depth: int
) -> set[int]:
    """The first ``depth`` of ``ids`` (in their order) that are episodes of the project
    passing the filters. Looked up ``depth`` at first, then twice as many at a time:
    usually the first ``depth`` all pass, and each look-up reads a row of the table."""
    keep: set[int] = set()
    start, size = 0, depth
    while start < len(ids) and len(keep) < depth:
        chunk = ids[start : start + min(size, SQL_PARAMS)]
        start += len(chunk)
        size *= 2
        marks = ",".join("?" * len(chunk))
        keep.update(
            int(r[0])
            for r in store.query(
                # "+": find each row by its id; the project index would walk them all.
                f"SELECT e.id FROM episodic_stream e WHERE e.id IN ({marks}) "
                f"AND +e.project_id = ?{where}",
                [*chunk, project_id, *params],
            )
        )
    return keep


def _lexical(
    store: Store, project_id: int, lexq: LexicalQuery, where: str, params: list[object], depth: int
) -> list[tuple[int, float]]:
    """The ``depth`` best BM25 matches of the project, best first (newest first when
    BM25 cannot rank: ``lexq.ranked`` false).

    Ranked inside FTS5 first (:func:`_best`), filtered after: the filter then reads a
    few rows by id instead of one per match. When the project and filters leave
    fewer than ``depth`` the ranking goes deeper, until every match has been seen:
    the answer is the same as filtering first."""
    if not lexq.ranked:
        # Newest first: FTS5 walks its index backwards, each row is looked up by id
        # as it comes, and the walk stops at the ``depth``-th row that passes.
        rows = store.query(
            "SELECT f.rowid, bm25(episode_fts) FROM episode_fts f "
            "JOIN episodic_stream e ON e.id = f.rowid WHERE episode_fts MATCH ? "
            f"AND +e.project_id = ?{where} ORDER BY f.rowid DESC LIMIT ?",
            [lexq.match, project_id, *params, depth],
        )
        return [(int(r[0]), float(r[1])) for r in rows]
    limit = 2 * depth
    while True:
        ranked = _best(store, lexq, limit)
        keep = _passing(store, project_id, [eid for eid, _ in ranked], where, params, depth)
        found = [(eid, s) for eid, s in ranked if eid in keep][:depth]
        if len(found) >= depth or limit >= lexq.matches:
            return found
        limit *= 4


def _lexical_postgresql(
    store: Store, project_id: int, lexq: LexicalQuery, where: str, params: list[object], depth: int
) -> list[tuple[int, float]]:
    """The word leg on PostgreSQL: the same words as SQLite's (``lexq``), ranked by
    BM25's IDF times ``ts_rank`` (lexical_postgresql), the project and filters applied
    in the same statement."""
    scope = ("e.project_id = ?" + where, [project_id, *params])
    if not lexq.ranked:
        return pg.newest(store, lexq.words[0], scope, depth)
    docs = [(w, n) for w, (_, n) in zip(lexq.words, lexq.docs, strict=True)]
    return pg.best(store, docs, lexq.state.rows, scope, depth)


def _vector(
    store: Store,
    project_id: int,
    model: str,
    qvec: np.ndarray,
    where: str,
    params: list[object],
    depth: int,
) -> list[tuple[int, float]]:
    """The ``depth`` nearest episodes of the project that pass the filters, nearest first.

    The filters apply after the search, so the search goes deeper while they leave
    fewer than ``depth`` and more vectors remain: the answer is the exact one."""
    k = 4 * depth
    while True:
        near = knn(store, project_id=project_id, owner=OWNER, model=model, query=qvec, k=k)
        if not near:
            return []
        ids = [n.owner_id for n in near]
        keep = _passing(store, project_id, ids, where, params, depth)
        vector = [(n.owner_id, n.distance) for n in near if n.owner_id in keep][:depth]
        if len(vector) >= depth or len(near) < k:
            return vector
        k *= 4


def recall(
    store: Store,
    project_id: int,
    query: str,
    k: int = 10,
    *,
    kind: Kind | None = None,
    session: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    embedder: Embedder | None = None,
) -> list[RecallHit]:
    """The ``k`` episodes of ``project_id`` best matching ``query``, best first."""
    if not 1 <= k <= MAX_K:
        raise InputError(f"k must be between 1 and {MAX_K}")
    where, params = _filters(kind, session, since, until)
    depth = max(4 * k, 50)  # candidates per source, so fusion has something to fuse

    # The two legs run one after the other, on the caller's thread. Side by side (the
    # vector leg on a thread of its own) they were slower on 2 cores: at 100k, 20.1
    # against 13.9 ms a hybrid query; at 10k 9.9 against 3.1 ms. Each hand-over of
    # the GIL between the legs' Python steps can wait out the 5 ms switch interval,
    # and a new thread can wait a scheduler tick (4 ms) to start on a busy machine
    # (docs/design/memory.md).
    vector: list[tuple[int, float]] = []
    if embedder is not None and query.strip():
        qvec = embedder.embed([query])[0]
        vector = _vector(store, project_id, embedder.name, qvec, where, params, depth)
    lexq = lexical_query(store, query)
    lexical: list[tuple[int, float]] = []
    if lexq is not None and store.engine == "postgresql":
        lexical = _lexical_postgresql(store, project_id, lexq, where, params, depth)
    elif lexq is not None:
        lexical = _lexical(store, project_id, lexq, where, params, depth)

    fused: dict[int, float] = {}
    lex_at = {eid: (rank, s) for rank, (eid, s) in enumerate(lexical, 1)}
    vec_at = {eid: (rank, d) for rank, (eid, d) in enumerate(vector, 1)}
    for eid, (rank, _) in lex_at.items():
        fused[eid] = fused.get(eid, 0.0) + 1.0 / (RRF_K + rank)
    for eid, (rank, _) in vec_at.items():
        fused[eid] = fused.get(eid, 0.0) + 1.0 / (RRF_K + rank)
    best = sorted(fused, key=lambda eid: (-fused[eid], eid))[:k]
    episodes = fetch_episodes(store, project_id, best)
    hits = []
    for eid in best:
        if eid not in episodes:
            continue
        lex, vec = lex_at.get(eid), vec_at.get(eid)
        hits.append(
            RecallHit(
                episode=episodes[eid],
                score=fused[eid],
                lexical_rank=lex[0] if lex else None,
                bm25=lex[1] if lex else None,
                vector_rank=vec[0] if vec else None,
                distance=vec[1] if vec else None,
            )
        )
    return hits
