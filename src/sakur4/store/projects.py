"""Projects: every row in the store belongs to one (SPEC §3).

A project root must be a project. A directory is registered implicitly — by a
command run inside it, the MCP server's configured root, a tool call or a gateway
header naming it — only when it is not one of these (:func:`not_a_project`):

- the file-system root;
- the home directory, or a directory that contains it (``/home``, ``/Users``);
- a system directory: one of :data:`SYSTEM_DIRS` itself (``/usr``, ``/var``,
  ``/tmp``, ``/opt``…), or anything inside the operating system's own trees,
  :data:`SYSTEM_TREES` (``/etc``, ``/proc``, ``/usr``…).

Such a root is refused with a one-line error; ``sakur4 project add PATH``
registers it anyway (explicit), after which every surface may use it. Found by
issue 15: an MCP ``ledger_index {"project": "/"}`` indexed the whole disk.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sakur4.errors import AccessRefused, InputError, NotFound, PathOutsideProject
from sakur4.store.db import Store
from sakur4.store.roles import not_granted


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
    try:
        with store.tx() as c:
            c.execute(
                "INSERT INTO project (root, name) VALUES (?, ?) ON CONFLICT (root) DO NOTHING",
                (str(root), name or root.name),
            )
            row = c.execute(
                "SELECT id, root, name FROM project WHERE root = ?", (str(root),)
            ).fetchone()
    except AccessRefused as e:
        # A role limited to its grants registers nothing (PostgreSQL, store.roles): said
        # as "not granted", whether or not another project has this root.
        raise (not_granted(store, root) or e) from e
    return _row(row)


# The directories themselves: a project may live under /srv, /opt, /tmp or /var/www.
SYSTEM_DIRS = frozenset(
    {
        *("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/media"),
        *("/home", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys"),
        *("/tmp", "/usr", "/usr/local", "/var", "/var/tmp"),  # noqa: S108 - named to refuse
        # macOS
        *("/Applications", "/Library", "/System", "/Users", "/Volumes", "/private"),
        *("/private/tmp", "/private/var"),
    }
)
# Everything inside: the operating system's own files, never a project's.
SYSTEM_TREES = frozenset(
    {"/bin", "/boot", "/dev", "/etc", "/proc", "/run", "/sbin", "/sys", "/System", "/usr"}
    | {"/lib", "/lib32", "/lib64", "/libx32"}
)


def not_a_project(root: Path) -> str | None:
    """Why ``root`` (resolved) cannot be registered implicitly, or None if it can."""
    if root.parent == root:
        return "it is the root of the file system"
    if root.as_posix() in SYSTEM_DIRS:
        return "it is a system directory"
    if any(parent.as_posix() in SYSTEM_TREES for parent in root.parents):
        return "it is inside a system directory"
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no HOME and no password entry: nothing to compare
        return None
    if root == home:
        return "it is the home directory"
    if root in home.parents:
        return f"it contains the home directory {home}"
    return None


def register_project(store: Store, root: Path) -> Project:
    """Register ``root`` implicitly (not through ``sakur4 project add``): refused when
    it is not a project root (see the module docstring)."""
    root = root.resolve()
    why = not_a_project(root)
    if why is not None:
        raise InputError(
            f"refusing to use {root} as a project root: {why}; work inside a project, "
            f"or register it explicitly with `sakur4 project add {root}`"
        )
    return add_project(store, root)


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
    """The project containing ``root``, registering ``root`` itself when none does
    (and when it may be a project root: :func:`register_project`)."""
    return find_project(store, root) or register_project(store, root)


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
