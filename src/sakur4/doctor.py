"""``sakur4 doctor``: report what can be known about this installation, never fail.

It is the command an operator reaches for when something is wrong, so every
check is independent: a store that is missing, locked, corrupt, newer, or not
SQLite at all yields a report line, and the other checks still run. Problems
set a non-zero exit code; nothing here raises to the caller.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sakur4 import __version__
from sakur4.embedders import make_embedder
from sakur4.errors import Sakur4Error, SettingsError
from sakur4.probe import backend as _backend
from sakur4.settings import Settings
from sakur4.store.db import (
    DriverError,
    connect,
    driver,
    load_vec,
    not_a_file,
    read_only_reason,
)
from sakur4.store.dialect import column_names_sql, table_names_sql
from sakur4.store.migrations import MIGRATIONS, applied_names
from sakur4.store.postgresql import engine_of, masked, pgvector_version

Level = Literal["ok", "warn", "fail"]
EMBEDDER_PROBE_TIMEOUT = 10.0  # seconds: doctor reports a slow embedder rather than waiting
SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    detail: str


@dataclass
class Report:
    version: str = __version__
    settings: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    projects: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.level != "fail" for c in self.checks)

    def add(self, name: str, level: Level, detail: str) -> None:
        self.checks.append(Check(name, level, detail))

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "ok": self.ok,
            "settings": self.settings,
            "checks": [asdict(c) for c in self.checks],
            "projects": self.projects,
        }


def _settings(report: Report, overrides: dict[str, Any]) -> Settings:
    try:
        s = Settings.load(**overrides)
        report.add("settings", "ok", "loaded from SAKUR4_* and flags")
    except SettingsError as e:
        report.add("settings", "fail", f"{e}; showing defaults")
        s = Settings.load()  # env may be the culprit: fall back to pure defaults
    shown = s.model_dump(mode="json")
    if isinstance(s.store, str):  # a PostgreSQL URL: never its password
        shown["store"] = masked(s.store)
    if s.http_token is not None:
        shown["http_token"] = "(set)"  # noqa: S105 - a placeholder, never the secret
    report.settings = shown
    return s


def _file_state(report: Report, path: Path) -> bool:
    """Check the store file before SQLite sees it; True when it is worth opening."""
    try:
        exists = path.exists()
    except OSError as e:  # e.g. a parent directory this user may not enter
        report.add("store", "fail", f"{path} cannot be reached: {e.strerror}")
        return False
    if not exists:
        if (why := _cannot_create(path)) is not None:
            report.add("store", "fail", f"{path} does not exist and cannot be created: {why}")
        else:
            report.add("store", "warn", f"{path} does not exist yet (created on first use)")
        return False
    if (what := not_a_file(path)) is not None:
        # Found by issue 15: /dev/null was "empty (0 bytes)", a warning, exit 0.
        report.add(
            "store", "fail", f"{path} is {what}, not a regular file: no store can live there"
        )
        return False
    if not os.access(path, os.R_OK):
        report.add("store", "fail", f"{path} is not readable by this user")
        return False
    size = path.stat().st_size
    if size == 0:
        if (why := read_only_reason(path)) is not None:
            report.add("store", "fail", f"{path} is empty (0 bytes) and read-only ({why})")
        else:
            never = "a store that was never written"
            report.add("store", "warn", f"{path} is empty (0 bytes): {never}")
        return False
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as e:
        report.add("store", "fail", f"{path} cannot be read: {e}")
        return False
    if head != SQLITE_HEADER:
        report.add("store", "fail", f"{path} is not a SQLite database (bad header)")
        return False
    if (why := read_only_reason(path)) is not None:
        # Found by the reliability harness: every check then said only "unable to open".
        report.add(
            "store",
            "fail",
            f"{path} ({size:,} bytes) is read-only ({why}): Sakur4 cannot write to it",
        )
        return True
    report.add("store", "ok", f"{path} ({size:,} bytes)")
    return True


def _cannot_create(path: Path) -> str | None:
    """Why a store that does not exist yet could not be created there, if it could not."""
    where = path.parent
    while not where.exists() and where.parent != where:
        where = where.parent
    if not where.is_dir():
        return f"{where} is not a directory"
    return read_only_reason(where / path.name)


def _guarded(report: Report, name: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except (DriverError, sqlite3.Error, Sakur4Error, OSError, ValueError) as e:
        report.add(name, "fail", f"{type(e).__name__}: {e}")


def _inspect_store(report: Report, path: Path) -> None:
    conn = connect(path, readonly=True)
    try:

        def integrity() -> None:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
            if rows == ["ok"]:
                report.add("integrity", "ok", "PRAGMA integrity_check: ok")
            else:
                report.add("integrity", "fail", "; ".join(rows[:5]))

        def lock() -> None:
            probe = driver.connect(str(path), timeout=0.05, isolation_level=None)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
                report.add("lock", "ok", "no other writer holds the store")
            except DriverError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                report.add("lock", "warn", f"another process holds a write lock ({e})")
            finally:
                probe.close()

        for name, fn in (
            ("schema", functools.partial(_schema, report, conn)),
            ("integrity", integrity),
            ("lock", lock),
            ("projects", functools.partial(_counts, report, conn)),
        ):
            _guarded(report, name, fn)
    finally:
        conn.close()


def _has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    return any(r[0] == column for r in conn.execute(column_names_sql(engine_of(conn)), (table,)))


def _schema(report: Report, conn: sqlite3.Connection) -> None:
    done = applied_names(conn)
    known = [m.name for m in MIGRATIONS]
    unknown = [n for n in done if n not in known]
    if unknown:
        report.add(
            "schema",
            "fail",
            f"written by a newer Sakur4: unknown migrations {', '.join(unknown)}",
        )
    elif len(done) < len(known):
        report.add("schema", "warn", f"version {len(done)} of {len(known)}: migrates on next open")
    else:
        report.add("schema", "ok", f"version {len(done)} (current)")


def _counts(report: Report, conn: sqlite3.Connection) -> None:
    tables = {r[0] for r in conn.execute(table_names_sql(engine_of(conn)))}
    if "project" not in tables:
        report.add("projects", "warn", "no project table (empty store)")
        return
    for r in conn.execute("SELECT id, name, root FROM project ORDER BY id"):
        pid = r[0]
        entry: dict[str, Any] = {"id": pid, "name": r[1], "root": r[2]}
        for table, col in (
            ("repo_file", "files"),
            ("symbolic_fact", "facts"),
            ("semantic_atlas", "atlas_entries"),
            ("episodic_stream", "episodes"),
            ("receipt", "receipts"),
        ):
            if table in tables and _has_column(conn, table, "project_id"):
                q = f"SELECT count(*) FROM {table} WHERE project_id = ?"
                entry[col] = conn.execute(q, (pid,)).fetchone()[0]
        report.projects.append(entry)
    report.add("projects", "ok", f"{len(report.projects)} project(s)")
    unattributed = {}
    for table in ("episodic_stream", "receipt"):
        if table in tables and _has_column(conn, table, "project_id"):
            q = f"SELECT count(*) FROM {table} WHERE project_id IS NULL"
            unattributed[table] = conn.execute(q).fetchone()[0]
        elif table in tables:
            unattributed[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    n = sum(unattributed.values())
    detail = ", ".join(f"{t}: {c}" for t, c in unattributed.items())
    report.add(
        "unattributed",
        "warn" if n else "ok",
        f"{n} row(s) with no project ({detail})" if n else "none",
    )


def _inspect_postgresql(report: Report, url: str) -> None:
    """A shared PostgreSQL store (issue 39): the server, the schema, the projects, and
    how recall searches vectors there. Read-only: the server refuses writes on it."""
    conn = connect(url, readonly=True)
    try:
        version = conn.execute("SHOW server_version").fetchone()[0]
        report.add("store", "ok", f"PostgreSQL {version} at {masked(url)}")
        pgvector = pgvector_version(conn)
        report.add(
            "store vectors",
            "ok",
            (
                f"the server offers pgvector {pgvector}, not used yet: "
                if pgvector
                else "the server has no pgvector: "
            )
            + "recall scans vectors held in memory, as on SQLite without sqlite-vec",
        )
        for name, fn in (("schema", _schema), ("projects", _counts)):
            _guarded(report, name, functools.partial(fn, report, conn))
    finally:
        conn.close()


def _capabilities(report: Report, s: Settings) -> None:
    def sqlite_caps() -> None:
        conn = driver.connect(":memory:")
        try:
            vec = load_vec(conn)
            # Recall searches a matrix held in memory either way (issue 17): sqlite-vec
            # is only the in-database cross-check, so its absence costs nothing.
            report.add(
                "vectors",
                "ok",
                "exact scan of vectors held in memory; "
                + (f"sqlite-vec {vec} loads (cross-check)" if vec else "sqlite-vec does not load"),
            )
            conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
            report.add("fts5", "ok", f"FTS5 available (SQLite {driver.sqlite_version})")
        finally:
            conn.close()

    def embedder() -> None:
        # Try the configured embedder for real: a setting that names a server that is
        # down, or weights that are not installed, must show here, not at first recall.
        emb = make_embedder(s, timeout=EMBEDDER_PROBE_TIMEOUT)
        if emb is None:
            report.add("embedder", "warn", "none configured: recall is lexical (FTS5/BM25) only")
            return
        started = time.perf_counter()
        vec = emb.embed(["doctor: can this embedder embed a sentence?"])
        ms = (time.perf_counter() - started) * 1000
        detail = f"{emb.name}: {vec.shape[1]} dimensions, one text in {ms:.0f} ms"
        report.add("embedder", "ok", detail)

    _guarded(report, "vectors", sqlite_caps)
    _guarded(report, "embedder", embedder)
    for extra in EXTRA_CHECKS:
        _guarded(report, extra.__name__.lstrip("_"), functools.partial(extra, report, s))


def _grammars(report: Report, s: Settings) -> None:
    """Which tree-sitter grammars (and their tag queries) load: the Ledger parses those."""
    try:
        from sakur4.parsers import grammar_status
    except ImportError as e:  # tree-sitter itself is missing or broken
        report.add("grammars", "fail", f"tree-sitter does not import: {e}")
        return
    status = grammar_status()
    loaded = ", ".join(g.language for g in status if g.ok) or "none"
    failed = "; ".join(f"{g.language}: {g.detail}" for g in status if not g.ok)
    if failed:
        report.add("grammars", "fail", f"loaded: {loaded}; failed: {failed}")
    else:
        report.add("grammars", "ok", loaded)


# Checks contributed by other services (grammars, backend); each adds its own lines.
EXTRA_CHECKS: list[Callable[[Report, Settings], None]] = [_grammars, _backend]


def diagnose(**overrides: Any) -> Report:
    """Build the full report. Never raises for a bad store, settings or backend."""
    report = Report()
    s = _settings(report, overrides)
    path = s.store
    if isinstance(path, str):  # a PostgreSQL URL
        _guarded(report, "store", lambda: _inspect_postgresql(report, path))
    elif _file_state(report, path):
        _guarded(report, "store", lambda: _inspect_store(report, path))
    _capabilities(report, s)
    return report
