"""The PostgreSQL engine: a psycopg 3 connection that speaks the part of sqlite3's
connection the store's callers use (``execute``, ``executemany``, rows read by index
or by name, ``lastrowid``), with every statement rewritten by :mod:`.dialect`.

Driver errors leave here as the SQLite driver's classes (``db.IntegrityError``,
``db.OperationalError``, ``db.DatabaseError``), so every ``except DriverError`` in
the store and its callers holds for both engines, and :func:`.db.convert` maps them
to the store's errors once.

psycopg is imported only when a PostgreSQL store is opened: the SQLite default does
not pay for it.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sakur4.bounds import INT_MAX, INT_MIN
from sakur4.errors import StoreUnavailable
from sakur4.store import db
from sakur4.store.dialect import Engine, returns_id, to_postgresql

URL_SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_S = 10


def is_url(target: object) -> bool:
    return str(target).startswith(URL_SCHEMES)


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``: what messages and doctor show."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class Row(tuple[Any, ...]):
    """A row read by position or by column name, as ``sqlite3.Row``."""

    _index: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> Any:
    index = {c.name: i for i, c in enumerate(cursor.description or ())}

    def make(values: Sequence[Any]) -> Row:
        row = Row(values)
        row._index = index
        return row

    return make


def _check(params: Any) -> list[Any]:
    """The parameters as SQLite's driver would bind them: a bool is the integer 0 or 1
    (the schema's flags are integers), and an integer past 64 bits is refused with
    OverflowError (which the store reports as out of range), where PostgreSQL would
    compare it as a numeric and match nothing."""
    out = []
    for p in params:
        if isinstance(p, bool):
            p = int(p)
        elif isinstance(p, int) and not INT_MIN <= p <= INT_MAX:
            raise OverflowError("Python int too large to convert to a 64-bit integer")
        out.append(p)
    return out


def _driver_error(e: Exception) -> Exception:
    import psycopg

    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, psycopg.IntegrityError):
        out = db.IntegrityError(msg)
    elif isinstance(e, psycopg.OperationalError | psycopg.ProgrammingError | psycopg.DataError):
        out = db.OperationalError(msg)
    else:
        out = db.DatabaseError(msg)
    # What db.convert tells apart by code: a privilege or a row-level policy refused.
    out.sqlstate = e.sqlstate  # type: ignore[attr-defined]
    return out


class Cursor:
    """What ``execute`` returns: the rows, and the inserted row's id."""

    def __init__(self, rows: list[Row], lastrowid: int | None, rowcount: int) -> None:
        self._rows = rows
        self.lastrowid = lastrowid
        self.rowcount = rowcount

    def fetchone(self) -> Row | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Row]:
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


class Connection:
    """One psycopg connection in autocommit mode: ``Store.tx`` sends BEGIN and COMMIT."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Any = ()) -> Cursor:
        import psycopg

        q = to_postgresql(sql)
        with_id = returns_id(q)
        try:
            cur = self.raw.execute(with_id or q, _check(params))
            rows = cur.fetchall() if cur.description is not None else []
        except psycopg.Error as e:
            raise _driver_error(e) from e
        if with_id is not None:
            return Cursor([], int(rows[0][0]) if rows else None, cur.rowcount)
        return Cursor(rows, None, cur.rowcount)

    def executemany(self, sql: str, seq: Iterable[Any]) -> Cursor:
        import psycopg

        try:
            with self.raw.cursor() as cur:
                cur.executemany(to_postgresql(sql), [_check(p) for p in seq])
                return Cursor([], None, cur.rowcount)
        except psycopg.Error as e:
            raise _driver_error(e) from e

    def run_script(self, script: str) -> None:
        """Several statements, sent as one (no parameters, so nothing is rewritten),
        inside the caller's transaction: a migration's PostgreSQL form."""
        import psycopg

        try:
            self.raw.execute(script)
        except psycopg.Error as e:
            raise _driver_error(e) from e

    def close(self) -> None:
        self.raw.close()


def engine_of(conn: object) -> Engine:
    return "postgresql" if isinstance(conn, Connection) else "sqlite"


class _Numeric:
    """sum() and avg() of integers are NUMERIC in PostgreSQL: read them as SQLite gives
    them (an int when whole, else a float), never as Decimal."""

    @staticmethod
    def load(data: Any) -> int | float:
        d = decimal.Decimal(bytes(data).decode())
        return int(d) if d == d.to_integral_value() else float(d)


def connect(url: str, *, readonly: bool = False) -> Any:
    """Connect to the database ``url`` names; refused with the password masked.
    ``readonly``: the server refuses every write on it, as a ``mode=ro`` file does.
    Typed ``Any``: it stands where a ``sqlite3.Connection`` is expected."""
    try:
        import psycopg
        from psycopg.adapt import Loader
    except ImportError as e:
        raise StoreUnavailable(
            f"store {masked(url)}: PostgreSQL needs psycopg: pip install 'sakur4[postgresql]'"
        ) from e

    class NumericLoader(Loader):
        def load(self, data: Any) -> Any:
            return _Numeric.load(data)

    try:
        raw = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as e:
        why = " ".join(line.strip() for line in str(e).splitlines()) or type(e).__name__
        raise StoreUnavailable(f"store {masked(url)} cannot be reached: {why}") from e
    raw.row_factory = _row_factory
    raw.adapters.register_loader("numeric", NumericLoader)
    conn = Connection(raw)
    if readonly:
        conn.execute("SET default_transaction_read_only = on")
    return conn


def pgvector_version(conn: Any) -> str | None:
    """pgvector's version (installed in this database, else the one the server offers),
    or None when the server has no pgvector."""
    try:
        row = conn.execute(
            "SELECT installed_version, default_version FROM pg_available_extensions "
            "WHERE name = 'vector'"
        ).fetchone()
    except db.DriverError:
        return None
    if row is None:
        return None
    return str(row[0] or row[1])
