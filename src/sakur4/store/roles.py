"""Who may reach which project on a PostgreSQL store (issue 39 item 3).

The database enforces it, not this code: row-level security (migration m009,
``postgresql_schema._M009``) shows a role only the rows of the projects
``project_access`` grants it, and refuses every write of another project's row. The
role that owns the store's tables (it ran the migrations) is its administrator: it
sees every project, registers projects and grants them. A role is granted a project
with ``sakur4 project grant ROOT ROLE``, run as the owner: one row in
``project_access`` and the table privileges a Sakur4 client needs (never a write on
the projects or the grants themselves).

A SQLite store has no roles: a file is one user's, and its permissions are its
access control.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from sakur4.errors import AccessRefused, InputError, NotFound
from sakur4.store.db import Store
from sakur4.store.postgresql import Connection as PgConnection
from sakur4.store.postgresql_schema import LATER_PROJECT_TABLES, PROJECT_TABLES

# What a granted role may do to each table beyond its policies: read the projects and
# its own grants; append Ledger facts (append-only); read and write the rest.
_READ = ("project", "project_access", "schema_migrations", "episode_fts_epoch")
_APPEND = ("symbolic_fact", "backend_probe")
_WRITE = (
    *(t for t in PROJECT_TABLES if t not in _APPEND),
    *LATER_PROJECT_TABLES,
    "episode_dependency",
)


def _ident(name: str) -> str:
    """``name`` quoted as a PostgreSQL identifier (a role name is the user's text)."""
    return '"' + name.replace('"', '""') + '"'


def limited_role(store: Store) -> str | None:
    """The store's role when row-level security limits it to its grants; None on
    SQLite, and for the owner, a member of it, a superuser or a BYPASSRLS role."""
    if store.engine != "postgresql":
        return None
    row = store.query(
        "SELECT current_user, r.rolsuper OR r.rolbypassrls "
        "OR pg_has_role(current_user, c.relowner, 'MEMBER') "
        "FROM pg_roles r, pg_class c "
        "WHERE r.rolname = current_user AND c.oid = 'project'::regclass"
    )[0]
    return None if row[1] else str(row[0])


def not_granted(store: Store, root: Path) -> AccessRefused | None:
    """The refusal for a project root this store's role may not reach (not granted, or
    not registered: the two are not told apart, so a role learns nothing of other
    projects); None when the role is not limited."""
    role = limited_role(store)
    if role is None:
        return None
    return AccessRefused(
        f"project {root} is not granted to role {role} on store {store.label}: the "
        f"store's owner registers and grants it (`sakur4 project add {root}`, "
        f"`sakur4 project grant {root} {role}`)"
    )


def _check_postgresql(store: Store) -> PgConnection:
    if store.engine != "postgresql":
        raise InputError(
            "project grants are for a PostgreSQL store: a SQLite store is one user's "
            "file, and its file permissions are its access control"
        )
    return cast(PgConnection, store.conn)


def _privileges(verb: str, schema: str, role: str) -> str:
    to = "TO" if verb == "GRANT" else "FROM"
    r = _ident(role)
    return (
        f"{verb} USAGE ON SCHEMA {_ident(schema)} {to} {r};\n"
        f"{verb} SELECT ON {', '.join(_READ)} {to} {r};\n"
        f"{verb} SELECT, INSERT ON {', '.join(_APPEND)} {to} {r};\n"
        f"{verb} SELECT, INSERT, UPDATE, DELETE ON {', '.join(_WRITE)} {to} {r};\n"
    )


def grant_project(store: Store, project_id: int, role: str) -> bool:
    """Give ``role`` (an existing PostgreSQL role) the rows of ``project_id``; False
    when it had them already. Run as the store's owner."""
    conn = _check_postgresql(store)
    owner = "(SELECT relowner FROM pg_class WHERE oid = 'project'::regclass)"
    with store.tx() as c:
        row = c.execute(
            f"SELECT rolsuper OR rolbypassrls OR pg_has_role(oid, {owner}, 'MEMBER') "
            "FROM pg_roles WHERE rolname = ?",
            (role,),
        ).fetchone()
        if row is None:
            raise NotFound(
                f"role {role} does not exist on the server: create it first "
                f"(CREATE ROLE {_ident(role)} LOGIN PASSWORD '…')"
            )
        if row[0]:
            raise InputError(
                f"role {role} sees every project whatever it is granted (a superuser, "
                "BYPASSRLS, or the store's owner): grant a role of its own"
            )
        added = c.execute(
            "INSERT INTO project_access (project_id, role_name) VALUES (?, ?) "
            "ON CONFLICT DO NOTHING",
            (project_id, role),
        ).rowcount
        schema = str(c.execute("SELECT current_schema()").fetchone()[0])
        conn.run_script(_privileges("GRANT", schema, role))
    return added > 0


def revoke_project(store: Store, project_id: int, role: str) -> bool:
    """Take ``project_id`` from ``role``; False when it was not granted. A role left
    with no project loses its privileges on the store's tables too."""
    conn = _check_postgresql(store)
    with store.tx() as c:
        removed = c.execute(
            "DELETE FROM project_access WHERE project_id = ? AND role_name = ?",
            (project_id, role),
        ).rowcount
        left = c.execute(
            "SELECT count(*) FROM project_access WHERE role_name = ?", (role,)
        ).fetchone()[0]
        exists = c.execute("SELECT 1 FROM pg_roles WHERE rolname = ?", (role,)).fetchone()
        if not left and exists:
            schema = str(c.execute("SELECT current_schema()").fetchone()[0])
            conn.run_script(_privileges("REVOKE", schema, role))
    return removed > 0
