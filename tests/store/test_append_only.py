from __future__ import annotations

import pytest

from sakur4.errors import StoreError
from sakur4.store import Store
from sakur4.store.db import IntegrityError
from sakur4.store.projects import Project


def _fact(store: Store, project: Project) -> None:
    with store.tx() as c:
        c.execute(
            "INSERT INTO symbolic_fact (project_id, path, qualified_name, kind, language, "
            "symbol_hash) VALUES (?, 'a.py', 'a.f', 'function', 'python', 'h1')",
            (project.id,),
        )


def test_update_of_a_fact_is_refused_by_the_database(store: Store, project: Project) -> None:
    _fact(store, project)
    with pytest.raises(StoreError, match="append-only"), store.tx() as c:
        c.execute("UPDATE symbolic_fact SET symbol_hash = 'forged'")
    assert store.query("SELECT symbol_hash FROM symbolic_fact")[0][0] == "h1"


def test_delete_of_a_fact_is_refused_by_the_database(store: Store, project: Project) -> None:
    _fact(store, project)
    with pytest.raises(StoreError, match="append-only"), store.tx() as c:
        c.execute("DELETE FROM symbolic_fact")
    assert store.query("SELECT count(*) FROM symbolic_fact")[0][0] == 1


def test_raw_connection_cannot_bypass_the_triggers(store: Store, project: Project) -> None:
    # Not through Sakur4's code at all: the guard is in the schema.
    _fact(store, project)
    with pytest.raises(IntegrityError):
        store.conn.execute("UPDATE symbolic_fact SET kind = 'class'")
