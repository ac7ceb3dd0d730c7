"""``sakur4 receipts``: what the context engine did each turn, and what the server confirmed."""

from __future__ import annotations

import click

from sakur4.bounds import RECEIPTS_LIMIT
from sakur4.cli.common import bounded, emit_json, known_project, reading, settings, table
from sakur4.receipts import Receipt, list_receipts


def repairs_cell(r: Receipt) -> str:
    """Each cache-churn repair of the turn with the re-processing it spared: predicted
    from the layout, confirmed by the server's reuse (blank until it reports)."""
    shown = []
    for x in r.detail.get("repairs", []):
        saved = f"{x.get('saved_predicted', 0):,} predicted"
        if x.get("saved_confirmed") is not None:
            saved = f"{x['saved_confirmed']:,} saved ({saved})"
        shown.append(f"{x['kind']}: {saved}")
    churn = [c["kind"] for c in r.detail.get("churn", [])]
    if churn:
        shown.append("churn not repaired: " + ", ".join(churn))
    return "; ".join(shown) or "-"


def receipt_row(r: Receipt) -> dict[str, str]:
    """One table row; reuse the server did not report is shown as unverifiable."""
    cut = "-" if r.chosen_cut is None else f"{r.chosen_cut:,}"
    if r.requested_cut is not None and r.chosen_cut is not None:
        cut = f"{r.chosen_cut:,} (asked {r.requested_cut:,})"
    reuse = (
        "unverifiable"
        if r.cache_verdict == "unverifiable"
        else f"{r.server_cached or 0:,}/{r.server_processed or 0:,}"
    )
    return {
        "session": r.session[:12],
        "turn": str(r.turn),
        "tokens": f"{r.prompt_tokens:,} of {r.context_window:,}",
        "pressure": f"{r.pressure:.0%}",
        "profile": r.profile,
        "verdict": r.verdict,
        "cut": cut,
        "cache": r.cache_verdict,
        "reused/processed": reuse,
        "prefill ms": "-" if r.prefill_ms is None else f"{r.prefill_ms:,.0f}",
        "repairs": repairs_cell(r),
    }


RECEIPT_COLUMNS = [
    "session",
    "turn",
    "tokens",
    "pressure",
    "profile",
    "verdict",
    "cut",
    "cache",
    "reused/processed",
    "prefill ms",
    "repairs",
]


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
