"""``sakur4 demo``: the main job in a few minutes, on the set-up's own server and model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import httpx

from sakur4.bounds import COUNT
from sakur4.cli.common import CliError, bounded, settings, table
from sakur4.cli.receipts import RECEIPT_COLUMNS, receipt_row
from sakur4.demo.run import run_demo, side_by_side, write_outputs

BENCH = ".venv/bin/python bench/eviction.py (README, Results)"


@click.command("demo")
@click.option(
    "--turns",
    type=bounded(COUNT),
    default=6,
    show_default=True,
    help="Turns of the scripted session.",
)
@click.option(
    "--file-chars",
    type=bounded(COUNT),
    default=600,
    show_default=True,
    help="Characters of each file the agent reads.",
)
@click.option(
    "--window", type=bounded(COUNT), default=1536, show_default=True, help="Context window (-c)."
)
@click.option(
    "--cms",
    type=bounded(COUNT),
    default=256,
    show_default=True,
    help="The server's --checkpoint-min-step.",
)
@click.option(
    "--swa-full",
    is_flag=True,
    help="Start the server with --swa-full (any prefix reusable) instead of the checkpoint ring.",
)
@click.option(
    "--compare",
    "compare_with",
    default="drop-oldest",
    show_default=True,
    help="Strategies to run beside Sakur4 (comma-separated: drop-oldest, summarise, none; "
    "'' for none).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the table and plot go [default: demo/ beside the store].",
)
@click.pass_context
def demo(
    ctx: click.Context,
    turns: int,
    file_chars: int,
    window: int,
    cms: int,
    swa_full: bool,
    compare_with: str,
    out: Path | None,
) -> None:
    """Start llama-server, replay a short agent session through the gateway, compare.

    The server is the one `scripts/setup` built, with the packaged model, on
    127.0.0.1; it is stopped when the demo ends, Ctrl-C included. Prints Sakur4's
    receipts and the totals side by side with drop-oldest truncation.
    """
    s = settings(ctx)
    others = tuple(k.strip() for k in compare_with.split(",") if k.strip())
    for k in others:
        if k not in ("drop-oldest", "summarise", "none"):
            raise click.BadParameter(f"unknown strategy {k!r}", param_hint="--compare")
    try:
        result = asyncio.run(
            run_demo(
                s,
                turns=turns,
                file_chars=file_chars,
                window=window,
                cms=cms,
                swa_full=swa_full,
                echo=lambda line: click.echo(line, err=True),
                compare_with=others,
            )
        )
    except (httpx.HTTPError, OSError) as e:
        # The servers are stopped by then (run_demo's context managers); say what broke.
        raise CliError(f"demo failed: {type(e).__name__}: {e}") from e
    click.echo("\nSakur4's receipts (one per call; `sakur4 receipts` for your own):")
    click.echo(table([receipt_row(r) for r in result.receipts], RECEIPT_COLUMNS))
    click.echo("\nSide by side, same script, same server flags:")
    click.echo(side_by_side(result.result))
    where = out or s.store.parent / "demo"
    md, png, why = write_outputs(result, where)
    click.echo(f"\ntable: {md}")
    click.echo(f"plot:  {png}" if png else f"plot:  not written ({why})")
    click.echo(f"the full benchmark (both server modes, all strategies): {BENCH}")


def register(cli: click.Group) -> None:
    cli.add_command(demo)
