from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from fixtures_postgresql import PostgresServer
from sakur4.errors import StoreNewerSchema
from sakur4.store import Store, open_store
from sakur4.store.migrations import MIGRATIONS, applied_names, apply_migrations
from sakur4.store.postgresql_schema import POSTGRESQL

EXPECTED = Path(__file__).with_name("expected_schema.sql")
# FTS5's index and its shadow tables: SQLite's alone (postgresql_schema's docstring).
SQLITE_ONLY = ("episode_fts",)
# Who may reach which project: row-level security is PostgreSQL's alone (m009).
POSTGRESQL_ONLY = ("project_access",)
# The words PostgreSQL's full-text index covers, stored (m011): FTS5 holds its own.
POSTGRESQL_ONLY_COLUMNS = {("episodic_stream", "content_tsv")}


def dump_schema(conn: sqlite3.Connection) -> str:
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
        "AND name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()
    return "\n".join(f"-- {t} {n}\n{' '.join(sql.split())};" for t, n, sql in rows) + "\n"


def dump_postgresql(store: Store) -> str:
    """Columns, indexes, constraints and triggers of the store's schema, as text."""
    parts = [
        "SELECT table_name, column_name, data_type, is_nullable, column_default, "
        "generation_expression FROM information_schema.columns "
        "WHERE table_schema = current_schema() ORDER BY table_name, column_name",
        "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "ORDER BY indexname",
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = current_schema()::regnamespace ORDER BY conname",
        "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
        "JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT tgisinternal "
        "AND c.relnamespace = current_schema()::regnamespace ORDER BY tgname",
    ]
    rows = [tuple(r) for sql in parts for r in store.query(sql)]
    # A schema's own name appears in its definitions: it differs between two stores.
    schema = store.query("SELECT current_schema()")[0][0]
    return "\n".join(repr(r) for r in rows).replace(f"{schema}.", "")


def dump(store: Store) -> str:
    return dump_postgresql(store) if store.engine == "postgresql" else dump_schema(store.conn)


def columns(store: Store) -> dict[str, list[str]]:
    """Each table's column names, on either engine."""
    if store.engine == "postgresql":
        rows = store.query(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
        )
    else:
        rows = store.query(
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_xinfo(m.name) p "
            "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND p.hidden != 1 "
            "ORDER BY m.name, p.cid"
        )
    out: dict[str, list[str]] = {}
    for table, column in rows:
        if str(table).startswith(SQLITE_ONLY + POSTGRESQL_ONLY):
            continue
        if (str(table), str(column)) not in POSTGRESQL_ONLY_COLUMNS:
            out.setdefault(str(table), []).append(str(column))
    return out


@pytest.mark.parametrize("engine", ["sqlite"])
def test_empty_store_migrates_to_expected_schema(store_target: str) -> None:
    s = open_store(store_target)
    try:
        got = dump_schema(s.conn)
        assert got == EXPECTED.read_text(), "schema drifted: add a migration, never edit one"
        assert applied_names(s.conn) == [m.name for m in MIGRATIONS]
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    finally:
        s.close()


def test_both_engines_have_every_migration_and_the_same_columns(
    tmp_path: Path, postgresql_server: PostgresServer
) -> None:
    """Every migration has a PostgreSQL form, and the two histories end with the same
    tables and the same columns in the same order (SQLite's FTS5 index aside)."""
    assert list(POSTGRESQL) == [m.name for m in MIGRATIONS]
    lite = open_store(tmp_path / "s.db")
    pg = open_store(postgresql_server.new_schema_url())
    try:
        assert applied_names(pg.conn) == applied_names(lite.conn)
        assert columns(pg) == columns(lite)
    finally:
        lite.close()
        pg.close()


def test_oldest_schema_migrates_to_the_same_schema(new_target: Callable[[], str]) -> None:
    old_target, fresh_target = new_target(), new_target()
    old = open_store(old_target, migrate=False)
    apply_migrations(old, upto=1)
    old.close()
    fresh = open_store(fresh_target)
    upgraded = open_store(old_target)
    try:
        assert dump(upgraded) == dump(fresh)
    finally:
        fresh.close()
        upgraded.close()


def test_episodes_from_before_projects_stay_unattributed(store_target: str) -> None:
    old = open_store(store_target, migrate=False)
    apply_migrations(old, upto=1)
    with old.tx() as c:
        c.execute("INSERT INTO project (root, name) VALUES ('/p', 'p')")
        for i in range(3):
            c.execute(
                "INSERT INTO episodic_stream (session, turn, seq, role, kind, content, "
                "content_hash, tokens) VALUES ('s', 1, ?, 'user', 'message', ?, 'h', 3)",
                (i, f"note {i}"),
            )
    old.close()
    s = open_store(store_target)
    try:
        rows = s.query("SELECT project_id, content FROM episodic_stream ORDER BY seq")
        assert [r["content"] for r in rows] == ["note 0", "note 1", "note 2"]
        # Not backfilled by guess, even though exactly one project exists.
        assert [r["project_id"] for r in rows] == [None, None, None]
    finally:
        s.close()


def test_migration_is_one_transaction(store_target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sakur4.store import migrations

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        conn.execute("SELECT 1 / 0 FROM no_such_table")

    monkeypatch.setattr(
        migrations, "MIGRATIONS", [*MIGRATIONS, migrations.Migration("m999_broken", broken)]
    )
    # The same steps on PostgreSQL: the table is made, then the next statement fails.
    broken_pg = "CREATE TABLE half_done (x int); SELECT 1 / 0 FROM no_such_table;"
    monkeypatch.setitem(migrations.POSTGRESQL, "m999_broken", broken_pg)
    with pytest.raises(Exception, match="no_such_table"):
        open_store(store_target)
    s = open_store(store_target, migrate=False)
    try:
        assert not s.query(migrations.table_exists_sql(s.engine), ("half_done",))
        assert applied_names(s.conn) == [m.name for m in MIGRATIONS]
    finally:
        s.close()


def test_store_from_a_newer_schema_is_refused(store_target: str) -> None:
    s = open_store(store_target)
    with s.tx() as c:
        c.execute("INSERT INTO schema_migrations (name) VALUES ('m900_from_the_future')")
    s.close()
    with pytest.raises(StoreNewerSchema, match="newer"):
        open_store(store_target)


@pytest.mark.parametrize("engine", ["sqlite"])
def test_pragmas(store_target: str) -> None:
    s = open_store(store_target)
    try:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    finally:
        s.close()
