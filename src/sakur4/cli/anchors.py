"""``sakur4 anchor pin``, ``unpin`` and ``list``: the constraints that survive compaction."""

from __future__ import annotations

from typing import Any

import click

from sakur4.anchors import PinnedAnchor, list_anchors, pin_anchor, unpin_anchor
from sakur4.bounds import ID, PRIORITY
from sakur4.cli.common import (
    bounded,
    current_project,
    emit_json,
    known_project,
    opened,
    reading,
    settings,
    table,
)


@click.group("anchor")
def anchor_group() -> None:
    """Pin, unpin and list the constraints the agent must never lose."""


def _anchor_json(a: PinnedAnchor) -> dict[str, Any]:
    return {
        "id": a.id,
        "session": a.session,
        "priority": a.priority,
        "text": a.text,
        "pinned_at": a.pinned_at,
        "unpinned_at": a.unpinned_at,
    }


@anchor_group.command("pin")
@click.argument("text")
@click.option(
    "--priority", type=bounded(PRIORITY), default=0, show_default=True, help="Higher comes first."
)
@click.option("--session", help="Pin for this session only (default: the whole project).")
@click.pass_context
def anchor_pin(ctx: click.Context, text: str, priority: int, session: str | None) -> None:
    """Pin TEXT as a constraint."""
    s = settings(ctx)
    with opened(s) as store:
        a = pin_anchor(
            store, current_project(store, s).id, text, priority=priority, session=session
        )
    click.echo(f"anchor {a.id} pinned (priority {a.priority})")


@anchor_group.command("unpin")
@click.argument("anchor_id", type=bounded(ID))
@click.pass_context
def anchor_unpin(ctx: click.Context, anchor_id: int) -> None:
    """Unpin anchor ANCHOR_ID."""
    s = settings(ctx)
    with opened(s) as store:
        unpin_anchor(store, current_project(store, s).id, anchor_id)
    click.echo(f"anchor {anchor_id} unpinned")


@anchor_group.command("list")
@click.option("--session", help="Include this session's own anchors.")
@click.option("--all", "include_unpinned", is_flag=True, help="Include unpinned anchors.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def anchor_list(
    ctx: click.Context, session: str | None, include_unpinned: bool, as_json: bool
) -> None:
    """List the anchors in force, highest priority first."""
    s = settings(ctx)
    with reading(s) as store:
        proj = known_project(store, s)
        anchors = (
            list_anchors(store, proj.id, session, include_unpinned=include_unpinned)
            if store and proj
            else []
        )
    if as_json:
        emit_json([_anchor_json(a) for a in anchors])
    elif anchors:
        rows = [{**_anchor_json(a), "session": a.session or "(all)"} for a in anchors]
        cols = ["id", "priority", "session", "text"] + (["unpinned_at"] if include_unpinned else [])
        click.echo(table(rows, cols))
    else:
        click.echo("no anchors pinned")
