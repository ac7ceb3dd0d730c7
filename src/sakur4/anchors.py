"""Pinned anchors, as stored: pin, unpin, list — per project, optionally per session.

Rendering belongs to the context engine (:func:`sakur4.engine.render_anchor_block`,
the one renderer); this module only keeps the rows. Unpinning keeps the row with
its ``unpinned_at`` time, so a receipt or a person can still see what was pinned.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from sakur4.errors import InputError, NotFound
from sakur4.store.db import Store

_COLUMNS = "id, project_id, session, text, priority, pinned_at, unpinned_at"


@dataclass(frozen=True)
class PinnedAnchor:
    """A constraint the agent must never lose. Higher ``priority`` comes first.

    ``session`` None means project-wide: it applies to every session.
    """

    id: int
    project_id: int
    session: str | None
    text: str
    priority: int
    pinned_at: str
    unpinned_at: str | None


def _anchor(r: sqlite3.Row) -> PinnedAnchor:
    return PinnedAnchor(
        id=int(r["id"]),
        project_id=int(r["project_id"]),
        session=r["session"],
        text=str(r["text"]),
        priority=int(r["priority"]),
        pinned_at=str(r["pinned_at"]),
        unpinned_at=r["unpinned_at"],
    )


def pin_anchor(
    store: Store, project_id: int, text: str, *, priority: int = 0, session: str | None = None
) -> PinnedAnchor:
    """Pin ``text`` for the project (or only for ``session``) and return the anchor."""
    text = text.strip()
    if not text:
        raise InputError("an anchor needs some text")
    with store.tx() as c:
        cur = c.execute(
            "INSERT INTO anchor (project_id, session, text, priority) VALUES (?, ?, ?, ?)",
            (project_id, session or None, text, priority),
        )
        row = c.execute(f"SELECT {_COLUMNS} FROM anchor WHERE id = ?", (cur.lastrowid,)).fetchone()
    return _anchor(row)


def unpin_anchor(store: Store, project_id: int, anchor_id: int) -> PinnedAnchor:
    """Unpin one of the project's anchors (the row stays, with its unpinning time)."""
    with store.tx() as c:
        row = c.execute(
            f"SELECT {_COLUMNS} FROM anchor WHERE id = ? AND project_id = ?",
            (anchor_id, project_id),
        ).fetchone()
        if row is None:
            raise NotFound(f"no anchor {anchor_id} in this project")
        if row["unpinned_at"] is not None:
            raise InputError(f"anchor {anchor_id} was already unpinned at {row['unpinned_at']}")
        c.execute(
            "UPDATE anchor SET unpinned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
            (anchor_id,),
        )
        row = c.execute(f"SELECT {_COLUMNS} FROM anchor WHERE id = ?", (anchor_id,)).fetchone()
    return _anchor(row)


def list_anchors(
    store: Store, project_id: int, session: str | None = None, *, include_unpinned: bool = False
) -> list[PinnedAnchor]:
    """The anchors in force: project-wide ones plus ``session``'s own, highest priority
    first, then oldest first (the order the engine renders them in)."""
    sql = f"SELECT {_COLUMNS} FROM anchor WHERE project_id = ? AND (session IS NULL"
    params: list[object] = [project_id]
    if session is not None:
        sql += " OR session = ?"
        params.append(session)
    sql += ")"
    if not include_unpinned:
        sql += " AND unpinned_at IS NULL"
    return [_anchor(r) for r in store.query(sql + " ORDER BY priority DESC, id", params)]
