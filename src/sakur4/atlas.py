"""The Semantic Atlas: model-written summaries, each anchored to a Ledger fact (SPEC §5).

A summary is accepted only if its anchor — project, path, qualified name — is a
current, live fact of the Symbolic Ledger; the fact's id and hash are stored with
it. The name is resolved as ``ledger_symbol`` resolves it (:func:`find_symbols`:
qualified, a dotted tail like ``Circle.area``, or bare), within the given file, and
the entry keeps the full qualified name it matched. Every read first brings the
anchored files' facts up to date with the code on disk (a file whose size or mtime
moved since it was indexed is re-indexed, and the indexer compares its hash), then
resolves each anchor again against the Ledger as it is now:

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
from sakur4.ledger.facts import AnchorStatus, anchor_status, current_fact, find_symbols
from sakur4.ledger.index import index_project
from sakur4.store.db import Store
from sakur4.store.projects import Project, resolve_inside
from sakur4.vocabulary import Fact

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
        fact = current_fact(store, project_id, key, qualified_name) or _resolve(
            store, project_id, key, qualified_name
        )
        if fact.tombstone:
            raise AtlasAnchorError(
                f"no valid anchor: {qualified_name!r} in {key} was removed from the code "
                f"(tombstoned at {fact.indexed_at})"
            )
        cur = c.execute(
            "INSERT INTO semantic_atlas (project_id, path, qualified_name, fact_id, anchor_hash, "
            "summary, author) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                project_id,
                key,
                fact.qualified_name,
                fact.id,
                fact.symbol_hash,
                summary.strip(),
                author,
            ),
        )
        row = c.execute(
            f"SELECT {_COLUMNS} FROM semantic_atlas WHERE id = ?", (cur.lastrowid,)
        ).fetchone()
    return _entry(row)


def _resolve(store: Store, project_id: int, key: str, name: str) -> Fact:
    """The one live symbol of file ``key`` that ``name`` means, as ``ledger_symbol``
    resolves names (a dotted tail or a bare name); refused when none or several."""
    found = find_symbols(store, project_id, name)
    here = [f for f in found if f.path == key]
    if len(here) == 1:
        return here[0]
    if here:
        names = ", ".join(f.qualified_name for f in here[:5])
        raise AtlasAnchorError(
            f"no valid anchor: {name!r} in {key} matches {len(here)} symbols ({names}); "
            "give the qualified name"
        )
    where = ""
    if found:
        where = "; the Ledger has it in " + ", ".join(
            f"{f.path} ({f.qualified_name})" for f in found[:5]
        )
    raise AtlasAnchorError(
        f"no valid anchor: the Ledger has no symbol {name!r} in {key}{where} "
        "(index the project first, or check the path and name)"
    )


def _refresh(store: Store, project: Project, paths: set[str]) -> None:
    """Re-index each of ``paths`` whose file changed since the Ledger last read it.

    Size and mtime decide whether to look (a stored mtime of NULL — too recent to
    trust when indexed — always looks); the indexer then compares the content hash,
    so an unchanged file only gets its stat restamped. A file gone is tombstoned.
    """
    known: dict[str, tuple[int, int | None]] = {}
    ordered = sorted(paths)
    for i in range(0, len(ordered), 400):
        chunk = ordered[i : i + 400]
        marks = ",".join("?" * len(chunk))
        for r in store.query(
            f"SELECT path, size, mtime_ns FROM repo_file WHERE project_id = ? "
            f"AND deleted = 0 AND path IN ({marks})",
            (project.id, *chunk),
        ):
            known[str(r[0])] = (int(r[1]), r[2])
    for path in ordered:
        try:
            st = (project.root / path).stat()
            now: tuple[int, int | None] | None = (st.st_size, st.st_mtime_ns)
        except OSError:
            now = None
        if now is not None and known.get(path) == now:
            continue
        if now is None and path not in known:
            continue  # gone, and the Ledger already knows
        try:
            index_project(store, project, path)
        except PathOutsideProject:
            continue  # now a symlink out of the project: the Ledger keeps what it had


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
    """The project's Atlas entries (optionally one file's, or one symbol's: a qualified
    name or a dotted tail of one, as ``ledger_symbol`` takes), each checked against the
    code now. The newest entry per symbol unless ``history``, which returns every entry
    ever written, newest first."""
    project = _project(store, project_id)
    sql = f"SELECT {_COLUMNS} FROM semantic_atlas a WHERE project_id = ?"
    params: list[object] = [project_id]
    if path is not None:
        sql += " AND path = ?"
        params.append(ledger_path(project, path))
    if qualified_name is not None:
        # The last len+1 characters, counted from the start: both engines' substr agree
        # on that (a negative start counts from the end in SQLite only).
        sql += (
            " AND (qualified_name = ? OR "
            "substr(qualified_name, length(qualified_name) - length(?)) = '.' || ?)"
        )
        params += [qualified_name] * 3
    if not history:
        sql += (
            " AND id = (SELECT max(b.id) FROM semantic_atlas b WHERE b.project_id = a.project_id"
            " AND b.path = a.path AND b.qualified_name = a.qualified_name)"
        )
    entries = [
        _entry(r) for r in store.query(sql + " ORDER BY path, qualified_name, id DESC", params)
    ]
    _refresh(store, project, {e.path for e in entries})
    return [_read(store, e) for e in entries]
