"""The side-by-side table (terminal and Markdown) and the per-turn plot.

The plot needs matplotlib, an optional extra (``pip install 'sakur4[bench]'``):
without it the table is still written and :func:`write_plot` says what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sakur4.demo.compare import ModeResult
from sakur4.demo.records import Comparison, StrategyRun, compare

COLUMNS = [
    "strategy",
    "figures",
    "processed",
    "overhead",
    "vs drop-oldest",
    "re-reads",
    "re-read tokens",
    "summary tokens",
    "summary s",
    "overhead s",
    "events",
    "failed turns",
    "anchor kept",
    "evicted",
    "recoverable",
    "live turns (median)",
]
# The demo's terminal table: the columns a first reader needs.
SHORT = [
    "strategy",
    "processed",
    "overhead",
    "vs drop-oldest",
    "re-reads",
    "events",
    "failed turns",
    "anchor kept",
    "recoverable",
    "live turns (median)",
]


def _ratio(a: float, b: float) -> str:
    if b <= 0:
        return "-" if a <= 0 else "∞"
    return f"{a / b:.2f}×"


def figures_of(run: StrategyRun) -> str:
    """How a run's figures were obtained: real servers, or the simulator."""
    return "SIMULATED" if run.detail.get("simulated") else "real"


def rows(result: ModeResult, reference: str = "drop-oldest") -> list[dict[str, str]]:
    """One row per strategy, ratios against the run labelled ``reference``."""
    comps = compare(result.runs, result.baseline)
    ref = next((c for c in comps if c.run.strategy == reference), None)
    out = [_baseline_row(result.baseline)]
    for c in comps:
        out.append(_row(c, ref))
    return out


def _live(run: StrategyRun) -> str:
    m = run.median_live
    return "-" if m is None else f"{m:g}"


def _baseline_row(b: StrategyRun) -> dict[str, str]:
    what = (
        f"baseline (window {b.window:,}, no management)"
        if b.window
        else "baseline (no eviction; counted, not run)"
    )
    return {
        "strategy": what,
        "figures": figures_of(b) if b.window else "counted",
        "processed": f"{b.processed:,}",
        "overhead": "0",
        "vs drop-oldest": "",
        "re-reads": str(b.rereads),
        "re-read tokens": f"{b.reread_tokens:,}",
        "summary tokens": "0",
        "summary s": "0",
        "overhead s": "0",
        "events": "0",
        "failed turns": str(b.failed_turns),
        "anchor kept": "yes" if b.anchor_kept else "no",
        "evicted": "0",
        "recoverable": "-",
        "live turns (median)": _live(b),
    }


def _row(c: Comparison, ref: Comparison | None) -> dict[str, str]:
    r = c.run
    lost = r.anchor_lost_at
    anchor = "yes" if r.anchor_kept else f"no (from call {lost})"
    name = r.strategy + (f" ({r.profile})" if r.profile and r.profile not in r.strategy else "")
    return {
        "strategy": name,
        "figures": figures_of(r),
        "processed": f"{r.processed:,}",
        "overhead": f"{c.overhead_tokens:,}",
        "vs drop-oldest": _ratio(c.overhead_tokens, ref.overhead_tokens) if ref else "",
        "re-reads": str(r.rereads),
        "re-read tokens": f"{r.reread_tokens:,}",
        "summary tokens": f"{r.summary_generated:,}",
        "summary s": f"{r.summary_ms / 1000:.1f}",
        "overhead s": f"{c.overhead_ms / 1000:.1f}",
        "events": str(r.events),
        "failed turns": f"{r.failed_turns} ({r.failed_requests} calls)" if r.failed_turns else "0",
        "anchor kept": anchor,
        "evicted": str(r.evicted),
        "recoverable": f"{r.recoverable}" if r.evicted else "-",
        "live turns (median)": _live(r),
    }


def markdown(table: Sequence[dict[str, str]], columns: Sequence[str] = COLUMNS) -> str:
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" if c == "strategy" else "--:" for c in columns) + "|"
    body = ["| " + " | ".join(r.get(c, "") for c in columns) + " |" for r in table]
    return "\n".join([head, rule, *body])


def text_table(table: Sequence[dict[str, str]], columns: Sequence[str] = COLUMNS) -> str:
    cells = [[r.get(c, "") for c in columns] for r in table]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    out = [line.rstrip()]
    for row in cells:
        out.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(out)


def write_plot(results: Sequence[ModeResult], path: Path) -> str | None:
    """Prompt tokens and tokens processed per call, per strategy, one column per mode;
    management events marked. Returns why no plot was written, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'sakur4[bench]')"
    fig, axes = plt.subplots(
        2, len(results), figsize=(7 * len(results), 8), squeeze=False, sharex=True
    )
    for col, res in enumerate(results):
        top, bottom = axes[0][col], axes[1][col]
        runs = [res.baseline, *res.runs]
        for k, run in enumerate(runs):
            color = f"C{k}"
            xs = [r.index for r in run.records]
            style: dict[str, Any] = {"color": color, "linewidth": 1.2}
            if run is res.baseline:
                style.update(linestyle=":", color="grey")
            label = run.strategy + (" (SIMULATED)" if run.detail.get("simulated") else "")
            top.plot(xs, [r.prompt_tokens for r in run.records], label=label, **style)
            bottom.plot(xs, [r.processed for r in run.records], **style)
            ev = [r for r in run.records if r.event]
            bottom.scatter(
                [r.index for r in ev],
                [r.processed for r in ev],
                marker="v",
                s=22,
                color=style["color"],
                zorder=3,
            )
            bad = [r.index for r in run.records if r.failed]
            if bad:
                top.scatter(bad, [0] * len(bad), marker="x", color=color, zorder=3)
        top.axhline(res.mode.window, color="black", linewidth=0.8, linestyle="--")
        top.set_title(f"{res.mode.name}: prompt tokens per call (window {res.mode.window:,})")
        bottom.set_title("tokens processed per call (▼ management event)")
        bottom.set_xlabel("call of the scripted session")
        top.set_ylabel("tokens")
        bottom.set_ylabel("tokens")
        top.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
