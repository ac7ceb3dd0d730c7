"""``sakur4 receipts``: what the context engine did each turn, and what the server confirmed."""

from __future__ import annotations

import click

from sakur4.bounds import RECEIPTS_LIMIT
from sakur4.cli.common import bounded, emit_json, known_project, reading, settings, table
from sakur4.receipts import RECEIPT_COLUMNS, list_receipts, receipt_row, resolve_session


@click.command("receipts")
@click.option(
    "--session", help="Only this session: its name, or any part of it the table shows (a prefix)."
)
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
    """Per-turn receipts of the current project: tokens of window, verdict, cut, cache reuse.

    The cache column says what became of each turn: reused or full-re-prefill (the
    server's own figures), unverifiable (it did not say: counted as a full re-prefill),
    refused, failed (the answer never completed) or in flight.
    """
    s = settings(ctx)
    with reading(s) as store:
        proj = known_project(store, s)
        rows = []
        if store and proj:
            if session is not None:
                session = resolve_session(store, proj.id, session)
            rows = list_receipts(store, proj.id, session=session, limit=limit)
    if as_json:
        emit_json([r.as_dict() for r in rows])
    elif rows:
        click.echo(table([receipt_row(r) for r in rows], RECEIPT_COLUMNS))
    else:
        click.echo("no receipts yet: point your agent at `sakur4 gateway`")
