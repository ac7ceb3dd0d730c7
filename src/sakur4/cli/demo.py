"""``sakur4 demo``: the main job in a few minutes, on the set-up's own server and model."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import click
import httpx

from sakur4.bounds import COUNT
from sakur4.cli.common import bounded, settings, table
from sakur4.cli.errors import CliError
from sakur4.demo.run import SUMMARY_TOKENS, run_demo, side_by_side, write_outputs
from sakur4.demo.script import PRESETS, preset
from sakur4.demo.via_gateway import keep_dashboard_up
from sakur4.receipts import RECEIPT_COLUMNS, receipt_row
from sakur4.settings import Settings

OTHERS = (
    "drop-oldest",
    "mask-lag1",
    "opencode",
    "opencode-1.18",
    "claude-code",
    "claude-code-2.1",
    "mask-10turns",
    "summarise",
    "none",
)

BENCH = ".venv/bin/python bench/eviction.py (README, Results)"
# The strategies run by default: none generates a summary, so the demo ends in minutes
# on a CPU server. OpenCode's prune-then-compact, Claude Code's and summarise write
# summaries (generated tokens: 13 min of the demo's 19 at load 14, issue 42); they run
# when --compare names them, their summaries capped (SUMMARY_TOKENS, said in the table).
DEFAULT_COMPARE = "drop-oldest,mask-lag1"


@click.command("demo")
@click.option(
    "--size",
    default="demo",
    show_default=True,
    help=f"Script preset ({', '.join(PRESETS)}): the demo's is a 4,096 window, a ~1k "
    "harness head, 14 turns.",
)
@click.option(
    "--turns", type=bounded(COUNT), help="Turns of the scripted session [default: the size's]."
)
@click.option("--window", type=bounded(COUNT), help="Context window (-c) [default: the size's].")
@click.option(
    "--seed", type=bounded(COUNT), help="The script generator's seed [default: the size's]."
)
@click.option(
    "--swa-full/--ring",
    default=True,
    show_default=True,
    help="The server's cache: --swa-full (full attention: any prefix resumes, what most "
    "models and servers give) or the checkpoint ring (Gemma 3's sliding window).",
)
@click.option(
    "--cms",
    type=bounded(COUNT),
    default=256,
    show_default=True,
    help="The ring's --checkpoint-min-step (with --ring).",
)
@click.option(
    "--compare",
    "compare_with",
    default=DEFAULT_COMPARE,
    show_default=True,
    help=f"Strategies to run beside Sakur4 (comma-separated: {', '.join(OTHERS)}; '' for "
    f"none). OpenCode's, Claude Code's and summarise generate summaries (capped at "
    f"{SUMMARY_TOKENS} tokens): minutes more on a CPU.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the table and plot go [default: demo/ beside the store].",
)
@click.option(
    "--open",
    "keep_open",
    is_flag=True,
    help="Keep the dashboard up after the session, until Ctrl-C.",
)
@click.pass_context
def demo(
    ctx: click.Context,
    size: str,
    turns: int | None,
    window: int | None,
    seed: int | None,
    cms: int,
    swa_full: bool,
    compare_with: str,
    out: Path | None,
    keep_open: bool,
) -> None:
    """Start llama-server, replay a scripted agent session through the gateway, compare.

    The server is the one `scripts/setup` built, with the packaged model, on
    127.0.0.1; it is stopped when the demo ends, Ctrl-C included. Prints Sakur4's
    receipts and the totals side by side with drop-oldest truncation and rolling
    observation masking (--compare adds OpenCode's own prune-then-compact and the
    others), each on a fresh server with the same flags: full attention (--swa-full,
    any prefix resumes) unless --ring. Each replay shows its progress on stderr; the
    dashboard's address is printed while Sakur4's gateway runs.
    """
    s = settings(ctx)
    others = tuple(k.strip() for k in compare_with.split(",") if k.strip())
    for k in others:
        if k not in OTHERS:
            raise click.BadParameter(f"unknown strategy {k!r}", param_hint="--compare")
    try:
        params = preset(size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--size") from e
    params = replace(
        params,
        turns=params.turns if turns is None else turns,
        window=params.window if window is None else window,
        seed=params.seed if seed is None else seed,
    )
    dashboards: list[tuple[str, Settings]] = []

    def dashboard(url: str, gateway: Settings) -> None:
        dashboards.append((url, gateway))
        click.echo(f"dashboard: {url}", err=True)

    keep = None
    if keep_open:  # Sakur4's store outlives the run, until the dashboard stops
        keep = Path(tempfile.mkdtemp(prefix="sakur4-demo-"))
        ctx.call_on_close(lambda: shutil.rmtree(keep, ignore_errors=True))
    try:
        result = asyncio.run(
            run_demo(
                s,
                params=params,
                cms=cms,
                swa_full=swa_full,
                echo=lambda line: click.echo(line, err=True),
                compare_with=others,
                on_dashboard=dashboard,
                keep=keep,
                progress=sys.stderr,
            )
        )
    except (httpx.HTTPError, OSError) as e:
        # The servers are stopped by then (run_demo's context managers); say what broke.
        raise CliError(f"demo failed: {type(e).__name__}: {e}") from e
    click.echo("\nSakur4's receipts (one per call; `sakur4 receipts` for your own):")
    click.echo(table([receipt_row(r) for r in result.receipts], RECEIPT_COLUMNS))
    click.echo(f"\nSide by side, same script ({params.describe()}), same server flags:")
    click.echo(side_by_side(result.result))
    where = out or s.data_dir / "demo"
    md, png, why = write_outputs(result, where)
    click.echo(f"\ntable: {md}")
    click.echo(f"plot:  {png}" if png else f"plot:  not written ({why})")
    click.echo(f"the full benchmark (all sizes, server modes and strategies): {BENCH}")
    if keep_open and dashboards:
        keep_dashboard_up(*dashboards[0], lambda line: click.echo(line, err=True))
