"""Projects: every row in the store belongs to one (SPEC §3)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sakur4.errors import NotFound, PathOutsideProject
from sakur4.store.db import Store


@dataclass(frozen=True)
class Project:
    id: int
    root: Path
    name: str


def _row(r: sqlite3.Row) -> Project:
    return Project(id=int(r["id"]), root=Path(r["root"]), name=str(r["name"]))


def add_project(store: Store, root: Path, name: str | None = None) -> Project:
    """Register ``root`` (resolved) as a project, or return it if already known."""
    root = root.resolve()
    if not root.is_dir():
        raise NotFound(f"project root {root} is not a directory")
    with store.tx() as c:
        c.execute(
            "INSERT INTO project (root, name) VALUES (?, ?) ON CONFLICT (root) DO NOTHING",
            (str(root), name or root.name),
        )
        row = c.execute(
            "SELECT id, root, name FROM project WHERE root = ?", (str(root),)
        ).fetchone()
    return _row(row)


def find_project(store: Store, root: Path) -> Project | None:
    """The project whose root is ``root`` or the nearest registered ancestor of it."""
    root = root.resolve()
    rows = store.query("SELECT id, root, name FROM project")
    best = None
    for r in rows:
        p = Path(r["root"])
        if (root == p or p in root.parents) and (
            best is None or len(p.parts) > len(best.root.parts)
        ):
            best = _row(r)
    return best


def ensure_project(store: Store, root: Path) -> Project:
    """The project containing ``root``, registering ``root`` itself when none does."""
    return find_project(store, root) or add_project(store, root)


def list_projects(store: Store) -> list[Project]:
    return [_row(r) for r in store.query("SELECT id, root, name FROM project ORDER BY id")]


def resolve_inside(project: Project, path: str | Path) -> Path:
    """Resolve ``path`` (relative to the project root, or absolute) and refuse it if it,
    or any symlink on the way, leads outside the project root."""
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = project.root / candidate
    resolved = candidate.resolve()
    root = project.root.resolve()
    if resolved != root and root not in resolved.parents:
        raise PathOutsideProject(f"{path} is outside the project root {root}")
    return resolved
