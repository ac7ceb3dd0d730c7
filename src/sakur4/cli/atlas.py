"""``sakur4 atlas write`` and ``read``: summaries anchored to Ledger symbols."""

from __future__ import annotations

from typing import Any

import click

from sakur4.atlas import AtlasReading, atlas_read, atlas_write
from sakur4.cli.common import current_project, emit_json, opened, settings


@click.group("atlas")
def atlas_group() -> None:
    """Summaries anchored to Ledger symbols, checked against the code on every read."""


def _reading_json(r: AtlasReading) -> dict[str, Any]:
    return {
        "id": r.entry.id,
        "path": r.entry.path,
        "qualified_name": r.entry.qualified_name,
        "status": r.status,
        "label": r.label,
        "summary": r.entry.summary,
        "author": r.entry.author,
        "written_at": r.entry.created_at,
        "anchor_hash": r.entry.anchor_hash,
        "current_hash": r.current_hash,
        "current_signature": r.current_signature,
    }


@atlas_group.command("write")
@click.argument("path")
@click.argument("qualified_name")
@click.argument("summary")
@click.option("--author", help="Who wrote the summary (a model name, a person).")
@click.pass_context
def atlas_write_cmd(
    ctx: click.Context, path: str, qualified_name: str, summary: str, author: str | None
) -> None:
    """Store SUMMARY about symbol QUALIFIED_NAME in PATH (relative to the project root).

    The symbol must be in the Ledger (`sakur4 index`): the summary is anchored to its
    current fact and comes back [STALE] once the code changes."""
    s = settings(ctx)
    with opened(s) as store:
        e = atlas_write(store, current_project(store, s).id, path, qualified_name, summary, author)
    click.echo(f"atlas entry {e.id} anchored to {e.path}:{e.qualified_name} ({e.anchor_hash[:12]})")


@atlas_group.command("read")
@click.argument("path", required=False)
@click.argument("qualified_name", required=False)
@click.option("--history", is_flag=True, help="Every entry ever written, not only the newest.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def atlas_read_cmd(
    ctx: click.Context, path: str | None, qualified_name: str | None, history: bool, as_json: bool
) -> None:
    """Read Atlas entries (all, a file's, or a symbol's), each checked for staleness."""
    s = settings(ctx)
    with opened(s) as store:
        pid = current_project(store, s).id
        readings = atlas_read(store, pid, path, qualified_name, history=history)
    if as_json:
        emit_json([_reading_json(r) for r in readings])
        return
    if not readings:
        click.echo("no atlas entries")
        return
    for r in readings:
        label = f"{r.label} " if r.label else ""
        click.echo(f"{label}{r.entry.path}:{r.entry.qualified_name} (entry {r.entry.id})")
        click.echo(f"  {r.entry.summary}")
        if r.status == "stale":
            click.echo(f"  current: {r.current_signature}  [{(r.current_hash or '')[:12]}]")
