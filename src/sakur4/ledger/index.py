"""Indexing: parse the project's changed files and append what changed to the Ledger.

Incremental by construction. A file whose size and mtime match its
``repo_file`` row is not read; a file whose bytes hash to the stored content hash
is not parsed; only a symbol whose text, signature, kind or span changed gets a
new fact row. A removed symbol or file gets a tombstone fact. References are
derived data, replaced per file.

Writes are grouped into transactions of whole files (:data:`FILES_PER_TX`): a
crash leaves every file either fully indexed at its new version or untouched at
its old one, never half.

Reading, hashing and parsing (tree-sitter, the tag queries and the Python that
turns matches into symbols and references) run in a process pool, one worker
per core, once there are :data:`POOL_FROM_BYTES` to parse; this process writes
what comes back, in the order the files were found, so the Ledger is the same
row for row with and without the pool.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from sakur4.errors import LedgerError
from sakur4.ledger.facts import newest_facts_by_path
from sakur4.ledger.walk import MAX_FILE_BYTES, FoundFile, WalkLimits, discover
from sakur4.parsers import ParsedFile, Symbol, language_named, parse_source
from sakur4.store.db import Store
from sakur4.store.projects import Project, resolve_inside
from sakur4.vocabulary import Fact

# (files done, files to parse, path just done): called once per file read.
ProgressFn = Callable[[int, int, str], None]

FILES_PER_TX = 200
# A file modified this close to the moment it was read may change again within
# the same mtime tick; its mtime is not trusted next time (git's "racy clean").
RACY_NS = 2_000_000_000
SQL_PARAMS = 500  # stay well under SQLite's bound-parameter limit
BINARY_SNIFF = 8192
# Below this many bytes to parse, starting the pool (a fork server that imports
# tree-sitter and the grammars once) costs more than parsing on two cores saves.
POOL_FROM_BYTES = 2_000_000
POOL_CHUNK = 8  # files a worker takes at a time: fewer round trips, still balanced


@dataclass(frozen=True)
class IndexReport:
    """What one run of the indexer did."""

    project_id: int
    root: str
    scope: str  # the path indexed, relative to the root ("." for all of it)
    files_seen: int  # files with a grammar under the scope, after skips
    files_parsed: int
    files_unchanged: int  # by stat or by content hash
    files_removed: int  # deleted (or now skipped) since the last run: tombstoned
    facts_written: int  # new or changed symbols
    tombstones_written: int
    references_written: int  # rows: one per (file, from, to, kind), its uses counted
    files_with_syntax_errors: int  # parsed anyway: tree-sitter recovers
    skipped: dict[str, int] = field(default_factory=dict)
    languages: dict[str, int] = field(default_factory=dict)  # files parsed per language
    seconds: float = 0.0
    workers: int = 1  # processes that read and parsed (1: this one, no pool)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Known(NamedTuple):
    """A repo_file row. A tuple, not a dataclass: one is built per file of the
    project on every re-index, which is the floor of its latency."""

    content_hash: str
    size: int
    mtime_ns: int | None
    deleted: bool


class _FileRows(NamedTuple):
    """What reading one file gave, as the Ledger will store it: tuples, because a
    worker process pickles one of these per file back to the writer."""

    language: str
    has_errors: bool
    symbols: tuple[Symbol, ...]
    uses: list[tuple[str, str, str, int, int]]  # from, to, kind, first line, count


def _file_rows(parsed: ParsedFile) -> _FileRows:
    """One reference row per (from, to, kind): every reader groups by those and
    asks only for the first line or the count (migration m005)."""
    uses: dict[tuple[str, str, str], list[int]] = {}
    for r in parsed.references:  # sorted by line: the first of each key is its first use
        seen = uses.get((r.from_name, r.to_name, r.kind))
        if seen is None:
            uses[(r.from_name, r.to_name, r.kind)] = [r.line, 1]
        else:
            seen[1] += 1
    rows = [(src, dst, kind, line, n) for (src, dst, kind), (line, n) in uses.items()]
    return _FileRows(parsed.language, parsed.has_errors, parsed.symbols, rows)


@dataclass(frozen=True)
class _Parsed:
    file: FoundFile
    digest: str
    mtime_ns: int | None  # None: too recent to trust (see RACY_NS)
    parsed: _FileRows


@dataclass
class _Counts:
    facts: int = 0
    tombstones: int = 0
    refs: int = 0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _chunks(items: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def index_project(
    store: Store,
    project: Project,
    path: str | Path | None = None,
    progress: ProgressFn | None = None,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    limits: WalkLimits | None = None,
    pool_from_bytes: int = POOL_FROM_BYTES,
) -> IndexReport:
    """Bring the Ledger up to date with the files under ``path`` (default: the whole project).

    ``path`` is relative to the project root, or absolute; a path (or a symlink on
    it) leading outside the root raises PathOutsideProject before anything is read.
    """
    started = time.perf_counter()
    root = project.root.resolve()
    start = resolve_inside(project, path) if path is not None else root
    scope = start.relative_to(root).as_posix() if start != root else ""
    found = discover(project, start, max_file_bytes, limits)
    skipped = Counter(found.skipped)

    where, params = "", []
    if scope:
        # The scope and everything under it: "dir" and "dir/..." ("0" sorts right
        # after "/"), a range the (project_id, path) index answers directly.
        where = "AND (path = ? OR (path >= ? AND path < ?))"
        params = [scope, scope + "/", scope + "0"]
    known = {
        r[0]: _Known(r[1], r[2], r[3], r[4] == 1)
        for r in store.query(
            "SELECT path, content_hash, size, mtime_ns, deleted FROM repo_file "
            f"WHERE project_id = ? {where}",
            (project.id, *params),
        )
    }
    present = {f.rel for f in found.files}
    removed = [p for p, k in known.items() if not k.deleted and p not in present]
    to_read = []
    unchanged = 0
    for f in found.files:
        k = known.get(f.rel)
        if k and not k.deleted and k.size == f.size and k.mtime_ns == f.mtime_ns:
            unchanged += 1
        else:
            to_read.append(f)

    counts = _Counts()
    parsed_langs: Counter[str] = Counter()
    syntax_errors = 0
    restamp: list[tuple[int | None, int, str]] = []
    batch: list[_Parsed] = []
    tasks = [
        _Task(f, known[f.rel].content_hash if f.rel in known and not known[f.rel].deleted else None)
        for f in to_read
    ]
    workers = pool_size() if _pooled(tasks, pool_from_bytes) else 1
    for done, out in enumerate(_outcomes(tasks, workers), 1):
        f = out.file
        if out.status in ("unreadable", "binary"):
            skipped[out.status] += 1
            if f.rel in known and not known[f.rel].deleted:
                removed.append(f.rel)  # no longer indexable: its facts are retired
        elif out.status == "same":
            unchanged += 1
            restamp.append((out.mtime_ns, f.size, f.rel))
        elif out.status == "grammar-unavailable":
            # The grammar itself failed (doctor says which): the file's facts
            # stay as they were rather than be guessed at.
            skipped[f"grammar-unavailable:{f.language}"] += 1
        elif out.parsed is not None:
            parsed_langs[f.language] += 1
            syntax_errors += out.parsed.has_errors
            batch.append(_Parsed(f, out.digest, out.mtime_ns, out.parsed))
        if len(batch) >= FILES_PER_TX:
            _write_parsed(store, project.id, batch, counts)
            batch = []
        if progress is not None:
            progress(done, len(tasks), f.rel)
    if batch:
        _write_parsed(store, project.id, batch, counts)
    for chunk in _chunks(restamp, FILES_PER_TX * 10):
        with store.tx() as c:
            c.executemany(
                "UPDATE repo_file SET mtime_ns = ?, size = ? WHERE project_id = ? AND path = ?",
                [(m, size, project.id, p) for m, size, p in chunk],
            )
    removed = sorted(set(removed))
    for chunk in _chunks(removed, FILES_PER_TX):
        _write_removed(store, project.id, chunk, counts)

    return IndexReport(
        project_id=project.id,
        root=str(root),
        scope=scope or ".",
        files_seen=len(found.files),
        files_parsed=sum(parsed_langs.values()),
        files_unchanged=unchanged,
        files_removed=len(removed),
        facts_written=counts.facts,
        tombstones_written=counts.tombstones,
        references_written=counts.refs,
        files_with_syntax_errors=syntax_errors,
        skipped=dict(sorted(skipped.items())),
        languages=dict(sorted(parsed_langs.items())),
        seconds=round(time.perf_counter() - started, 3),
        workers=workers,
    )


@dataclass(frozen=True)
class _Task:
    file: FoundFile
    known_hash: str | None  # the stored content hash, if the file is live in the Ledger


@dataclass(frozen=True)
class _Outcome:
    file: FoundFile
    status: str  # parsed, same, unreadable, binary, grammar-unavailable
    digest: str = ""
    mtime_ns: int | None = None  # None: too recent to trust (see RACY_NS)
    parsed: _FileRows | None = None


def _examine(task: _Task) -> _Outcome:
    """Read, hash and (if its content changed) parse one file; touches no store,
    so it can run in a worker process."""
    f = task.file
    read_at = time.time_ns()
    try:
        data = Path(f.abspath).read_bytes()
    except OSError:
        return _Outcome(f, "unreadable")
    if b"\0" in data[:BINARY_SNIFF]:
        return _Outcome(f, "binary")
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    mtime = None if read_at - f.mtime_ns < RACY_NS else f.mtime_ns
    if digest == task.known_hash:
        return _Outcome(f, "same", digest, mtime)
    try:
        parsed = parse_source(data, f.rel, language_named(f.language))
    except LedgerError:
        return _Outcome(f, "grammar-unavailable")
    return _Outcome(f, "parsed", digest, mtime, _file_rows(parsed))


def pool_size() -> int:
    """The cores this process may run on: the pool's worker count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _quiet_worker() -> None:
    # Ctrl-C reaches the whole process group: the parent stops the pool, and a
    # worker's own KeyboardInterrupt would only print a traceback per worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pooled(tasks: list[_Task], pool_from_bytes: int) -> bool:
    """Whether to parse in a pool: enough bytes, two cores, and one thread.

    Workers are forked: they start at once with everything imported, and never
    touch the store connection they inherit. A process with other threads (a
    server) parses alone instead: forking it can copy a lock another thread
    holds, and the alternatives (spawn, a fork server) re-run the caller's main
    module in every worker — a script without a ``__main__`` guard then indexes
    again from each of them."""
    return (
        threading.active_count() == 1
        and pool_size() > 1
        and sum(t.file.size for t in tasks) >= pool_from_bytes
    )


def _outcomes(tasks: list[_Task], workers: int) -> Iterator[_Outcome]:
    """Each task examined, in order: by ``workers`` processes when more than one."""
    if workers < 2:
        yield from map(_examine, tasks)
        return
    # concurrent.futures, not multiprocessing.Pool: a worker that dies (a parser
    # crash) fails the run there, where Pool's imap would wait for it forever.
    pool = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"), initializer=_quiet_worker
    )
    try:
        yield from pool.map(_examine, tasks, chunksize=POOL_CHUNK)
    except BrokenProcessPool as e:
        raise LedgerError(
            "a parsing worker died (a parser crash?); nothing after the last written "
            f"file was stored: {e}"
        ) from e
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_INSERT_FACT = (
    "INSERT INTO symbolic_fact (project_id, path, qualified_name, kind, language, signature, "
    "start_line, end_line, symbol_hash, file_hash, tombstone) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _write_parsed(store: Store, project_id: int, batch: list[_Parsed], counts: _Counts) -> None:
    now = _now()
    with store.tx() as c:
        paths = [b.file.rel for b in batch]
        current = newest_facts_by_path(store, project_id, paths)
        facts: list[tuple[Any, ...]] = []
        refs: list[tuple[Any, ...]] = []
        files: list[tuple[Any, ...]] = []
        for b in batch:
            f, digest, parsed = b.file, b.digest, b.parsed
            cur = current.get(f.rel, {})
            for s in parsed.symbols:
                old = cur.pop(s.qualified_name, None)
                if (
                    old is None
                    or old.tombstone
                    or (old.symbol_hash, old.kind, old.signature, old.start_line, old.end_line)
                    != (s.symbol_hash, s.kind, s.signature, s.start_line, s.end_line)
                ):
                    facts.append(
                        (
                            project_id,
                            f.rel,
                            s.qualified_name,
                            s.kind,
                            parsed.language,
                            s.signature,
                            s.start_line,
                            s.end_line,
                            s.symbol_hash,
                            digest,
                            0,
                        )
                    )
                    counts.facts += 1
            for gone in cur.values():
                if not gone.tombstone:
                    facts.append(_tombstone(project_id, f.rel, gone, digest))
                    counts.tombstones += 1
            refs.extend((project_id, f.rel, *u) for u in parsed.uses)
            counts.refs += len(parsed.uses)
            files.append((project_id, f.rel, digest, parsed.language, f.size, now, b.mtime_ns))
        for chunk in _chunks(paths, SQL_PARAMS):
            marks = ",".join("?" * len(chunk))
            c.execute(
                f"DELETE FROM symbol_ref WHERE project_id = ? AND path IN ({marks})",
                (project_id, *chunk),
            )
        c.executemany(_INSERT_FACT, facts)
        c.executemany(
            "INSERT INTO symbol_ref (project_id, path, from_name, to_name, kind, line, uses) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            refs,
        )
        c.executemany(
            "INSERT INTO repo_file (project_id, path, content_hash, language, size, "
            "last_indexed, mtime_ns, deleted) VALUES (?, ?, ?, ?, ?, ?, ?, 0) "
            "ON CONFLICT (project_id, path) DO UPDATE SET content_hash = excluded.content_hash, "
            "language = excluded.language, size = excluded.size, "
            "last_indexed = excluded.last_indexed, mtime_ns = excluded.mtime_ns, deleted = 0",
            files,
        )


def _tombstone(project_id: int, path: str, gone: Fact, file_hash: str) -> tuple[Any, ...]:
    return (
        project_id,
        path,
        gone.qualified_name,
        gone.kind,
        gone.language,
        "",
        None,
        None,
        "",
        file_hash,
        1,
    )


def _write_removed(store: Store, project_id: int, paths: Sequence[str], counts: _Counts) -> None:
    now = _now()
    with store.tx() as c:
        current = newest_facts_by_path(store, project_id, paths)
        facts = [
            _tombstone(project_id, path, gone, "")
            for path in paths
            for gone in current.get(path, {}).values()
            if not gone.tombstone
        ]
        c.executemany(_INSERT_FACT, facts)
        counts.tombstones += len(facts)
        marks = ",".join("?" * len(paths))
        c.execute(
            f"DELETE FROM symbol_ref WHERE project_id = ? AND path IN ({marks})",
            (project_id, *paths),
        )
        c.execute(
            f"UPDATE repo_file SET deleted = 1, last_indexed = ? "
            f"WHERE project_id = ? AND path IN ({marks})",
            (now, project_id, *paths),
        )
