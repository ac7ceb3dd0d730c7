"""Recall: BM25 over episode text, plus vector similarity when an embedder is given,
fused into one ranked list by reciprocal rank (SPEC §6).

Always scoped to one project. Folded episodes (masked, referenced, archived) are
found with their full content; dropped ones have none and are never returned.
Each hit shows what each source said (its rank and raw score), so a user can
see why it ranked where it did.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from sakur4.embedders import Embedder
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
    bm25: float | None  # FTS5 bm25(): lower (more negative) is a better match
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
class LexicalQuery:
    """What the BM25 leg runs: an FTS5 MATCH expression, and whether BM25 can rank it."""

    match: str
    ranked: bool  # False: every word is in half the episodes or more, so newest first
    # At most this many rows match (the sum of the kept words' document counts):
    # how deep ranking inside FTS5 may have to go before the project filter.
    matches: int = field(default=0, compare=False)


def _doc_counts(store: Store, terms: list[str], half: int) -> dict[str, int]:
    """How many rows of the index hold each word, counted only up to ``half``: past
    that the word is dropped whatever its count, and a word in nearly every row
    would otherwise cost a walk of nearly the whole index."""
    sql = " UNION ALL ".join(
        "SELECT count(*) FROM (SELECT 1 FROM episode_fts WHERE episode_fts MATCH ? LIMIT ?)"
        for _ in terms
    )
    params = [x for t in terms for x in (_quoted(t), half)]
    return {t: int(r[0]) for t, r in zip(terms, store.query(sql, params), strict=True)}


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
    total = int(store.query("SELECT count(*) FROM episodic_stream")[0][0])
    half = (total + 1) // 2  # the least count with count >= total / 2
    docs = _doc_counts(store, terms, half)
    kept = [t for t in terms if 0 < docs[t] < half]
    if kept:
        match = " OR ".join(_quoted(t) for t in kept)
        return LexicalQuery(match, ranked=True, matches=sum(docs[t] for t in kept))
    found = [t for t in terms if docs[t]]
    if not found:
        return None
    docs = _doc_counts(store, found, total)  # rare: every word that common; count fully
    rarest = min(found, key=docs.__getitem__)
    return LexicalQuery(_quoted(rarest), ranked=False, matches=docs[rarest])


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


def _lexical(
    store: Store, project_id: int, lexq: LexicalQuery, where: str, params: list[object], depth: int
) -> list[tuple[int, float]]:
    """The ``depth`` best BM25 matches of the project, best first.

    Ranked inside FTS5 first, joined after: the join then reads a few rows by id
    instead of one per match. The project and filters apply after the ranking, so
    when they leave fewer than ``depth`` the ranking goes deeper, until every match
    has been seen: the answer is the same as filtering first."""
    if lexq.ranked:
        inner = "ORDER BY s, id"
        outer = "ORDER BY r.s, r.id"
    else:  # newest first: FTS5 walks its index backwards and stops at the limit
        inner = "ORDER BY id DESC"
        outer = "ORDER BY r.id DESC"
    limit = 2 * depth
    while True:
        rows = store.query(
            "SELECT r.id, r.s FROM (SELECT rowid AS id, bm25(episode_fts) AS s "
            f"FROM episode_fts WHERE episode_fts MATCH ? {inner} LIMIT ?) r "
            # "+": find each row by its id; the project index would walk them all.
            f"JOIN episodic_stream e ON e.id = r.id WHERE +e.project_id = ?{where} "
            f"{outer} LIMIT ?",
            [lexq.match, limit, project_id, *params, depth],
        )
        if len(rows) >= depth or limit >= lexq.matches:
            return [(int(r[0]), float(r[1])) for r in rows]
        limit *= 4


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
        keep: set[int] = set()
        for start in range(0, len(ids), SQL_PARAMS):
            chunk = ids[start : start + SQL_PARAMS]
            marks = ",".join("?" * len(chunk))
            keep.update(
                int(r[0])
                for r in store.query(
                    f"SELECT e.id FROM episodic_stream e WHERE e.id IN ({marks}) "
                    f"AND +e.project_id = ?{where}",
                    [*chunk, project_id, *params],
                )
            )
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

    if embedder is None or not query.strip():
        lexq = lexical_query(store, query)
        lexical = _lexical(store, project_id, lexq, where, params, depth) if lexq else []
        vector: list[tuple[int, float]] = []
    else:
        # The vector leg (embedding the query, the matrix product) runs beside the
        # BM25 leg: both spend their time outside the GIL (numpy, SQLite), and the
        # store's lock keeps their few statements apart. A thread per call, gone
        # when recall returns: a process left with threads indexes without its pool.
        emb = embedder
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sakur4-recall") as pool:
            vector_leg = pool.submit(
                lambda: _vector(
                    store, project_id, emb.name, emb.embed([query])[0], where, params, depth
                )
            )
            lexq = lexical_query(store, query)
            lexical = _lexical(store, project_id, lexq, where, params, depth) if lexq else []
            vector = vector_leg.result()

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
