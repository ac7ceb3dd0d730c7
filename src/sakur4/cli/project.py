"""``sakur4 project`` and ``sakur4 status``."""

from __future__ import annotations

from pathlib import Path

import click

from sakur4.cli.common import emit_json, known_project, opened, reading, settings, table
from sakur4.status import empty_status, project_status
from sakur4.store.projects import add_project, list_projects


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
