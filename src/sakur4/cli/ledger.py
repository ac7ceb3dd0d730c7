"""``sakur4 index``, ``map``, ``symbol`` and ``impact``: the Symbolic Ledger from a shell."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

import click

from sakur4.bounds import IMPACT_DEPTH, MAP_BUDGET
from sakur4.cli.common import bounded, current_project, emit_json, opened, settings, table
from sakur4.errors import NotFound
from sakur4.ledger import (
    IndexReport,
    current_fact,
    fact_history,
    find_symbols,
    impact,
    index_project,
    indexed_file_count,
    repo_map,
)
from sakur4.ledger.walk import WalkLimits
from sakur4.progress import Meter, shown

# Below this many files to read, a run is quick enough not to need a progress line.
PROGRESS_FROM = 200


class _Progress:
    """Files parsed of those to read, on stderr, shown only once a run turns out to be
    long: a bar on a terminal, a plain line every few seconds into a pipe or a log."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.stack = ExitStack()
        self.meter: Meter | None = None

    def __call__(self, done: int, total: int, path: str) -> None:
        if not self.enabled or total < PROGRESS_FROM:
            return
        if self.meter is None:
            self.meter = self.stack.enter_context(shown(Meter("indexing", total, noun="file")))
        self.meter.advance(steps=done - self.meter.done)

    def close(self) -> None:
        self.stack.close()


def _summary(r: IndexReport) -> str:
    lines = [
        f"indexed {r.scope} in {r.root}: {r.files_parsed} parsed, "
        f"{r.files_unchanged} unchanged, {r.files_removed} removed ({r.seconds:.2f} s)",
        f"  facts written: {r.facts_written} new or changed, {r.tombstones_written} tombstones; "
        f"references: {r.references_written}",
    ]
    if r.languages:
        lines.append("  languages: " + ", ".join(f"{k} {v}" for k, v in r.languages.items()))
    if r.skipped:
        lines.append("  skipped: " + ", ".join(f"{k} {v}" for k, v in r.skipped.items()))
    if r.files_with_syntax_errors:
        lines.append(
            f"  {r.files_with_syntax_errors} file(s) had syntax errors "
            "(indexed as far as tree-sitter could recover)"
        )
    return "\n".join(lines)


@click.command("index")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def index_cmd(ctx: click.Context, path: Path | None, as_json: bool) -> None:
    """Parse the project's changed files into the Ledger (PATH: a file or directory inside it)."""
    s = settings(ctx)
    with opened(s) as store:
        proj = current_project(store, s)
        target = Path(os.path.abspath(path)) if path is not None else None
        # Not with --json: a script asked for the figures alone.
        progress = _Progress(enabled=not as_json)
        try:
            report = index_project(store, proj, target, progress, limits=WalkLimits.of(s))
        finally:
            progress.close()
    if as_json:
        emit_json(report.as_dict())
    else:
        click.echo(_summary(report))


@click.command("map")
@click.option(
    "--budget",
    type=bounded(MAP_BUDGET),
    default=1024,
    show_default=True,
    help="Token budget for the map.",
)
@click.option(
    "--focus", multiple=True, help="A symbol, file or directory to centre on (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def map_cmd(ctx: click.Context, budget: int, focus: tuple[str, ...], as_json: bool) -> None:
    """The project's files and most important symbols, ranked by references, within a budget."""
    s = settings(ctx)
    with opened(s) as store:
        proj = current_project(store, s)
        files = indexed_file_count(store, proj.id)
        m = repo_map(store, proj.id, budget, focus)
    if as_json:
        emit_json(m.as_dict())
        return
    if not files:
        click.echo("nothing indexed yet: run `sakur4 index`", err=True)
        return
    click.echo(m.text, nl=False)
    click.echo(
        f"-- {m.symbols_shown} of {m.symbols_total} symbols in {m.files_shown} files, "
        f"{m.tokens} of {m.budget_tokens} tokens (estimated as characters / 4)",
        err=True,
    )
    if m.focus_unmatched:
        click.echo(f"-- focus matched nothing: {', '.join(m.focus_unmatched)}", err=True)


@click.command("symbol")
@click.argument("name")
@click.option("--path", "in_path", help="Only the fact at this file (shows removed symbols too).")
@click.option("--history", is_flag=True, help="Every fact ever written for the symbol.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def symbol_cmd(
    ctx: click.Context, name: str, in_path: str | None, history: bool, as_json: bool
) -> None:
    """Show the current Ledger facts for NAME (qualified, Class.method, or bare)."""
    s = settings(ctx)
    with opened(s) as store:
        proj = current_project(store, s)
        if in_path is not None:
            fact = current_fact(store, proj.id, in_path, name)
            facts = [fact] if fact else []
        else:
            facts = find_symbols(store, proj.id, name)
        if not facts:
            raise NotFound(f"no symbol {name!r} in the Ledger of {proj.name}")
        if history:
            facts = [
                h for f in facts for h in fact_history(store, proj.id, f.path, f.qualified_name)
            ]
    if as_json:
        emit_json([f.as_dict() for f in facts])
        return
    rows = [
        {
            "id": f.id,
            "symbol": f.qualified_name,
            "kind": "REMOVED" if f.tombstone else f.kind,
            "where": f"{f.path}:{f.start_line}-{f.end_line}" if not f.tombstone else f.path,
            "hash": f.symbol_hash[:12],
            "signature": " ".join(f.signature.split())[:80],
        }
        for f in facts
    ]
    click.echo(table(rows, ["id", "symbol", "kind", "where", "hash", "signature"]))


@click.command("impact")
@click.argument("name")
@click.option(
    "--depth",
    type=bounded(IMPACT_DEPTH),
    default=3,
    show_default=True,
    help="How many levels of referrers.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def impact_cmd(ctx: click.Context, name: str, depth: int, as_json: bool) -> None:
    """What references NAME, transitively; [STALE] where an Atlas summary no longer matches."""
    s = settings(ctx)
    with opened(s) as store:
        proj = current_project(store, s)
        result = impact(store, proj.id, name, depth)
    if as_json:
        emit_json(result.as_dict())
        return
    rows = [
        {
            "depth": e.depth,
            "symbol": e.qualified_name,
            "kind": e.kind,
            "where": f"{e.path}:{e.line}",
            "via": f"{e.ref_kind} {e.via}".strip() + ("" if e.resolved else " (ambiguous)"),
            "atlas": f"[STALE: {e.stale_reason}]" if e.stale else "",
        }
        for e in result.entries
    ]
    click.echo(table(rows, ["depth", "symbol", "kind", "where", "via", "atlas"]))
    if result.truncated:
        click.echo(f"-- truncated at {len(result.entries)} entries", err=True)
