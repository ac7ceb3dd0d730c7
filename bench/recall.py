"""Recall latency (p50/p95) at 10k and 100k episodes, lexical and hybrid, sqlite-vec
vs exact scan, and write throughput — in one run.

    .venv/bin/python bench/recall.py [--sizes 10000 100000] [--queries 60]

Episode text is synthetic: words drawn from a Zipf distribution over a 20,000-word
vocabulary (a few very common words, a long tail), 20-250 words an episode, so
BM25 sees both common and rare terms. Vectors are random unit vectors of 384
dimensions (all-MiniLM-L6-v2's size): embedding 100k texts with the local model
would take most of an hour on 2 cores, and KNN cost depends only on the count and
dimension. The cost of embedding the query itself with the local model is
measured separately and printed, so hybrid = vector leg + that.

Baselines in the same run: lexical-only recall is the baseline for hybrid, and the
exact scan for sqlite-vec. A second project holds 10% extra episodes so every
query pays for project scoping. Goal: hybrid p50 < 50 ms at 100k.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sakur4.embedders.minilm import MiniLM
from sakur4.episodes import recall, record_episodes
from sakur4.store import Store, open_store
from sakur4.store.db import connect
from sakur4.store.projects import add_project
from sakur4.store.vectors import put_vector

DIM = 384
VOCAB = 20_000
TURN = 20  # messages recorded per call, as a gateway records a turn


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


def fill(store: Store, project_id: int, n: int, rng: np.random.Generator) -> tuple[float, float]:
    """Record ``n`` episodes in turns of TURN messages; return (episodes/s, vectors/s)."""
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
    for eid, v in zip(ids, vecs, strict=True):
        put_vector(store, project_id=project_id, owner="episode", owner_id=eid,
                   model=RandomVectors.name, vector=v)  # fmt: skip
    return episodes_per_s, n / (time.perf_counter() - started)


def latency(fn: Callable[[str], object], queries: list[str]) -> tuple[float, float]:
    fn(queries[0])  # warm the page cache and statement cache
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def legs(
    store: Store, exact: Store, mapped: Store, pid: int
) -> list[tuple[str, Callable[[str], object]]]:
    emb = RandomVectors()
    return [
        ("lexical (BM25)", lambda q: recall(store, pid, q, 10)),
        ("hybrid, sqlite-vec", lambda q: recall(store, pid, q, 10, embedder=emb)),
        ("hybrid, exact scan", lambda q: recall(exact, pid, q, 10, embedder=emb)),
        ("lexical, kind filter", lambda q: recall(store, pid, q, 10, kind="tool_result")),
        ("lexical, mmap", lambda q: recall(mapped, pid, q, 10)),
        ("hybrid, sqlite-vec, mmap", lambda q: recall(mapped, pid, q, 10, embedder=emb)),
    ]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    queries = [" ".join(words(rng, int(rng.integers(2, 5)))) for _ in range(args.queries)]

    print(f"recall bench: {args.queries} queries, {DIM}-d vectors, python {sys.version.split()[0]}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    model = MiniLM()
    model.embed(["warm up"])
    emb_p50, emb_p95 = latency(lambda q: model.embed([q]), [f"why does {q} fail" for q in queries])
    print(f"query embedding, all-MiniLM-L6-v2 (numpy): p50 {emb_p50:.1f} ms  p95 {emb_p95:.1f} ms")
    rows: list[tuple[int, str, float, float]] = []
    writes: list[tuple[int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"recall-{n}.db"
            store = open_store(path)
            assert store.vec_version, "sqlite-vec must load for this bench"
            roots = [Path(tmp) / f"p{n}", Path(tmp) / f"o{n}"]
            for r in roots:
                r.mkdir()
            mine, other = (add_project(store, r) for r in roots)
            eps, vps = fill(store, mine.id, n, rng)
            fill(store, other.id, n // 10, rng)
            writes.append((n, eps, vps))
            exact = Store(path=path, conn=connect(path), vec_version=None)  # as if vec cannot load
            # The same store with SQLite reading pages through mmap (a candidate pragma).
            mapped = open_store(path)
            mapped.conn.execute(f"PRAGMA mmap_size = {1 << 30}")
            for name, fn in legs(store, exact, mapped, mine.id):
                p50, p95 = latency(fn, queries)
                rows.append((n, name, p50, p95))
                print(f"{n:>9,}  {name:<26} {p50:>8.1f} {p95:>8.1f}", flush=True)
            for s in (exact, mapped, store):
                s.close()
    print(f"\n{'episodes':>9}  {'leg':<26} {'p50 ms':>8} {'p95 ms':>8}")
    for n, name, p50, p95 in rows:
        print(f"{n:>9,}  {name:<26} {p50:>8.1f} {p95:>8.1f}")
    print()
    for n, eps, vps in writes:
        print(f"{n:>9,}  write: {eps:,.0f} episodes/s (record_episodes, {TURN} a call), ", end="")
        print(f"{vps:,.0f} vectors/s (put_vector)")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    big = max(args.sizes)
    for name, p50, _ in [(r[1], r[2], r[3]) for r in rows if r[0] == big and "hybrid" in r[1]]:
        total = p50 + emb_p50
        verdict = "met" if total < 50 else "NOT met"
        print(f"goal at {big:,}: {name} p50 + query embedding = {total:.1f} ms ({verdict}: < 50)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
