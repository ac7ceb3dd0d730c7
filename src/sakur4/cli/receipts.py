"""``sakur4 receipts``: what the context engine did each turn, and what the server confirmed."""

from __future__ import annotations

import click

from sakur4.bounds import RECEIPTS_LIMIT
from sakur4.cli.common import bounded, emit_json, known_project, reading, settings, table
from sakur4.receipts import RECEIPT_COLUMNS, list_receipts, receipt_row


@click.command("receipts")
@click.option("--session", help="Only this session.")
@click.option(
    "--limit",
    type=bounded(RECEIPTS_LIMIT),
    default=50,
    show_default=True,
    help="How many recent receipts.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def receipts(ctx: click.Context, session: str | None, limit: int, as_json: bool) -> None:
    """Per-turn receipts of the current project: tokens of window, verdict, cut, cache reuse."""
    s = settings(ctx)
    with reading(s) as store:
        proj = known_project(store, s)
        rows = list_receipts(store, proj.id, session=session, limit=limit) if store and proj else []
    if as_json:
        emit_json([r.as_dict() for r in rows])
    elif rows:
        click.echo(table([receipt_row(r) for r in rows], RECEIPT_COLUMNS))
    else:
        click.echo("no receipts yet: point your agent at `sakur4 gateway`")
