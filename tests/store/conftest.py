"""The store's tests run on both engines: every test that takes ``store``, ``project``,
``store_target`` or ``new_target`` runs once on SQLite (a file) and once on a real
PostgreSQL (a fresh schema, :mod:`fixtures_postgresql`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fixtures_postgresql import PostgresServer, postgresql_server
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, add_project

__all__ = ["postgresql_server"]

ENGINES = ("sqlite", "postgresql")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_target(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], str]:
    """Makes a fresh, empty store location each call: a file, or a schema."""
    if engine == "sqlite":
        names = iter(range(1, 1000))
        return lambda: str(tmp_path / "store" / f"sakur4-{next(names)}.db")
    server: PostgresServer = request.getfixturevalue("postgresql_server")
    return server.new_schema_url


@pytest.fixture
def store_target(new_target: Callable[[], str]) -> str:
    return new_target()


@pytest.fixture
def store(store_target: str) -> Iterator[Store]:
    s = open_store(store_target)
    yield s
    s.close()


@pytest.fixture
def project(store: Store, project_dir: Path) -> Project:
    return add_project(store, project_dir)
