"""``sakur4 project`` and ``sakur4 status``."""

from __future__ import annotations

from pathlib import Path

import click

from sakur4.cli.common import emit_json, known_project, opened, reading, settings, table
from sakur4.errors import NotFound
from sakur4.status import empty_status, project_status
from sakur4.store import Store
from sakur4.store.projects import Project, add_project, find_project, list_projects
from sakur4.store.roles import grant_project, revoke_project


@click.group("project")
def project_group() -> None:
    """Register and list projects in the store."""


@project_group.command("add")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--name", help="Display name (default: the directory name).")
@click.pass_context
def project_add(ctx: click.Context, path: str, name: str | None) -> None:
    """Register PATH as a project."""
    s = settings(ctx)
    with opened(s) as store:
        p = add_project(store, Path(path), name)
    click.echo(f"project {p.id}: {p.name} at {p.root}")


def _registered(store: Store, path: str) -> Project:
    root = Path(path).resolve()
    p = find_project(store, root)
    if p is None or p.root != root:
        raise NotFound(f"{root} is not a registered project root: `sakur4 project add {root}`")
    return p


@project_group.command("grant")
@click.argument("path", type=click.Path(file_okay=False))
@click.argument("role")
@click.pass_context
def project_grant(ctx: click.Context, path: str, role: str) -> None:
    """Let the PostgreSQL role ROLE reach the project at PATH, and no other project.

    Run as the store's owner; ROLE must exist (CREATE ROLE ... LOGIN). The server
    enforces it by row-level security; a SQLite store has no roles."""
    s = settings(ctx)
    with opened(s) as store:
        p = _registered(store, path)
        added = grant_project(store, p.id, role)
    click.echo(f"role {role} {'may now reach' if added else 'already reaches'} project {p.root}")


@project_group.command("revoke")
@click.argument("path", type=click.Path(file_okay=False))
@click.argument("role")
@click.pass_context
def project_revoke(ctx: click.Context, path: str, role: str) -> None:
    """Take the project at PATH from the PostgreSQL role ROLE."""
    s = settings(ctx)
    with opened(s) as store:
        p = _registered(store, path)
        removed = revoke_project(store, p.id, role)
    click.echo(f"role {role} {'no longer reaches' if removed else 'was not granted'} {p.root}")


@project_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def project_list(ctx: click.Context, as_json: bool) -> None:
    """List the projects in the store."""
    s = settings(ctx)
    with reading(s) as store:
        projects = list_projects(store) if store is not None else []
        rows = [{"id": p.id, "name": p.name, "root": str(p.root)} for p in projects]
    if as_json:
        emit_json(rows)
    elif rows:
        click.echo(table(rows, ["id", "name", "root"]))
    else:
        click.echo("no projects yet: `sakur4 project add PATH`")


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Counts for the current project: files, facts, Atlas entries, episodes, anchors, receipts."""
    s = settings(ctx)
    with reading(s) as store:
        proj = known_project(store, s)
        counts = project_status(store, proj.id) if store and proj else empty_status()
    root = proj.root if proj else s.project_root()
    name = proj.name if proj else root.name
    if as_json:
        info = {"id": proj.id if proj else None, "name": name, "root": str(root)}
        emit_json({"project": info, **counts})
        return
    if proj is None:
        where = "" if store is not None else f" (no store at {s.store})"
        click.echo(f"project {name} ({root}): nothing recorded yet{where}")
    else:
        click.echo(f"project {name} ({root})")
    for k, v in counts.items():
        click.echo(f"  {k:<16} {v}")
