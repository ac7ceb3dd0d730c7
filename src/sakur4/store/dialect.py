"""Where the two engines' SQL differs, in one place.

The store's callers write one SQL: SQLite's, with ``?`` placeholders. On PostgreSQL
:func:`to_postgresql` rewrites each statement before it is sent:

- ``?`` becomes ``%s`` (psycopg's placeholder) and a literal ``%`` becomes ``%%``;
- ``INSERT OR IGNORE INTO`` becomes ``INSERT INTO … ON CONFLICT DO NOTHING``;
- SQLite's planner hint ``+column`` (no index for that term) loses its ``+``;
- SQLite's clock expression (:data:`NOW_SQLITE`) becomes PostgreSQL's (:data:`NOW_POSTGRESQL`);
- an ``INSERT`` into a table with an ``id`` gains ``RETURNING id``, so the cursor
  has a ``lastrowid`` as sqlite3's has (:func:`returns_id`).

The schema itself differs more (identity columns, triggers, the full-text index):
each migration's PostgreSQL form is beside it in :mod:`.postgresql_schema`. Catalog
questions (does a table exist) are :func:`table_exists_sql`.
"""

from __future__ import annotations

import re
from typing import Literal

Engine = Literal["sqlite", "postgresql"]

# An ISO-8601 UTC time with milliseconds, as SQLite writes it and every reader parses it.
NOW_SQLITE = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
NOW_POSTGRESQL = (
    "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
)

# Tables without an ``id`` column: an INSERT into them returns nothing.
_NO_ID = frozenset(
    {"episode_dependency", "session_harness", "embedding_change", "project_access", "session_state"}
)

# A write transaction. SQLite: BEGIN IMMEDIATE takes the write lock at once.
# PostgreSQL: every write transaction holds one transaction-scoped advisory lock, so
# writers take turns as SQLite's do and a read-then-write inside a transaction (the
# next seq of a session, "is this fact new") cannot interleave with another
# process's; readers never take it. The key spells "ZKR4".
WRITE_LOCK_KEY = 0x5A4B5234
BEGIN_WRITE: dict[Engine, tuple[str, ...]] = {
    "sqlite": ("BEGIN IMMEDIATE",),
    "postgresql": ("BEGIN", f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})"),
}

_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|%")
_HINT = re.compile(r"(?<=[\s(])\+(?=[A-Za-z_])")
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_INSERT_INTO = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)", re.IGNORECASE)


def _placeholder(m: re.Match[str]) -> str:
    tok = m.group(0)
    if tok == "?":
        return "%s"
    return tok.replace("%", "%%")  # a literal, or a bare '%' (the modulo operator)


def to_postgresql(sql: str) -> str:
    """One statement in the store's SQL, as PostgreSQL (through psycopg) takes it."""
    sql = sql.replace(NOW_SQLITE, NOW_POSTGRESQL)
    sql = _HINT.sub("", sql)
    if _OR_IGNORE.match(sql):
        sql = _OR_IGNORE.sub("INSERT INTO", sql).rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    return _TOKENS.sub(_placeholder, sql)


def returns_id(sql: str) -> str | None:
    """``sql`` with ``RETURNING id`` when it inserts into a table that has an id (the
    new row's id is sqlite3's ``lastrowid``), else None."""
    m = _INSERT_INTO.match(sql)
    if m is None or m.group(1).lower() in _NO_ID or re.search(r"\bRETURNING\b", sql, re.I):
        return None
    return sql.rstrip().rstrip(";") + " RETURNING id"


def table_exists_sql(engine: Engine) -> str:
    """A query with one ``?`` (the table's name) that returns a row when the table exists."""
    if engine == "postgresql":
        return "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?"
    return "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"


def table_names_sql(engine: Engine) -> str:
    """A query returning the name of every table of the store, one a row."""
    if engine == "postgresql":
        return "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    return "SELECT name FROM sqlite_master WHERE type = 'table'"


def column_names_sql(engine: Engine) -> str:
    """A query with one ``?`` (a table's name) returning its column names, one a row."""
    if engine == "postgresql":
        return (
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position"
        )
    return "SELECT name FROM pragma_table_info(?)"


# An episode's words as PostgreSQL's full-text index holds them: a stored column
# (postgresql_schema._M011), parsed once on write, which the index covers and recall's
# ranking reads; never ``to_tsvector(content)`` at query time (a parse of every match).
EPISODE_WORDS = "e.content_tsv"

# One word of the user's, parsed as plain text (no operator in it can be a syntax
# error) and stemmed as the index is.
WORD_QUERY = "plainto_tsquery('english', ?)"
