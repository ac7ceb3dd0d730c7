"""The store's tests run on both engines (fixtures_postgresql): SQLite, and a real
PostgreSQL started once per test session."""

from __future__ import annotations

from fixtures_postgresql import (
    engine,
    new_target,
    parametrize_engines,
    postgresql_server,
    project,
    store,
    store_target,
)

__all__ = ["engine", "new_target", "postgresql_server", "project", "store", "store_target"]

pytest_generate_tests = parametrize_engines
