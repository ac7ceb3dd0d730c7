"""Opening a store: the file checks, the connection, and the schema brought up to date.

Kept apart from :mod:`.db` (the connection) so that :mod:`.migrations`, which runs on
a connection, and the opening, which runs the migrations, import in one direction.
"""

from __future__ import annotations

from pathlib import Path

from sakur4.errors import StoreUnavailable
from sakur4.store import postgresql
from sakur4.store.db import Store, connect, load_vec, not_a_file
from sakur4.store.migrations import apply_migrations, check_current


def _open_postgresql(url: str, *, readonly: bool) -> Store:
    conn = postgresql.connect(url, readonly=readonly)
    label = postgresql.masked(url)
    return Store(
        path=Path(label),
        conn=conn,
        vec_version=None,
        engine="postgresql",
        label=label,
        pgvector=postgresql.pgvector_version(conn),
    )


def open_store(path: Path | str, *, migrate: bool = True, readonly: bool = False) -> Store:
    """Open (creating if needed) the store at ``path`` and bring its schema up to date.

    ``path`` is a SQLite file, or a ``postgresql://`` URL naming a database (which
    must exist; its schema is made on first open, as a file's is).

    ``readonly``: for commands that only read. The store must exist; it is opened
    ``mode=ro`` (so it works on a read-only mount), never created or migrated, and
    refused if its schema is not this version's (a write command migrates it).
    """
    if postgresql.is_url(path):
        store = _open_postgresql(str(path), readonly=readonly)
        return _bring_up(store, migrate=migrate, readonly=readonly)
    p = Path(path)
    if str(path) != ":memory:":
        if (what := not_a_file(p)) is not None:
            raise StoreUnavailable(f"store {p} is {what}, not a regular file")
        if readonly and not p.exists():
            raise StoreUnavailable(f"store {p} does not exist (nothing is recorded yet)")
        if not readonly:
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreUnavailable(f"store {p}: cannot create its directory: {e}") from e
    conn = connect(path, readonly=readonly)
    store = Store(path=p, conn=conn, vec_version=load_vec(conn))
    return _bring_up(store, migrate=migrate, readonly=readonly)


def _bring_up(store: Store, *, migrate: bool, readonly: bool) -> Store:
    try:
        if readonly:
            check_current(store)
        elif migrate:
            apply_migrations(store)
    except BaseException:
        store.close()
        raise
    return store
