from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sakur4.errors import StoreNewerSchema
from sakur4.store import open_store
from sakur4.store.migrations import MIGRATIONS, applied_names, apply_migrations

EXPECTED = Path(__file__).with_name("expected_schema.sql")


def dump_schema(conn: sqlite3.Connection) -> str:
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
        "AND name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()
    return "\n".join(f"-- {t} {n}\n{' '.join(sql.split())};" for t, n, sql in rows) + "\n"


def test_empty_store_migrates_to_expected_schema(store_path: Path) -> None:
    s = open_store(store_path)
    try:
        got = dump_schema(s.conn)
        assert got == EXPECTED.read_text(), "schema drifted: add a migration, never edit one"
        assert applied_names(s.conn) == [m.name for m in MIGRATIONS]
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    finally:
        s.close()


def test_oldest_schema_migrates_to_the_same_schema(tmp_path: Path) -> None:
    old = open_store(tmp_path / "old.db", migrate=False)
    apply_migrations(old, upto=1)
    old.close()
    fresh = open_store(tmp_path / "fresh.db")
    upgraded = open_store(tmp_path / "old.db")
    try:
        assert dump_schema(upgraded.conn) == dump_schema(fresh.conn)
    finally:
        fresh.close()
        upgraded.close()


def test_episodes_from_before_projects_stay_unattributed(tmp_path: Path) -> None:
    old = open_store(tmp_path / "s.db", migrate=False)
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
    s = open_store(tmp_path / "s.db")
    try:
        rows = s.query("SELECT project_id, content FROM episodic_stream ORDER BY seq")
        assert [r["content"] for r in rows] == ["note 0", "note 1", "note 2"]
        # Not backfilled by guess, even though exactly one project exists.
        assert [r["project_id"] for r in rows] == [None, None, None]
    finally:
        s.close()


def test_migration_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sakur4.store import migrations

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        conn.execute("THIS IS NOT SQL")

    monkeypatch.setattr(
        migrations, "MIGRATIONS", [*MIGRATIONS, migrations.Migration("m999_broken", broken)]
    )
    with pytest.raises(Exception, match="syntax error"):
        open_store(tmp_path / "s.db")
    s = open_store(tmp_path / "s.db", migrate=False)
    try:
        names = {r[0] for r in s.query("SELECT name FROM sqlite_master")}
        assert "half_done" not in names
        assert applied_names(s.conn) == [m.name for m in MIGRATIONS]
    finally:
        s.close()


def test_store_from_a_newer_schema_is_refused(store_path: Path) -> None:
    s = open_store(store_path)
    with s.tx() as c:
        c.execute("INSERT INTO schema_migrations (name) VALUES ('m900_from_the_future')")
    s.close()
    with pytest.raises(StoreNewerSchema, match="newer"):
        open_store(store_path)


def test_pragmas(store_path: Path) -> None:
    s = open_store(store_path)
    try:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    finally:
        s.close()
