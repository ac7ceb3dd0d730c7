"""The headline figure: tokens re-processed per strategy, against a real llama-server.

    .venv/bin/python bench/eviction.py                 # both server modes, the README's size
    .venv/bin/python bench/eviction.py --policies      # also the planner policies measured
    .venv/bin/python bench/eviction.py --simulate ...  # predicted prefill (seconds, not hours)

One scripted coding-agent session (``sakur4.demo.scenario``: real standard-library
files read, test runs, a user correction early on that is pinned as an anchor),
replayed call by call, the assistant's words scripted and the server generating
two tokens a call. Per server mode (the checkpoint ring with a small ``-cms``;
``--swa-full``), each strategy runs on a fresh llama-server with the same flags:

- Sakur4 through the gateway (the profile the probe picks, then each profile forced);
- summarise-and-replace at the same trigger (a real, timed summary of
  ``--summary-tokens`` tokens);
- drop-oldest truncation down to the same target;
- no management, until the server refuses;

and the baseline: the same script with no management on a window large enough to
need none. Overhead = tokens processed − the baseline's. Its time is priced at the
baseline's measured prefill rate (on a shared machine, two runs' prefill times differ
by more than the overhead) plus the summaries' measured wall time.

Writes ``--out``/eviction.md (the tables), eviction.png (per call: prompt tokens and
tokens processed, events marked) and eviction.json (every call's figures).
``--simulate`` answers chat calls from Sakur4's own checkpoint-ring model over the
real server's tokenizer (bench/simserver.py): for ranking policies quickly; its
tables say so. (On the published script it predicted Sakur4's real ring run to the
token: 8,628 processed; docs/design/eviction.md.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from simserver import SimulatedChat  # bench/, beside this script

from sakur4.demo.compare import (
    Mode,
    ModeResult,
    Strategy,
    default_strategies,
    forced_profiles,
    ring,
    run_mode,
    swa_full,
)
from sakur4.demo.records import Comparison, compare
from sakur4.demo.report import markdown, rows, text_table, write_plot
from sakur4.demo.scenario import CORRECTION, build_session, replay
from sakur4.engine.planner import Policy
from sakur4.settings import Settings

FIRST_VERSION = Policy(tidy_by="gain", join="head")


def policy_strategies() -> list[Strategy]:
    """The planner policies the SPEC names, and the steps from the first version."""

    def s(label: str, live: int, policy: Policy | None = None) -> Strategy:
        return Strategy("sakur4", label, overrides=(("live_results", live),), policy=policy)

    return [
        s("first version (lag 2, cut by gain, riders wait for the head)", 2, FIRST_VERSION),
        s("+ cut by net gain (lag 2)", 2, replace(FIRST_VERSION, tidy_by="net")),
        s("+ riders join on payback (lag 2)", 2, Policy()),
        s("batch at trigger (keep 2 live)", 2, Policy(tidy=False)),
        s("lag 3", 3),
        s("lag 2", 2),
        s("lag 1", 1),
        s("mask on answer (lag 0)", 0),
    ]


def goals(res: ModeResult) -> list[str]:
    """Issue 9's goals for one mode, each with its figure."""
    comps = {c.run.strategy: c for c in compare(res.runs, res.baseline)}
    me = comps.get("sakur4")
    if me is None:
        return []
    out = []
    drop, summ = comps.get("drop-oldest"), comps.get("summarise")
    if drop is not None:
        r = me.overhead_tokens / drop.overhead_tokens if drop.overhead_tokens else float("inf")
        out.append(
            f"overhead tokens ≤ ¼ of drop-oldest's: {me.overhead_tokens:,} vs "
            f"{drop.overhead_tokens:,} = {r:.2f} → {'met' if r <= 0.25 else 'MISSED'}"
        )
    if summ is not None:
        r = me.overhead_ms / summ.overhead_ms if summ.overhead_ms else float("inf")
        out.append(
            f"overhead time ≤ ½ of summarise's: {me.overhead_ms / 1000:.1f} s vs "
            f"{summ.overhead_ms / 1000:.1f} s = {r:.2f} → {'met' if r <= 0.5 else 'MISSED'}"
            f" (measured prefill instead of priced: {_measured_ratio(me, summ)})"
        )
    run = me.run
    out.append(f"failed turns: {run.failed_turns} → {'met' if run.failed_turns == 0 else 'MISSED'}")
    out.append(f"anchor in every prompt: {'met' if run.anchor_kept else 'MISSED'}")
    dropped = int(run.detail.get("dropped", 0))
    ok = run.recoverable == run.evicted - dropped
    out.append(
        f"evicted episodes recoverable until Dropped: {run.recoverable} of "
        f"{run.evicted - dropped} ({dropped} dropped) → {'met' if ok else 'MISSED'}"
    )
    return out


def _measured_ratio(me: Comparison, other: Comparison) -> str:
    a, b = me.measured_overhead_ms, other.measured_overhead_ms
    return f"{a / 1000:.1f} s vs {b / 1000:.1f} s" + (f" = {a / b:.2f}" if b > 0 else "")


def _dump(results: Sequence[ModeResult], meta: dict[str, Any]) -> dict[str, Any]:
    def run(r: Any) -> dict[str, Any]:
        d = asdict(r)
        d["detail"] = {k: v for k, v in r.detail.items() if k != "receipts"}
        return d

    return {
        "meta": meta,
        "modes": [
            {
                "mode": res.mode.name,
                "window": res.mode.window,
                "baseline": run(res.baseline),
                "runs": [run(r) for r in res.runs],
            }
            for res in results
        ],
    }


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--modes", default="ring,swa-full", help="ring, swa-full (comma-separated)")
    p.add_argument("--window", type=int, default=1536, help="-c of the managed runs")
    p.add_argument("--cms", type=int, default=256, help="-cms of the ring mode")
    p.add_argument("--baseline-window", type=int, default=65536)
    p.add_argument("--threads", type=int, default=2, help="-t of every server")
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--file-chars", type=int, default=600)
    p.add_argument("--summary-tokens", type=int, default=256)
    p.add_argument("--no-profiles", action="store_true", help="skip the forced-profile runs")
    p.add_argument(
        "--profile-modes", default="ring,swa-full", help="the modes the forced profiles run in"
    )
    p.add_argument("--policies", action="store_true", help="also run the planner policies")
    p.add_argument("--only-policies", action="store_true", help="the planner policies only")
    p.add_argument("--simulate", action="store_true", help="predicted prefill (see above)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    p.add_argument("--name", default="eviction", help="file name stem of the outputs")
    return p.parse_args(argv)


async def main(argv: Sequence[str]) -> int:
    a = parse(argv)
    settings = Settings.load()
    modes: list[Mode] = []
    for name in a.modes.split(","):
        m = ring(a.window, a.cms) if name.strip() == "ring" else swa_full(a.window)
        modes.append(replace(m, flags=replace(m.flags, threads=a.threads)))
    requests = replay(build_session(turns=a.turns, file_chars=a.file_chars))
    started = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {msg}", flush=True)

    transport = (
        (lambda m, url: SimulatedChat(url, m.flags.rules(), m.window)) if a.simulate else None
    )
    strategies: list[Strategy] = [] if a.only_policies else default_strategies()
    if a.policies or a.only_policies:
        strategies += policy_strategies()
    results: list[ModeResult] = []
    with tempfile.TemporaryDirectory(prefix="sakur4-bench-") as tmp:

        async def run(mode: Mode, runs: list[Strategy], **kw: Any) -> ModeResult:
            return await run_mode(
                mode,
                requests,
                runs,
                settings=settings,
                anchor=CORRECTION,
                baseline_window=a.baseline_window,
                summary_tokens=a.summary_tokens,
                workdir=Path(tmp),
                progress=progress,
                transport=transport,
                **kw,
            )

        for mode in modes:
            res = await run(mode, strategies)
            forcing = mode.name.split()[0] in a.profile_modes.split(",")
            if forcing and not a.no_profiles and not a.only_policies:
                picked = next((r.profile for r in res.runs if r.strategy == "sakur4"), None)
                forced = [f for f in forced_profiles() if f.profile != picked]
                more = await run(mode, forced, baseline=res.baseline)
                res = replace(res, runs=(*res.runs, *more.runs))
            results.append(res)
            print_mode(res, a)

    kind = "SIMULATED prefill (predicted by the checkpoint model)" if a.simulate else "real"
    meta = {
        "turns": a.turns,
        "file_chars": a.file_chars,
        "calls": len(requests),
        "window": a.window,
        "cms": a.cms,
        "baseline_window": a.baseline_window,
        "summary_tokens": a.summary_tokens,
        "threads": a.threads,
        "figures": kind,
        "elapsed_s": round(time.monotonic() - started),
        "live_results": settings.live_results,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    md = a.out / f"{a.name}.md"
    md.write_text(document(results, meta))
    (a.out / f"{a.name}.json").write_text(json.dumps(_dump(results, meta), indent=1))
    png = a.out / f"{a.name}.png"
    why = write_plot(results, png)
    print(f"\ntable: {md}\nplot:  {png if why is None else 'not written: ' + why}")
    return 0


def print_mode(res: ModeResult, a: argparse.Namespace) -> None:
    print(f"\n== {res.mode.name}, window {res.mode.window:,}")
    print(text_table(rows(res)))
    for line in goals(res):
        print("  " + line)


def document(results: Sequence[ModeResult], meta: dict[str, Any]) -> str:
    parts = [
        "# Eviction benchmark",
        "",
        f"Figures: {meta['figures']}. Script: {meta['turns']} turns, {meta['calls']} calls, "
        f"files cut at {meta['file_chars']:,} characters; window {meta['window']:,}; "
        f"baseline window {meta['baseline_window']:,}; summaries of "
        f"{meta['summary_tokens']} tokens; live_results {meta['live_results']}; "
        f"{meta['elapsed_s']} s in all.",
        "",
        "Overhead = tokens processed beyond the baseline's; `overhead s` prices them at "
        "the baseline's prefill rate and adds the summaries' wall time.",
    ]
    for res in results:
        parts += ["", f"## {res.mode.name} (window {res.mode.window:,})", ""]
        parts.append(markdown(rows(res)))
        g = goals(res)
        if g:
            parts += ["", *[f"- {line}" for line in g]]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
