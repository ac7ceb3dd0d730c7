"""Recall's word leg on PostgreSQL: the statements behind ``episodes.recall``'s plan.

The plan is SQLite's (``recall.lexical_query``): the user's words, less those found in
half the episodes or more; when every word is that common, the rarest one, newest
first. The index differs, and so does the score:

- The words are read from the stored column the GIN index covers
  (``dialect.EPISODE_WORDS``, migration m011), never parsed again from the text.
- A row's score is BM25's shape with PostgreSQL's own term weight: the sum over the
  query's words of the word's IDF (BM25's, from the held word counts) times
  ``ts_rank`` of the row for that word alone (which grows with the word's count in the
  row and stays under :data:`RANK_BOUND_ONE`). Without the IDF (``ts_rank`` of all the
  words at once, as before) a word in 40 % of the episodes weighs as much as one in
  ten, and every row holding any word has to be read and ranked to find the best:
  44k rows at 100k episodes for a query of one such word.
- With the IDF, the top rows are found as SQLite finds them (MaxScore, Turtle & Flood
  1995): the rarest words' rows give a floor for the ``limit``-th best score; the
  commonest words whose bounds together stay under it are skipped, and only rows
  holding another word are read. A row holding only skipped words scores under their
  bound whatever the index holds now (the IDFs are the statement's parameters), so
  the answer is kept when its last row beats that bound: it is then exactly the first
  ``limit`` rows of the full ranking.

Every statement filters by project (and the caller's filters) itself: the heap is read
for the words anyway, so the rows of other projects are never ranked.
"""

from __future__ import annotations

import math

from sakur4.store.db import Store
from sakur4.store.dialect import EPISODE_WORDS, WORD_QUERY

# ts_rank(v, q) of a one-lexeme q at weight D (0.1): 0.1 * sum_{j<=tf} 1/j^2 / (pi^2/6)
# (tsrank.c, calc_rank_or): at least 0.0608 in a row holding it, under 0.1 whatever
# its count. A word the parser splits into several lexemes ("parse_file") is their AND
# (calc_rank_and), whose rank stays at most 1.
RANK_BOUND_ONE = 0.1
RANK_BOUND_SEVERAL = 1.0
# Relative slack when a sum PostgreSQL computed meets a bound computed here (as
# recall.SLACK: far above rounding, ts_rank's float4 included, far below any gap).
SLACK = 1e-6


def idf(rows: int, docs: int) -> float:
    """BM25's IDF of a word in ``docs`` of ``rows`` episodes, floored as FTS5 floors it."""
    value = math.log((rows - docs + 0.5) / (docs + 0.5))
    return value if value > 0 else 1e-6


def index_state(store: Store, after: int) -> tuple[int, int, int]:
    """(the counter ``episode_fts_epoch``, the highest episode id, how many episodes
    have an id above ``after``), read in one statement, so from one snapshot."""
    row = store.query(
        "SELECT (SELECT n FROM episode_fts_epoch WHERE id = 1), coalesce(max(id), ?), "
        "count(*) FROM episodic_stream WHERE id > ?",
        [after, after],
    )[0]
    return int(row[0]), int(row[1]), int(row[2])


def doc_counts(store: Store, asks: list[tuple[str, int]], last: int, cap: int) -> list[int]:
    """For each (word, after): how many episodes with ``after < id <= last`` hold the
    word, counted up to ``cap`` ("that many or more"). One row of columns: the order
    of a UNION's rows is not promised on PostgreSQL."""
    cols = ", ".join(
        f"(SELECT count(*) FROM (SELECT 1 FROM episodic_stream e WHERE {EPISODE_WORDS} @@ "
        f"{WORD_QUERY} AND e.id > ? AND e.id <= ? LIMIT ?) AS c)"
        for _ in asks
    )
    params = [x for w, after in asks for x in (w, after, last, cap)]
    return [int(n) for n in store.query(f"SELECT {cols}", params)[0]]


def _bounds(store: Store, words: list[str]) -> list[float]:
    """The most each word's ``ts_rank`` can be: one lexeme, or several (an AND)."""
    cols = ", ".join(f"numnode({WORD_QUERY})" for _ in words)
    nodes = store.query(f"SELECT {cols}", words)[0]
    return [RANK_BOUND_ONE if int(n) <= 1 else RANK_BOUND_SEVERAL for n in nodes]


def _ranked(
    store: Store,
    words: list[str],
    weights: list[float],
    among: list[int],
    scope: tuple[str, list[object]],
    limit: int,
    offset: int = 0,
) -> list[tuple[int, float]]:
    """Rows of the scope holding any of ``words[i] for i in among``, by score (lower is
    better, as bm25()'s) and id: ``limit`` of them from ``offset``. The words are
    parsed once (the ``w`` subquery; OFFSET 0 keeps it one row, not an expression
    evaluated at each use)."""
    score = " + ".join(f"?::float8 * ts_rank({EPISODE_WORDS}, w.q{i})" for i in range(len(words)))
    parsed = ", ".join(f"{WORD_QUERY} AS q{i}" for i in range(len(words)))
    match = " || ".join(f"w.q{i}" for i in among)
    where, params = scope
    rows = store.query(
        f"SELECT e.id, -({score}) AS s FROM (SELECT {parsed} OFFSET 0) AS w, episodic_stream e "
        f"WHERE {where} AND {EPISODE_WORDS} @@ ({match}) ORDER BY s, e.id LIMIT ? OFFSET ?",
        [*weights, *words, *params, limit, offset],
    )
    return [(int(r[0]), float(r[1])) for r in rows]


def best(
    store: Store,
    docs: list[tuple[str, int]],
    rows: int,
    scope: tuple[str, list[object]],
    limit: int,
) -> list[tuple[int, float]]:
    """The ``limit`` best rows of the scope (``scope``: an SQL condition on ``e``, its
    parameters) holding any of the words (each with its episode
    count, of ``rows`` episodes), best first: ``ORDER BY score, id LIMIT`` over every
    match, without scoring every match when the commonest words cannot reach the top."""
    words = [w for w, _ in docs]
    weights = [idf(rows, d) for _, d in docs]
    everything = list(range(len(words)))
    order = sorted(everything, key=lambda i: docs[i][1])  # rarest first
    seed = 0  # the fewest rarest words whose rows could fill the limit
    while seed < len(order) and sum(docs[i][1] for i in order[:seed]) < limit:
        seed += 1
    rest = order[seed:]
    if rest:
        # The limit-th best full score among the seed's rows: at least ``limit`` rows
        # score that well, so a row below it cannot be in the answer.
        floor_rows = _ranked(store, words, weights, order[:seed], scope, 1, limit - 1)
        if floor_rows:
            floor = -floor_rows[0][1] * (1 - SLACK)
            bounds = _bounds(store, words)
            skip: set[int] = set()
            skip_bound = 0.0
            for i in reversed(rest):  # commonest first
                bound = weights[i] * bounds[i]
                if (skip_bound + bound) * (1 + SLACK) >= floor:
                    break
                skip.add(i)
                skip_bound += bound
            if skip:
                kept = [i for i in everything if i not in skip]
                got = _ranked(store, words, weights, kept, scope, limit)
                if len(got) == limit and -got[-1][1] > skip_bound * (1 + SLACK):
                    return got
    return _ranked(store, words, weights, everything, scope, limit)


def newest(
    store: Store, word: str, scope: tuple[str, list[object]], limit: int
) -> list[tuple[int, float]]:
    """The ``limit`` newest rows of the scope holding ``word`` (a word too common for
    its IDF to rank by), each with its ``ts_rank`` negated as the score.

    The table is walked backwards from the newest row (SQLite's walk), each row tested
    as it comes, until ``limit`` pass. ``IS TRUE`` keeps the GIN index out of it: a plan
    made without seeing the word (a prepared statement's) takes it for a rare one and
    ranks all its ~100k rows through the index (1.7 s). The scope comes first: another
    project's rows are passed over on their project, without reading their words."""
    where, params = scope
    rows = store.query(
        f"SELECT e.id, -ts_rank({EPISODE_WORDS}, w.q) FROM (SELECT {WORD_QUERY} AS q OFFSET 0) "
        f"AS w, episodic_stream e WHERE {where} AND ({EPISODE_WORDS} @@ w.q) IS TRUE "
        "ORDER BY e.id DESC LIMIT ?",
        [word, *params, limit],
    )
    return [(int(r[0]), float(r[1])) for r in rows]
