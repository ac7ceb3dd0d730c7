"""The store's connection: the driver, the pragmas, and error conversion.

The driver is ``sqlean.py`` when it imports: a drop-in ``sqlite3`` build that can
load extensions (sqlite-vec), which the stock CPython here cannot. Otherwise the
standard library's ``sqlite3``; vector search then falls back to an exact scan.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from sakur4.bounds import INT_MAX, INT_MIN
from sakur4.errors import AccessRefused, InputError, StoreCorrupt, StoreError, StoreUnavailable
from sakur4.store.dialect import BEGIN_WRITE, Engine


def _pick_driver() -> ModuleType:
    try:
        import sqlean

        return cast(ModuleType, sqlean)
    except ImportError:  # pragma: no cover - depends on the platform's wheels
        return sqlite3


driver: ModuleType = _pick_driver()
# The driver's own exception classes: sqlean's are not sqlite3's, so code that
# catches database errors catches these, never sqlite3's directly.
DriverError: type[Exception] = driver.Error
IntegrityError: type[Exception] = driver.IntegrityError
OperationalError: type[Exception] = driver.OperationalError
DatabaseError: type[Exception] = driver.DatabaseError

BUSY_TIMEOUT_MS = 5000
MMAP_BYTES = 256 * 1024 * 1024


def _vec_extension() -> str | None:
    """Where the sqlite-vec package keeps its loadable extension (``sqlite_vec.loadable_path``),
    found without importing the package: its ``__init__`` imports numpy when numpy is
    installed, which made every store open pay for numpy (issue 18)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "vec0")


def load_vec(conn: sqlite3.Connection) -> str | None:
    """Load sqlite-vec into ``conn``; return its version, or None where it cannot load."""
    try:
        extension = _vec_extension()
        if extension is None:
            return None
        conn.enable_load_extension(True)
        try:
            conn.load_extension(extension)
        finally:
            conn.enable_load_extension(False)
        row = conn.execute("select vec_version()").fetchone()
        return str(row[0])
    except (ImportError, AttributeError, DriverError, UnicodeDecodeError, sqlite3.Error):
        return None  # a damaged store is reported by the first statement that reads it


# Found by fuzzing: a damaged schema can put bytes that are not UTF-8 into the driver's
# error message, which then fails to decode it and raises this instead of its own error.
DriverFailure = (DriverError, UnicodeDecodeError)


def read_only_reason(path: Path | str) -> str | None:
    """Why the store cannot be written, if it cannot: SQLite only says "unable to open"
    when a WAL store's directory is read-only (found by the reliability harness)."""
    p = Path(path)
    where = p if p.exists() else p.parent
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return "its file system is mounted read-only"
    except OSError:
        return None
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return "this user may not write it or its directory"
    return None


def out_of_range(e: OverflowError) -> InputError:
    """A number SQLite cannot hold (the surfaces' bounds should have caught it first)."""
    return InputError(f"a number is out of range: the store holds integers {INT_MIN} to {INT_MAX}")


# PostgreSQL's SQLSTATE for a missing privilege and for a row a row-level security
# policy refuses (``postgresql._driver_error`` keeps it on the error it raises).
INSUFFICIENT_PRIVILEGE = "42501"


def convert(e: Exception, path: Path | str) -> StoreError:
    """Map a driver error to the store's error tree, naming the file."""
    if isinstance(e, UnicodeDecodeError):
        return StoreCorrupt(
            f"store {path} is not a usable SQLite database: it holds text "
            f"that is not UTF-8 ({e.reason} at byte {e.start})"
        )
    msg = str(e)
    if getattr(e, "sqlstate", None) == INSUFFICIENT_PRIVILEGE:
        return AccessRefused(f"store {path}: this database role may not do that: {msg}")
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return StoreUnavailable(f"store {path} is locked by another process: {msg}")
    if "readonly" in low or "read-only" in low:
        return StoreUnavailable(f"store {path} is read-only: {msg}")
    if "full" in low:
        return StoreUnavailable(f"store {path}: the disk is full: {msg}")
    if "unable to open" in low:
        if (why := read_only_reason(path)) is not None:
            return StoreUnavailable(f"store {path} is read-only ({why}): {msg}")
        return StoreUnavailable(f"store {path} cannot be opened: {msg}")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return StoreCorrupt(f"store {path} is not a usable SQLite database: {msg}")
    return StoreError(f"store {path}: {msg}")


@dataclass
class Store:
    """An open store: one connection, used by one thread at a time.

    Writes go through :meth:`tx`, which holds an immediate write lock so a
    read-then-write inside it cannot interleave with another writer.
    """

    path: Path
    conn: sqlite3.Connection
    vec_version: str | None
    # "postgresql": ``conn`` is a :class:`.postgresql.Connection`, which speaks the
    # part of sqlite3's connection the callers use; ``label`` is its URL, masked.
    engine: Engine = "sqlite"
    label: str = ""
    pgvector: str | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self.label = self.label or str(self.path)

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed on success, rolled back on any error."""
        with self._lock:
            try:
                for statement in BEGIN_WRITE[self.engine]:
                    self.conn.execute(statement)
            except DriverFailure as e:
                with contextlib.suppress(DriverError):
                    self.conn.execute("ROLLBACK")
                raise convert(e, self.label) from e
            try:
                yield self.conn
            except BaseException as e:
                with contextlib.suppress(DriverError):
                    self.conn.execute("ROLLBACK")
                if isinstance(e, DriverError):
                    raise convert(e, self.label) from e
                if isinstance(e, OverflowError):
                    raise out_of_range(e) from e
                raise
            try:
                self.conn.execute("COMMIT")
            except DriverError as e:
                with contextlib.suppress(DriverError):
                    self.conn.execute("ROLLBACK")
                raise convert(e, self.label) from e

    def query(self, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        """Run a read and return every row, converting driver errors."""
        with self._lock:
            try:
                return list(self.conn.execute(sql, params).fetchall())
            except DriverFailure as e:
                raise convert(e, self.label) from e
            except OverflowError as e:
                raise out_of_range(e) from e

    def close(self) -> None:
        with self._lock, contextlib.suppress(DriverError):
            self.conn.close()


def _connect_readonly(target: str) -> Any:
    """``mode=ro``; on a read-only file system, where SQLite cannot create a WAL
    store's shared-memory file and so cannot open it at all, ``immutable=1`` (nothing
    can write there through this mount: SQLite then takes no locks)."""
    uri = f"file:{target}?mode=ro"
    opts: dict[str, Any] = {"timeout": BUSY_TIMEOUT_MS / 1000, "isolation_level": None}
    conn = driver.connect(uri, uri=True, check_same_thread=False, **opts)
    try:
        conn.execute("PRAGMA schema_version").fetchone()  # SQLite opens the file lazily
    except DriverFailure as e:
        if "unable to open" in str(e) and read_only_reason(target) is not None:
            conn.close()
            return driver.connect(uri + "&immutable=1", uri=True, check_same_thread=False, **opts)
        # Anything else (a damaged file) is met again by the statements that need it.
    return conn


def connect(path: Path | str, *, readonly: bool = False) -> sqlite3.Connection:
    """A raw connection with Sakur4's pragmas; driver errors are converted. A
    ``postgresql://`` URL gives that engine's connection (:mod:`.postgresql`)."""
    target = str(path)
    if target.startswith(("postgresql://", "postgres://")):
        from sakur4.store import postgresql  # imports this module: imported when asked

        return cast(sqlite3.Connection, postgresql.connect(target, readonly=readonly))
    try:
        if readonly:
            conn = _connect_readonly(target)
        else:
            conn = driver.connect(
                target,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        conn.row_factory = driver.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if not readonly and target != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            # Vector scans read every embedding row: mapped pages cut hybrid recall at
            # 10k episodes from 39-199 ms to 26-82 ms (docs/design/memory.md).
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
        return cast(sqlite3.Connection, conn)
    except DriverFailure as e:
        raise convert(e, path) from e


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (SQLite cannot keep a
    store in a directory, a device such as /dev/null, a fifo or a socket)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a fifo" if stat.S_ISFIFO(mode) else "a socket or other special file"
