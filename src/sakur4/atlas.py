"""The Semantic Atlas: model-written summaries, each anchored to a Ledger fact (SPEC §5).

A summary is accepted only if its anchor — project, path, qualified name — is a
current, live fact of the Symbolic Ledger; the fact's id and hash are stored with
it. Every read resolves the anchor again against the Ledger as it is now:

- same hash → the entry as written;
- different hash → ``[STALE]``, with the current signature and hash attached;
- tombstoned or never indexed any more → ``[STALE: removed]``.

So an entry is never quietly wrong: the code it describes is checked each time.
:func:`~sakur4.ledger.facts.anchor_status` is the verdict rule; impact analysis marks
its entries by the same function.
"""

from __future__ import annotations

import posixpath
import sqlite3
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sakur4.errors import AtlasAnchorError, InputError, NotFound, PathOutsideProject
from sakur4.ledger.facts import AnchorStatus, anchor_status, current_fact
from sakur4.store.db import Store
from sakur4.store.projects import Project, resolve_inside

Status = AnchorStatus
LABELS: dict[Status, str] = {"current": "", "stale": "[STALE]", "removed": "[STALE: removed]"}
_COLUMNS = "id, project_id, path, qualified_name, fact_id, anchor_hash, summary, author, created_at"


@dataclass(frozen=True)
class AtlasEntry:
    """A summary as written: anchored to Ledger fact ``fact_id`` whose hash was ``anchor_hash``."""

    id: int
    project_id: int
    path: str
    qualified_name: str
    fact_id: int
    anchor_hash: str
    summary: str
    author: str | None
    created_at: str


@dataclass(frozen=True)
class AtlasReading:
    """An entry checked against the current Ledger. ``label`` is what a reader must see."""

    entry: AtlasEntry
    status: Status
    current_signature: str | None  # set when stale: what the code says now
    current_hash: str | None
    current_fact_id: int | None

    @property
    def label(self) -> str:
        return LABELS[self.status]


def _project(store: Store, project_id: int) -> Project:
    rows = store.query("SELECT id, root, name FROM project WHERE id = ?", (project_id,))
    if not rows:
        raise NotFound(f"no project {project_id}")
    return Project(id=int(rows[0]["id"]), root=Path(rows[0]["root"]), name=str(rows[0]["name"]))


def ledger_path(project: Project, path: str) -> str:
    """``path`` as the Ledger keys it: POSIX, relative to the project root.

    Refuses a path that leads outside the root, lexically or through a symlink.
    """
    resolve_inside(project, path)  # refuses "..", absolute paths elsewhere, symlinks out
    p = Path(path)
    rel = p.relative_to(project.root) if p.is_absolute() else p
    # Lexical, not resolved: the Ledger keys a file by the path it was found at.
    return posixpath.normpath(PurePosixPath(rel).as_posix())


def _entry(r: sqlite3.Row) -> AtlasEntry:
    return AtlasEntry(
        id=int(r["id"]),
        project_id=int(r["project_id"]),
        path=str(r["path"]),
        qualified_name=str(r["qualified_name"]),
        fact_id=int(r["fact_id"]),
        anchor_hash=str(r["anchor_hash"]),
        summary=str(r["summary"]),
        author=r["author"],
        created_at=str(r["created_at"]),
    )


def atlas_write(
    store: Store,
    project_id: int,
    path: str,
    qualified_name: str,
    summary: str,
    author: str | None = None,
) -> AtlasEntry:
    """Store ``summary`` anchored to the current Ledger fact of (path, qualified_name).

    No valid anchor — outside the project, never indexed, or removed — raises
    AtlasAnchorError and stores nothing.
    """
    if not summary.strip():
        raise InputError("an Atlas entry needs a summary")
    project = _project(store, project_id)
    try:
        key = ledger_path(project, path)
    except PathOutsideProject as e:
        raise AtlasAnchorError(f"no valid anchor: {e}") from e
    with store.tx() as c:
        # Read and write in one transaction: the anchor cannot be tombstoned in between.
        fact = current_fact(store, project_id, key, qualified_name)
        if fact is None:
            raise AtlasAnchorError(
                f"no valid anchor: the Ledger has no symbol {qualified_name!r} in {key} "
                f"(index the project first, or check the qualified name)"
            )
        if fact.tombstone:
            raise AtlasAnchorError(
                f"no valid anchor: {qualified_name!r} in {key} was removed from the code "
                f"(tombstoned at {fact.indexed_at})"
            )
        cur = c.execute(
            "INSERT INTO semantic_atlas (project_id, path, qualified_name, fact_id, anchor_hash, "
            "summary, author) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (project_id, key, qualified_name, fact.id, fact.symbol_hash, summary.strip(), author),
        )
        row = c.execute(
            f"SELECT {_COLUMNS} FROM semantic_atlas WHERE id = ?", (cur.lastrowid,)
        ).fetchone()
    return _entry(row)


def _read(store: Store, entry: AtlasEntry) -> AtlasReading:
    fact = current_fact(store, entry.project_id, entry.path, entry.qualified_name)
    status = anchor_status(entry.anchor_hash, fact)
    return AtlasReading(
        entry=entry,
        status=status,
        current_signature=fact.signature if fact and status == "stale" else None,
        current_hash=fact.symbol_hash if fact and status == "stale" else None,
        current_fact_id=fact.id if fact else None,
    )


def atlas_read(
    store: Store,
    project_id: int,
    path: str | None = None,
    qualified_name: str | None = None,
    *,
    history: bool = False,
) -> list[AtlasReading]:
    """The project's Atlas entries (optionally one file's, or one symbol's), each
    resolved against the current Ledger. The newest entry per symbol unless
    ``history``, which returns every entry ever written, newest first."""
    sql = f"SELECT {_COLUMNS} FROM semantic_atlas a WHERE project_id = ?"
    params: list[object] = [project_id]
    if path is not None:
        sql += " AND path = ?"
        params.append(ledger_path(_project(store, project_id), path))
    if qualified_name is not None:
        sql += " AND qualified_name = ?"
        params.append(qualified_name)
    if not history:
        sql += (
            " AND id = (SELECT max(b.id) FROM semantic_atlas b WHERE b.project_id = a.project_id"
            " AND b.path = a.path AND b.qualified_name = a.qualified_name)"
        )
    rows = store.query(sql + " ORDER BY path, qualified_name, id DESC", params)
    return [_read(store, _entry(r)) for r in rows]
