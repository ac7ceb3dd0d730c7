"""What only the PostgreSQL engine has to show: the URL's password kept out of every
message, doctor's lines for it, the dialect's rewriting, read-only opens, and the
append-only facts guarded against TRUNCATE too (issue 39)."""

from __future__ import annotations

import json

import pytest

from fixtures_postgresql import PostgresServer
from sakur4.doctor import diagnose
from sakur4.errors import StoreError, StoreUnavailable
from sakur4.store import open_store
from sakur4.store.dialect import returns_id, to_postgresql
from sakur4.store.postgresql import masked

SECRET = "hunter2-not-shown"


def _with_password(url: str) -> str:
    return url.replace("postgresql://sakur4@", f"postgresql://sakur4:{SECRET}@")


def test_the_dialect_rewrites_only_what_differs() -> None:
    assert to_postgresql("SELECT a FROM t WHERE b = ? AND c = '?%' AND d % 2 = 1") == (
        "SELECT a FROM t WHERE b = %s AND c = '?%%' AND d %% 2 = 1"
    )
    assert to_postgresql("INSERT OR IGNORE INTO d (a, b) VALUES (?, ?)") == (
        "INSERT INTO d (a, b) VALUES (%s, %s) ON CONFLICT DO NOTHING"
    )
    assert to_postgresql("SELECT 1 FROM e WHERE +project_id = ? AND n = n + 1") == (
        "SELECT 1 FROM e WHERE project_id = %s AND n = n + 1"
    )
    assert "clock_timestamp()" in to_postgresql(
        "UPDATE anchor SET unpinned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    )
    assert returns_id("INSERT INTO anchor (x) VALUES (%s)") == (
        "INSERT INTO anchor (x) VALUES (%s) RETURNING id"
    )
    assert returns_id("INSERT INTO episode_dependency (a, b) VALUES (%s, %s)") is None


def test_the_password_is_masked_everywhere() -> None:
    url = f"postgresql://me:{SECRET}@db.example:5432/s?password={SECRET}&sslmode=require"
    assert SECRET not in masked(url)
    assert masked(url).startswith("postgresql://me:***@db.example:5432/s?")


def test_an_unreachable_server_is_one_clear_line_without_the_password(
    postgresql_server: PostgresServer,
) -> None:
    url = f"postgresql://sakur4:{SECRET}@/postgres?host={postgresql_server.dir}&port=1"
    with pytest.raises(StoreUnavailable, match="cannot be reached") as caught:
        open_store(url)
    assert SECRET not in str(caught.value)
    report = diagnose(store=url).as_dict()  # doctor never fails
    assert SECRET not in json.dumps(report)
    [store_line] = [c for c in report["checks"] if c["name"] == "store"]
    assert store_line["level"] == "fail"
    assert "cannot be reached" in store_line["detail"]


def test_doctor_names_the_engine_and_how_recall_searches_vectors(
    postgresql_server: PostgresServer,
) -> None:
    url = _with_password(postgresql_server.new_schema_url())
    open_store(url).close()
    report = diagnose(store=url).as_dict()
    assert SECRET not in json.dumps(report)
    lines = {c["name"]: c for c in report["checks"]}
    assert lines["store"]["level"] == "ok"
    assert lines["store"]["detail"].startswith("PostgreSQL 15")
    assert lines["schema"]["detail"].endswith("(current)")
    assert lines["projects"]["level"] == "ok"
    # Debian 12's PostgreSQL has no pgvector: the fallback is named.
    assert "no pgvector" in lines["store vectors"]["detail"]
    assert "vectors held in memory" in lines["store vectors"]["detail"]


def test_a_read_only_open_refuses_writes(postgresql_server: PostgresServer) -> None:
    url = postgresql_server.new_schema_url()
    open_store(url).close()
    s = open_store(url, readonly=True)
    try:
        with pytest.raises(StoreError, match="read-only"), s.tx() as c:
            c.execute("INSERT INTO project (root, name) VALUES ('/p', 'p')")
        assert s.query("SELECT count(*) FROM project")[0][0] == 0
    finally:
        s.close()


def test_facts_cannot_be_truncated(postgresql_server: PostgresServer) -> None:
    """PostgreSQL has TRUNCATE, which no row trigger sees: a statement trigger refuses it."""
    s = open_store(postgresql_server.new_schema_url())
    try:
        with s.tx() as c:
            c.execute("INSERT INTO project (root, name) VALUES ('/p', 'p')")
            c.execute(
                "INSERT INTO symbolic_fact (project_id, path, qualified_name, kind, language) "
                "VALUES (1, 'a.py', 'a.f', 'function', 'python')"
            )
        with pytest.raises(StoreError, match="append-only"), s.tx() as c:
            c.execute("TRUNCATE symbolic_fact CASCADE")
        assert s.query("SELECT count(*) FROM symbolic_fact")[0][0] == 1
    finally:
        s.close()
