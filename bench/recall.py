"""Recall latency (p50/p95) at 10k and 100k episodes, lexical and hybrid, with and
without sqlite-vec, beside an in-memory numpy exact scan of the same vectors.

    flock /work/bench.lock nice -n 5 .venv/bin/python bench/recall.py \\
        [--sizes 10000 100000] [--queries 60] [--cache /tmp/sakur4-bench-recall]

Episode text is synthetic: words drawn from a Zipf distribution over a 20,000-word
vocabulary (a few very common words, a long tail), 20-250 words an episode, so
BM25 sees both common and rare terms. Vectors are random unit vectors of 384
dimensions (all-MiniLM-L6-v2's size): embedding 100k texts with the local model
would take most of an hour on 2 cores, and KNN cost depends only on the count and
dimension. The cost of embedding the query itself with the local model is
measured separately and printed; recall is timed without it, as is the floor.

The stores are built once (record_episodes, put_vector) and kept in ``--cache``, so
a run costs only its queries. A second project holds 10% extra episodes so every
query pays for project scoping.

The floor, measured in the same run: an exact numpy scan (cosine distance, top k)
over the project's vectors already in memory as one float32 matrix. The vector leg's
neighbours are checked against it query by query: they must be identical. So is the
lexical leg's top k (ids, order, bm25 scores) against the exact BM25 answer: the
project's rows filtered first, every match scored by bm25() and sorted.

Recall keeps each store's word counts between queries (episodes/recall.py): legs
run warm (every query asked once before, nothing written since) and cold (the
counts forgotten before each query, as a store's first query finds them).

Goals (issue 17), at the largest size: hybrid p50 <= 3x the floor, lexical p50 <=
10 ms, both again with sqlite-vec absent, and results identical to the exact answer.

``--engines`` (issue 39) runs only this: the same episodes (same seed, checked by a
digest of every episode) recorded into SQLite and into PostgreSQL (a throwaway server,
tests/fixtures_postgresql.py's, stopped at the end), then lexical recall on both, query
by query in turn, p50/p95 side by side and PostgreSQL / SQLite. Goal: p50 <= 3x at
100k. Nothing is cached: both stores are built in the run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

import sakur4.episodes.recall as recall_module
from sakur4.embedders.minilm import MiniLM
from sakur4.episodes import record_episodes
from sakur4.episodes.model import Kind
from sakur4.episodes.recall import lexical_query, recall
from sakur4.store import Store, open_store
from sakur4.store.db import connect
from sakur4.store.projects import add_project
from sakur4.store.vectors import knn, put_vector

DIM = 384
VOCAB = 20_000
TURN = 20  # messages recorded per call, as a gateway records a turn
K = 10
# Bump when fill() changes, so a cached store of the old shape is not reused.
SHAPE = 1


class RandomVectors:
    """An embedder stand-in: a fixed random unit vector per query text."""

    name = "bench-random-384"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(DIM)
            out[i] = v / np.linalg.norm(v)
        return out


COMMON = ["store", "parse", "token", "file", "error", "symbol", "cache", "prompt", "tool", "test"]
# Word of Zipf rank r (1-based at index r): the top 200 look like coding words.
LEXICON = np.array(
    [""] + [COMMON[r % len(COMMON)] + str(r) if r <= 200 else f"w{r}" for r in range(1, VOCAB + 1)]
)


def words(rng: np.random.Generator, n: int) -> list[str]:
    # Zipf's tail runs past the vocabulary: fold it back rather than clip it, or one
    # word would collect the whole tail and appear in every episode.
    return list(LEXICON[(rng.zipf(1.15, n) - 1) % VOCAB + 1])


def fill(
    store: Store, project_id: int, n: int, rng: np.random.Generator, *, vectors: bool = True
) -> tuple[float, float]:
    """Record ``n`` episodes in turns of TURN messages; return (episodes/s, vectors/s).

    ``vectors=False`` stores no vectors but still draws them, so the same seed gives the
    same episodes whichever is asked (``--engines`` fills both engines that way)."""
    texts = [" ".join(words(rng, int(rng.integers(20, 250)))) for _ in range(n)]
    started = time.perf_counter()  # generating the text is not the store's time
    ids: list[int] = []
    for start in range(0, n, TURN):
        session = f"s{start // 2000}"
        msgs = [
            {"role": "tool" if i % 3 == 0 else "user", "tool_call_id": f"c{start + i}",
             "content": texts[start + i]}
            for i in range(min(TURN, n - start))
        ]  # fmt: skip
        seq0 = start % 2000
        ids += record_episodes(store, project_id, session, start // TURN, msgs, first_seq=seq0)
    episodes_per_s = n / (time.perf_counter() - started)
    started = time.perf_counter()
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    if not vectors:
        return episodes_per_s, 0.0
    for eid, v in zip(ids, vecs, strict=True):
        put_vector(store, project_id=project_id, owner="episode", owner_id=eid,
                   model=RandomVectors.name, vector=v)  # fmt: skip
    return episodes_per_s, n / (time.perf_counter() - started)


def cached_store(cache: Path, n: int) -> Path:
    """The path of a store holding ``n`` episodes (plus 10% in a second project), built
    on first use: 100k episodes take minutes to record, a query milliseconds."""
    path = cache / f"recall-{n}-shape{SHAPE}.db"
    if path.exists():
        return path
    print(f"building the {n:,}-episode store in {cache} (once)...", flush=True)
    part = path.with_suffix(".part")
    for leftover in cache.glob(part.name + "*"):
        leftover.unlink()
    store = open_store(part)
    roots = [cache / f"p{n}", cache / f"o{n}"]
    for r in roots:
        r.mkdir(parents=True, exist_ok=True)
    mine, other = (add_project(store, r) for r in roots)
    rng = np.random.default_rng(n)
    fill(store, mine.id, n, rng)
    fill(store, other.id, n // 10, rng)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    part.rename(path)
    return path


class Floor:
    """The reference: an exact top-k numpy scan over vectors already in memory."""

    def __init__(self, store: Store, project_id: int) -> None:
        rows = store.query(
            "SELECT owner_id, vector FROM embedding WHERE project_id = ? AND model = ?",
            (project_id, RandomVectors.name),
        )
        self.ids = np.array([int(r[0]) for r in rows], dtype=np.int64)
        self.mat = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(
            len(rows), DIM
        )
        self.norms = np.linalg.norm(self.mat, axis=1)

    def nearest(self, q: np.ndarray, k: int) -> list[int]:
        dist = 1.0 - (self.mat @ q) / (self.norms * np.linalg.norm(q))
        top = np.argpartition(dist, k)[:k]
        return [int(self.ids[i]) for i in top[np.lexsort((self.ids[top], dist[top]))]]


def exact_lexical(store: Store, pid: int, q: str, kind: Kind | None) -> list[tuple[int, float]]:
    """The reference for the BM25 leg: the project's rows filtered first, then every
    match scored by bm25() and sorted (newest first when BM25 cannot rank)."""
    lexq = lexical_query(store, q)
    if lexq is None:
        return []
    where, params = ("AND e.kind = ? ", [kind]) if kind else ("", [])
    order = "s, f.rowid" if lexq.ranked else "f.rowid DESC"
    rows = store.query(
        "SELECT f.rowid, bm25(episode_fts) AS s FROM episode_fts f "
        "JOIN episodic_stream e ON e.id = f.rowid WHERE episode_fts MATCH ? "
        f"AND e.project_id = ? AND e.tier != 'dropped' {where}ORDER BY {order} LIMIT ?",
        [lexq.match, pid, *params, K],
    )
    return [(int(r[0]), float(r[1])) for r in rows]


def lexical_same(store: Store, pid: int, queries: list[str], kind: Kind | None) -> int:
    """How many queries' lexical recall is exactly the reference: ids, order, scores."""
    return sum(
        [(h.episode.id, h.bm25) for h in recall(store, pid, q, K, kind=kind)]
        == exact_lexical(store, pid, q, kind)
        for q in queries
    )


def latency(fn: Callable[[str], object], queries: list[str]) -> tuple[float, float]:
    fn(queries[0])  # warm the page cache, the statement cache and any held matrix
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def project_id(store: Store, cache: Path, n: int) -> int:
    row = store.query("SELECT id FROM project WHERE root = ?", (str((cache / f"p{n}").resolve()),))
    return int(row[0][0])


def write_rate(rng: np.random.Generator) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "w.db")
        root = Path(tmp) / "p"
        root.mkdir()
        rates = fill(store, add_project(store, root).id, 2_000, rng)
        store.close()
    return rates


def bench_size(
    cache: Path, n: int, queries: list[str], in_database: bool
) -> dict[tuple[int, str], tuple[float, float]]:
    """Every leg at one store size, printed as it goes; (size, leg) -> (p50, p95)."""
    emb = RandomVectors()
    path = cached_store(cache, n)
    store = open_store(path)
    assert store.vec_version, "sqlite-vec must load for this bench"
    absent = Store(path=path, conn=connect(path), vec_version=None)  # as if it cannot load
    pid = project_id(store, cache, n)
    floor = Floor(store, pid)
    qvecs = {q: emb.embed([q])[0] for q in queries}
    same = sum(
        [x.owner_id for x in knn(store, project_id=pid, owner="episode",
                                 model=emb.name, query=qvecs[q], k=4 * K)]
        == floor.nearest(qvecs[q], 4 * K)
        for q in queries
    )  # fmt: skip
    # Word counts are held per store between queries (episodes/recall.py): "warm" legs
    # run after every query has been asked once (and nothing written since), "cold"
    # ones forget every count before each query, as a store's first query finds it.
    first_same = lexical_same(store, pid, queries, None)  # also warms store's counts
    for q in queries:
        recall(absent, pid, q, K)

    def cold(s: Store) -> Store:
        recall_module._held.pop(id(s), None)  # the store's held word counts
        return s

    legs: list[tuple[str, Callable[[str], object]]] = [
        ("floor: numpy exact scan", lambda q: floor.nearest(qvecs[q], K)),
        ("lexical (BM25)", lambda q: recall(store, pid, q, K)),
        ("lexical, counts cold", lambda q: recall(cold(store), pid, q, K)),
        ("hybrid", lambda q: recall(store, pid, q, K, embedder=emb)),
        ("hybrid, counts cold", lambda q: recall(cold(store), pid, q, K, embedder=emb)),
        ("lexical, sqlite-vec absent", lambda q: recall(absent, pid, q, K)),
        ("lexical, vec absent, cold", lambda q: recall(cold(absent), pid, q, K)),
        ("hybrid, sqlite-vec absent", lambda q: recall(absent, pid, q, K, embedder=emb)),
        ("hybrid, vec absent, cold", lambda q: recall(cold(absent), pid, q, K, embedder=emb)),
        ("lexical, kind filter", lambda q: recall(store, pid, q, K, kind="tool_result")),
    ]
    if in_database:
        legs.append(
            ("knn in the database (vec)", lambda q: knn(
                store, project_id=pid, owner="episode", model=emb.name, query=qvecs[q],
                k=4 * K, mode="sqlite-vec"))
        )  # fmt: skip
    results: dict[tuple[int, str], tuple[float, float]] = {}
    print(f"\n{'episodes':>9}  {'leg':<28} {'p50 ms':>8} {'p95 ms':>8} {'/ floor':>8}")
    for name, fn in legs:
        p50, p95 = latency(fn, queries)
        results[(n, name)] = (p50, p95)
        ratio = p50 / results[(n, "floor: numpy exact scan")][0]
        print(f"{n:>9,}  {name:<28} {p50:>8.2f} {p95:>8.2f} {ratio:>7.1f}x", flush=True)
    print(f"{n:>9,}  vector neighbours identical to the floor's: {same} of {len(queries)}")
    lex_same = lexical_same(store, pid, queries, None)
    kind_same = lexical_same(store, pid, queries, "tool_result")
    print(f"{n:>9,}  lexical top {K} identical to exact BM25 (filter first, every match "
          f"scored): {first_same} of {len(queries)} counts cold, {lex_same} warm; with the "
          f"kind filter {kind_same} of {len(queries)}")  # fmt: skip
    results[(n, "identical")] = (
        float(same + first_same + lex_same + kind_same),
        float(4 * len(queries)),
    )
    for s in (absent, store):
        s.close()
    return results


# --engines (issue 39): the same episodes in SQLite and in PostgreSQL, recall timed on
# both in one run. Lexical recall only (no embedder): PostgreSQL's vector leg is an
# in-memory scan like SQLite's fallback, and embedding 100k texts would take the hour.


@contextmanager
def throwaway_postgresql() -> Iterator[str]:
    """A URL to a PostgreSQL server started for this run and stopped after it: the
    tests' own server (tests/fixtures_postgresql.py: initdb and pg_ctl, as ``nobody``
    under root, a private Unix socket, no TCP port, fsync off)."""
    tests = Path(__file__).resolve().parent.parent / "tests"
    if str(tests) not in sys.path:
        sys.path.append(str(tests))
    from fixtures_postgresql import PostgresServer, find_bin

    bin_dir = find_bin()
    if bin_dir is None or not (bin_dir / "pg_ctl").exists():
        raise SystemExit("PostgreSQL's binaries are not installed (scripts/setup-tests)")
    server = PostgresServer(bin=bin_dir, dir=Path(tempfile.mkdtemp(prefix="sakur4-bench-pg-")))
    try:
        server.start()
        yield server.new_schema_url()
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


def populate(target: str, roots: Path, n: int) -> tuple[Store, int, float]:
    """A store at ``target`` holding ``n`` episodes (and 10% more in a second project),
    the same on every engine for the same ``n``; returns it, the project, the seconds."""
    store = open_store(target)
    mine, other = (add_project(store, roots / name) for name in ("p", "o"))
    rng = np.random.default_rng(n)
    started = time.perf_counter()
    fill(store, mine.id, n, rng, vectors=False)
    fill(store, other.id, n // 10, rng, vectors=False)
    if store.engine == "postgresql":
        # What autovacuum would do shortly after a bulk load: the planner's statistics.
        store.conn.execute("ANALYZE")
    return store, mine.id, time.perf_counter() - started


def data_digest(store: Store) -> str:
    """Every episode as stored (id, session, seq, kind, content), hashed: two engines
    compared on the same data must give the same digest."""
    h = hashlib.sha256()
    rows = store.query("SELECT id, session, seq, kind, content FROM episodic_stream ORDER BY id")
    for r in rows:
        h.update(repr(tuple(r)).encode())
    return f"{len(rows)}:{h.hexdigest()}"


def side_by_side(
    stores: dict[str, tuple[Store, int]], queries: list[str], *, verbose: bool = False
) -> dict[str, tuple[float, float]]:
    """Each engine's recall p50/p95 (ms) over ``queries``, asked in turn on every engine
    query by query, so a change in the machine's load falls on all of them alike."""
    for store, pid in stores.values():
        # Warm: the page cache and the statement cache on every engine, and the word
        # counts each engine's recall holds (a store's first query counts its words):
        # every query asked once.
        for q in queries:
            recall(store, pid, q, K)
    times: dict[str, list[float]] = {name: [] for name in stores}
    for i, q in enumerate(queries, 1):
        for name, (store, pid) in stores.items():
            t = time.perf_counter()
            recall(store, pid, q, K)
            times[name].append((time.perf_counter() - t) * 1000)
        if verbose:
            each = "  ".join(f"{name} {ts[-1]:.1f}" for name, ts in times.items())
            print(f"    query {i:>3} {q!r:<36} ms: {each}", flush=True)
    out = {}
    for name, ts in times.items():
        ts.sort()
        out[name] = (statistics.median(ts), ts[int(0.95 * (len(ts) - 1))])
    return out


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def compare_engines(n: int, queries: list[str]) -> float:
    """The issue-39 figure at ``n`` episodes: PostgreSQL's recall p50 over SQLite's."""
    print(f"engines at {n:,} episodes, {len(queries)} queries, lexical, k={K}; {uptime()}")
    with ExitStack() as stack:
        roots = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sakur4-engines-")))
        url = stack.enter_context(throwaway_postgresql())
        for name in ("p", "o"):
            (roots / name).mkdir()
        stores: dict[str, tuple[Store, int]] = {}
        digests = {}
        for engine, target in (("sqlite", str(roots / "s.db")), ("postgresql", url)):
            store, pid, took = populate(target, roots, n)
            stores[engine] = (store, pid)
            digests[engine] = data_digest(store)
            total = n + n // 10
            print(f"  populate {engine}: {total:,} episodes in {took:.1f} s ({total / took:,.0f}"
                  f"/s, record_episodes, {TURN} a call)", flush=True)  # fmt: skip
        if len(set(digests.values())) != 1:
            raise SystemExit(f"the engines do not hold the same episodes: {digests}")
        figures = side_by_side(stores, queries, verbose=True)
        for store, _ in stores.values():
            store.close()
    (s50, s95), (p50, p95) = figures["sqlite"], figures["postgresql"]
    print(f"  {'engine':<12} {'p50 ms':>9} {'p95 ms':>9}")
    for engine, (a, b) in figures.items():
        print(f"  {engine:<12} {a:>9.2f} {b:>9.2f}")
    ratio = p50 / s50
    print(f"  PostgreSQL / SQLite: p50 {ratio:.2f}x, p95 {p95 / s95:.2f}x; {uptime()}")
    verdict = "met" if ratio <= 3 else "MISSED"
    print(f"goal at {n:,}: PostgreSQL recall p50 <= 3x SQLite's = {ratio:.2f}x: {verdict}")
    return ratio


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=60)
    default_cache = Path(tempfile.gettempdir()) / "sakur4-bench-recall"
    ap.add_argument("--cache", type=Path, default=default_cache)
    ap.add_argument(
        "--in-database", action="store_true", help="also time sqlite-vec's in-database scan"
    )
    ap.add_argument(
        "--engines",
        action="store_true",
        help="only SQLite beside PostgreSQL (a throwaway server) on the same episodes",
    )
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    queries = [" ".join(words(rng, int(rng.integers(2, 5)))) for _ in range(args.queries)]
    if args.engines:
        for n in args.sizes:
            compare_engines(n, queries)
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)

    print(f"recall bench: {args.queries} queries, {DIM}-d vectors, k={K}, "
          f"python {sys.version.split()[0]}")  # fmt: skip
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    model = MiniLM()
    model.embed(["warm up"])
    emb_p50, emb_p95 = latency(lambda q: model.embed([q]), [f"why does {q} fail" for q in queries])
    print(f"query embedding, all-MiniLM-L6-v2 (numpy): p50 {emb_p50:.1f} ms  p95 {emb_p95:.1f} ms")
    results: dict[tuple[int, str], tuple[float, float]] = {}
    for n in args.sizes:
        results.update(bench_size(args.cache, n, queries, args.in_database))
    eps, vps = write_rate(rng)
    print(f"\nwrite: {eps:,.0f} episodes/s (record_episodes, {TURN} a call), "
          f"{vps:,.0f} vectors/s (put_vector), into a fresh store")  # fmt: skip
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    big = max(args.sizes)
    floor_p50 = results[(big, "floor: numpy exact scan")][0]

    def goal(what: str, got: float, limit: float, unit: str) -> None:
        verdict = "met" if got <= limit else "MISSED"
        print(f"goal at {big:,}: {what} = {got:.2f}{unit} (<= {limit:g}{unit}): {verdict}")

    hybrid = (
        "hybrid",
        "hybrid, counts cold",
        "hybrid, sqlite-vec absent",
        "hybrid, vec absent, cold",
    )
    for leg in hybrid:
        p50 = results[(big, leg)][0]
        goal(f"{leg} p50 / floor p50 ({p50:.2f} / {floor_p50:.2f} ms)", p50 / floor_p50, 3, "x")
    lexical = ("lexical (BM25)", "lexical, counts cold", "lexical, sqlite-vec absent",
               "lexical, vec absent, cold")  # fmt: skip
    for leg in lexical:
        goal(f"{leg} p50", results[(big, leg)][0], 10, " ms")
    same, asked = results[(big, "identical")]
    verdict = "met" if same == asked else "MISSED"
    print(f"goal at {big:,}: results identical to the exact answer (vector neighbours, "
          f"lexical cold and warm, lexical with kind filter) = {same:.0f} of {asked:.0f}: "
          f"{verdict}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
