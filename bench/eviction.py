"""The eviction benchmark: what each way of keeping a session inside the window costs.

    .venv/bin/python bench/eviction.py --size S8 --modes ring --only drop-oldest,summarise
    .venv/bin/python bench/eviction.py --size S16 --simulate          # predicted, seconds
    .venv/bin/python bench/eviction.py --size S8 --table-only         # assemble kept runs
    .venv/bin/python bench/eviction.py --size demo --backend vllm     # on the real vLLM

``--backend vllm`` runs every strategy on a fresh vLLM (``scripts/setup-tests`` installs it)
instead: one mode, automatic prefix caching (any prefix, whole 128-token blocks), every
figure from ``usage`` (``cached_tokens``; the simulator models llama-server only, so
``--simulate`` is refused there). Its baseline window is the script's need rounded up
to 8,192 (past the model's 32,768 positions vLLM is told to allow it: the baseline
counts prefill, and a long-context answer's quality is not measured).

Server modes (``--modes``): ``default`` (the server's own flags: no ``-cms``, so
8192, and 32 checkpoints), ``ring`` (the probe's advice, ``-cms 256``), ``swa-full``
(any prefix resumes: what full-attention models give) and ``cache-reuse``
(``--swa-full --cache-reuse 256``: the KV of kept runs is shifted into place);
``recurrent`` and ``recurrent-cms256``: the tiny random-weight hybrid (lfm2) model of
scripts/build-recurrent-model.py on the default flags and on ``-cms 256`` (cache
behaviour only: its text is noise; it resumes only at a checkpoint or its state's
exact end, and the simulator predicts it with those rules, bench/modes.py).

A scripted coding-agent session (:mod:`sakur4.demo.script`: a harness head of a
system prompt and tool schemas, 1-3 tool calls a turn with real standard-library
text as results, ~100-token answers, a correction pinned at turn 1, need turns that
ask about an earlier read) is replayed by a scripted agent
(:mod:`sakur4.demo.agent`) against a fresh llama-server per strategy, same flags:

- the baseline: no management on a window large enough to need none;
- drop-oldest, summarise-and-replace (a real, timed summary), rolling observation
  masking with lag 1, observation masking with a 10-turn window (arXiv 2508.21433);
- the harnesses' own policies as published (:mod:`sakur4.demo.peers`): OpenCode's
  prune-then-compact and Claude Code's clear-old-results-then-auto-compact;
- Headroom's proxy in front of drop-oldest (``headroom``, real runs only, when its
  venv is installed: bench/headroom.py);
- Sakur4 through a real gateway in this process (the probe's profile; each profile
  forced; ``live_results`` variants), every variant a Settings override.

At a need turn, an agent whose prompt lacks the needed result in full fetches it
again (``open_fold`` through Sakur4, the same ``read_file`` otherwise); those calls
are counted as re-reads and their tokens are part of what the strategy processed.

Each (script + seed, server mode, strategy, real or simulated, and for Sakur4 the
engine's version) run is kept in its own file under bench/out/runs/ (bench/runs.py)
and not run again unless ``--rerun``; the tables are assembled from every kept run
of the script and mode, the real one preferred, each row saying which it is.
``--simulate`` answers chat calls from the checkpoint model (or, for ``cache-reuse``,
llama-server's chunk-reuse loop) over the real server's tokenizer
(bench/simserver.py); where a simulated and a real run of the same strategy exist,
the table states their difference.

Writes ``--out``/<name>.md (the tables), <name>.png (per call: prompt tokens and
tokens processed, events marked) and <name>.json (every row's figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import headroom  # bench/, beside this script
import httpx
import runs as kept  # bench/, beside this script
from modes import MODES, checkpoint_rules, mode, model_file, server_settings  # bench/
from processes import stoppable  # bench/
from simserver import SimulatedChat
from strategies import BASELINE, default_strategies, strategy  # bench/, beside this script

from sakur4.backends.launcher import LlamaServer, ServerFlags, ServerProcess
from sakur4.backends.vllm import BLOCK_TOKENS
from sakur4.backends.vllm_server import VllmFlags, VllmServer
from sakur4.demo.compare import Mode, ModeResult, Strategy, run_strategy
from sakur4.demo.records import Comparison, StrategyRun, compare
from sakur4.demo.report import figures_of, markdown, rows, text_table, write_plot
from sakur4.demo.scenario import Session
from sakur4.demo.script import PRESETS, ScriptParams, generate, preset
from sakur4.errors import Sakur4Error
from sakur4.progress import Meter, shown
from sakur4.settings import Settings

SIMPLE = ("drop-oldest", "summarise", "mask-lag1", "mask-10turns")
PEERS = ("opencode", "claude-code")
VLLM = "vllm"
# The packaged model's positions (config.json max_position_embeddings).
VLLM_MODEL_POSITIONS = 32768


def vllm_mode(window: int) -> Mode:
    """vLLM's one mode (the flags carry only the window; VllmFlags start the server)."""
    name = f"vLLM prefix caching ({BLOCK_TOKENS}-token blocks)"
    return Mode(VLLM, name, ServerFlags(ctx=window), kind="vllm")


def vllm_flags(window: int) -> VllmFlags:
    """The vLLM flags for ``window``: 1 GiB of KV cache per 32k tokens (at least 1)."""
    return VllmFlags(max_model_len=window, kv_cache_gib=max(1, math.ceil(window / 32768)))


def vllm_baseline_window(chars: int) -> int:
    """The unmanaged window on vLLM: the estimate x1.5, rounded up to 8,192 (a vLLM's
    KV cache is sized to it, unlike llama-server's power of 2 that costs nothing)."""
    return max(8192, math.ceil(chars / 3.0 * 1.5 / 8192) * 8192)


@contextmanager
def fresh_server(mode: Mode, settings: Settings) -> Iterator[ServerProcess]:
    """A server of the mode's kind, started for one strategy and stopped after it."""
    if mode.kind == "vllm":
        if mode.window > VLLM_MODEL_POSITIONS:
            os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"  # read by the server it starts
        with VllmServer.from_settings(settings, vllm_flags(mode.window)) as vllm:
            yield vllm
    else:
        # llama-server's own ChatML fallback, no stops (issue 41): the simulator's answers
        # run to their cap as the model's did there, and the published tables ran on it.
        fallback = replace(mode.flags, server_template=True)
        with LlamaServer.from_settings(settings, fallback) as llama:
            yield llama


def baseline_window(params: ScriptParams, session_chars: int) -> int:
    """A window the whole session fits in unmanaged: the estimate x1.5, a power of 2."""
    need = int(session_chars / 3.0 * 1.5)
    w = 65536
    while w < need:
        w *= 2
    return w


def script_calls(session: Session) -> int:
    """The calls the script makes when no needed result has to be fetched again (each
    turn's first call and one per tool step; Claude Code's shape attaches the reads)."""
    return sum(
        1 + sum(1 for st in t.steps if not (session.attach_reads and st.name == "read_file"))
        for t in session.turns
    )


def session_chars(params: ScriptParams) -> int:
    s = generate(params)
    total = len(s.system) + len(json.dumps(s.tools))
    for t in s.turns:
        total += len(t.user) + len(t.answer) + sum(len(x.result) + 80 for x in t.steps)
        total += len(t.need.content) if t.need else 0
    return total


# ---------------------------------------------------------------------------
# Running (or finding) each strategy's run


async def on_fresh_server(
    mode: Mode,
    strategy: Strategy,
    session: Session,
    settings: Settings,
    summary_tokens: int,
    workdir: Path,
    transport: Callable[[Mode, str, str | None], httpx.AsyncBaseTransport] | None,
    on_call: Callable[[int], None] | None = None,
) -> StrategyRun:
    """One strategy's run on a server of its own (llama-server with the mode's flags, or
    vLLM), for ``headroom`` with Headroom's proxy in front of it for the chat calls;
    ``on_call`` is told each call's processed tokens."""
    with fresh_server(mode, settings) as server, ExitStack() as stack:
        chat_via = None
        if strategy.kind == "headroom":
            log = workdir / f"headroom-{mode.key}.log"
            chat_via = stack.enter_context(headroom.proxy(settings.cache_dir, server.url, log))
        return await run_strategy(
            replace(strategy, kind="drop-oldest") if chat_via else strategy,  # behind it
            server.url,
            session,
            settings=settings,
            mode=mode,
            summary_tokens=summary_tokens,
            workdir=workdir,
            transport=transport(mode, server.url, chat_via) if transport else None,
            on_call=on_call,
        )


async def run_missing(
    a: argparse.Namespace,
    params: ScriptParams,
    modes: Sequence[Mode],
    strategies: Sequence[Strategy],
    settings: Settings,
) -> None:
    session = generate(params)
    engine = kept.engine_version()
    chars = session_chars(params)
    big = a.baseline_window or (
        vllm_baseline_window(chars) if a.backend == VLLM else baseline_window(params, chars)
    )
    started = time.monotonic()
    calls = script_calls(session)

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="sakur4-bench-") as tmp:
        for m in modes:
            mode_settings = server_settings(m, settings)
            for st in (BASELINE, *strategies):
                sim = a.simulate or (st is BASELINE and a.sim_baseline)
                key = kept.RunKey(
                    params.key,
                    m.key,
                    st.key,
                    sim,
                    kept.policy_version(st.kind),
                )
                real_base = (
                    kept.find(kept.RunKey(params.key, m.key, st.key, False))
                    if st is BASELINE and a.sim_baseline
                    else None
                )
                if real_base is not None and not real_base.run.failed_turns:
                    say(f"[{m.key}] baseline: a real run is kept")
                    continue
                if st.kind == "headroom":
                    why = (
                        "its proxy calls the server itself: the simulator cannot answer for it"
                        if sim
                        else headroom.absent(mode_settings.cache_dir)
                    )
                    if why:
                        say(f"[{m.key}] {st.label}: skipped, {why}")
                        continue
                if not a.rerun and key.path().is_file():
                    say(f"[{m.key}] {st.label}: kept ({key.path().relative_to(kept.RUNS)})")
                    continue
                where = replace(m, flags=replace(m.flags, ctx=big)) if st is BASELINE else m
                say(f"[{m.key}] {st.label} on a {where.window:,}-token window ...")
                t0 = time.monotonic()
                # Call i of n, tokens processed, time left: a bar on a terminal, a line
                # every 5 s in a log (a real S16 run takes hours on a loaded machine).
                meter = Meter(f"[{m.key}] {st.label}", calls, processed="tokens processed")
                with shown(meter, sys.stdout):
                    run = await on_fresh_server(
                        where,
                        st,
                        session,
                        mode_settings,
                        a.summary_tokens,
                        Path(tmp),
                        lambda mm, url, via, sim=sim: KeptOpen(
                            simulated(mm, url)
                            if sim
                            else headroom.ChatVia(via)
                            if via
                            else httpx.AsyncHTTPTransport()
                        ),
                        meter.advance,
                    )
                took = time.monotonic() - t0
                run = replace(run, detail={**run.detail, "simulated": sim})
                meta = {
                    "script": params.describe(),
                    "params": params.__repr__(),
                    "mode": m.name,
                    "model": model_file(m) or "the set-up's",
                    "flags": vllm_flags(where.window).args()
                    if m.key == VLLM
                    else where.flags.args(),
                    "figures": "SIMULATED" if sim else "real",
                    "elapsed_s": round(took, 1),
                    "threads": where.flags.threads,
                    "summary_tokens": a.summary_tokens,
                    "engine": engine,
                    "host": platform.node(),
                    "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                }
                path = kept.save(key, run, meta)
                say(
                    f"[{m.key}] {st.label}: {run.processed:,} processed, {run.rereads} re-reads, "
                    f"{run.events} events, {took:.0f} s -> {path.relative_to(kept.RUNS)}"
                )


def simulated(m: Mode, url: str) -> SimulatedChat:
    return SimulatedChat(url, checkpoint_rules(m), m.window, cache_reuse=m.flags.cache_reuse)


class KeptOpen(httpx.AsyncBaseTransport):
    """Passes calls on to ``inner`` and is never closed by its users: the gateway's probe
    closes the transport it is given, then its chat client goes on using it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        return None


# ---------------------------------------------------------------------------
# Assembling the tables from kept runs


def assemble(
    params: ScriptParams, m: Mode, labels: Sequence[str] | None, any_engine: bool
) -> tuple[ModeResult | None, list[str]]:
    """The mode's table from kept runs (real preferred), and the sim-vs-real notes."""
    found = kept.stored(params.key, m.key)
    by_label: dict[str, dict[bool, kept.Stored]] = {}
    for s in found:
        if not kept.is_current(s.key) and not any_engine:
            continue
        label = s.run.strategy
        by_label.setdefault(label, {})[s.key.simulated] = s  # newest file wins
    base = by_label.pop("baseline", None)
    notes = []
    real_base = base.get(False) if base else None
    if real_base is not None and real_base.run.failed_turns:
        # The measure every overhead is taken from: a baseline that lost turns (the
        # server's context below the script's: 32,768 for this model whatever -c says)
        # processed less than the script, and every overhead would grow by the loss.
        failed = next(r.failed for r in real_base.run.records if r.failed)
        notes.append(
            f"baseline: the real run failed {real_base.run.failed_turns} turns ({failed}); "
            "not used" + ("" if True in base else ": run with --sim-baseline")
        )
        del base[False]
    if not base:
        return None, notes
    baseline = (base.get(False) or base[True]).run
    order = [lb for lb in (labels or by_label) if lb in by_label]
    chosen = []
    for lb in order:
        pick = by_label[lb].get(False) or by_label[lb][True]
        run = pick.run
        if not kept.is_current(pick.key):  # --any-engine: say which
            run = replace(run, strategy=f"{run.strategy} @ engine {pick.key.engine}")
        chosen.append(run)
    for lb in ["baseline", *order]:
        pair = base if lb == "baseline" else by_label[lb]
        if False in pair and True in pair:
            real, sim = pair[False].run.processed, pair[True].run.processed
            d = sim - real
            notes.append(
                f"{lb}: simulated {sim:,} vs real {real:,} processed ({d:+,}, {d / real:+.2%})"
                if real
                else f"{lb}: real processed 0"
            )
    return ModeResult(m, baseline, tuple(chosen)), notes


def goals(res: ModeResult) -> list[str]:
    """Issues 14's and 28's goals for one mode, each with its figure (Sakur4's default row)."""
    comps = {c.run.strategy: c for c in compare(res.runs, res.baseline)}
    me = comps.get("sakur4")
    if me is None:
        return []
    out = []
    drop, summ = comps.get("drop-oldest"), comps.get("summarise")
    if drop is not None:
        r = me.overhead_tokens / drop.overhead_tokens if drop.overhead_tokens else float("inf")
        out.append(
            f"overhead incl. re-reads ≤ 0.25× drop-oldest's: {me.overhead_tokens:,} vs "
            f"{drop.overhead_tokens:,} = {r:.2f} → {'met' if r <= 0.25 else 'MISSED'}"
        )
        if res.mode.key == "cache-reuse":
            p = me.run.processed / drop.run.processed if drop.run.processed else float("inf")
            out.append(
                f"processed within 10% of drop-oldest's: {me.run.processed:,} vs "
                f"{drop.run.processed:,} = {p:.2f} → {'met' if p <= 1.10 else 'MISSED'}"
            )
    others = [c for k, c in comps.items() if not k.startswith("sakur4")]
    if others:
        best = min(others, key=lambda c: c.overhead_tokens)
        r = me.overhead_tokens / best.overhead_tokens if best.overhead_tokens > 0 else float("inf")
        out.append(
            f"overhead incl. re-reads ≤ 0.8× the best other strategy's ({best.run.strategy}): "
            f"{me.overhead_tokens:,} vs {best.overhead_tokens:,} = {r:.2f} → "
            f"{'met' if r <= 0.8 else 'MISSED'}"
        )
    simple = [comps[k] for k in SIMPLE if k in comps]
    if simple:
        worse = [c.run.strategy for c in simple if c.overhead_tokens <= me.overhead_tokens]
        out.append(
            "below every simple policy: "
            + ("met" if not worse else f"MISSED (not below {', '.join(worse)})")
        )
    if summ is not None:
        r = me.overhead_ms / summ.overhead_ms if summ.overhead_ms else float("inf")
        out.append(
            f"time ≤ 0.5× summarise's: {me.overhead_ms / 1000:.1f} s vs "
            f"{summ.overhead_ms / 1000:.1f} s = {r:.2f} → {'met' if r <= 0.5 else 'MISSED'}"
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


def _which(res: ModeResult) -> str:
    real = [r.strategy for r in (res.baseline, *res.runs) if figures_of(r) == "real"]
    sim = [r.strategy for r in (res.baseline, *res.runs) if figures_of(r) != "real"]
    if not sim:
        return "Every row is real (runs on the real server)."
    if not real:
        return "Every row is SIMULATED (predicted prefill over the real tokenizer)."
    return f"Real rows: {', '.join(real)}. SIMULATED rows: {', '.join(sim)}."


def document(
    params: ScriptParams, tables: Sequence[tuple[ModeResult, list[str]]], extra: str
) -> str:
    parts = [
        f"# Eviction benchmark: {params.name}",
        "",
        f"Script: {params.describe()}. {extra}",
        "",
        "Overhead = tokens processed beyond the baseline's (re-reads included); "
        "re-read tokens are what the server processed for the calls that fetched a needed "
        "result again; `overhead s` prices the overhead at the baseline's prefill rate and "
        "adds the summaries' time; live turns = turns a tool result stayed in the prompt "
        "in full after it arrived (median; results still there at the end count to the end).",
    ]
    for res, notes in tables:
        parts += ["", f"## {res.mode.name} (window {res.mode.window:,})", "", _which(res), ""]
        parts.append(markdown(rows(res)))
        g = goals(res)
        if g:
            parts += ["", *[f"- {line}" for line in g]]
        if notes:
            parts += ["", "Simulator against the real run of the same script, mode, strategy:"]
            parts += [f"- {n}" for n in notes]
    return "\n".join(parts) + "\n"


def _dump(tables: Sequence[tuple[ModeResult, list[str]]], params: ScriptParams) -> dict[str, Any]:
    def comp(c: Comparison) -> dict[str, Any]:
        r = c.run
        return {
            "strategy": r.strategy,
            "figures": figures_of(r),
            "processed": r.processed,
            "overhead": c.overhead_tokens,
            "rereads": r.rereads,
            "reread_tokens": r.reread_tokens,
            "summary_tokens": r.summary_generated,
            "summary_s": round(r.summary_ms / 1000, 2),
            "events": r.events,
            "failed_turns": r.failed_turns,
            "anchor_kept": r.anchor_kept,
            "evicted": r.evicted,
            "recoverable": r.recoverable,
            "median_live_turns": r.median_live,
        }

    return {
        "script": params.describe(),
        "key": params.key,
        "modes": [
            {
                "mode": res.mode.name,
                "window": res.mode.window,
                "baseline": comp(Comparison(res.baseline, res.baseline)),
                "rows": [comp(c) for c in compare(res.runs, res.baseline)],
                "simulator_vs_real": notes,
            }
            for res, notes in tables
        ],
    }


# ---------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", default="S8", help=f"script preset: {', '.join(PRESETS)}")
    p.add_argument("--seed", type=int, default=None, help="the generator's seed (preset's: 7)")
    p.add_argument("--turns", type=int, default=None, help="override the preset's turns")
    p.add_argument("--modes", default="ring,swa-full", help=", ".join(MODES))
    p.add_argument(
        "--backend",
        choices=("llama.cpp", VLLM),
        default="llama.cpp",
        help="the server every strategy runs on (vllm: one mode, prefix caching)",
    )
    p.add_argument(
        "--only",
        default=None,
        help="strategies to run (comma-separated labels; default: sakur4 and the simple "
        f"policies: {', '.join(SIMPLE)}; the harnesses' own: {', '.join(PEERS)}); the "
        "baseline always runs",
    )
    p.add_argument("--threads", type=int, default=2, help="-t of every server")
    p.add_argument("--baseline-window", type=int, default=None, help="default: fits the script")
    p.add_argument("--summary-tokens", type=int, default=256)
    p.add_argument("--simulate", action="store_true", help="predicted prefill (see above)")
    p.add_argument(
        "--sim-baseline",
        action="store_true",
        help="the baseline from the simulator even for real runs (no management never "
        "changes the prompt, so the prediction is the count; S16's real baseline would "
        "prefill 210k tokens on a 512k window)",
    )
    p.add_argument("--rerun", action="store_true", help="run again even if a kept run exists")
    p.add_argument("--table-only", action="store_true", help="run nothing; assemble the tables")
    p.add_argument("--any-engine", action="store_true", help="also Sakur4 runs of older engines")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    p.add_argument("--name", default=None, help="file name stem (default: eviction-<size>)")
    return p.parse_args(argv)


def chosen(a: argparse.Namespace) -> list[Strategy]:
    if a.only is None:
        return default_strategies()
    return [strategy(x.strip()) for x in a.only.split(",") if x.strip() and x != "baseline"]


async def main(argv: Sequence[str]) -> int:
    a = parse(argv)
    try:
        params = preset(a.size)
        if a.seed is not None:
            params = replace(params, seed=a.seed)
        if a.turns is not None:
            params = replace(params, turns=a.turns)
        if a.backend == VLLM:
            if a.simulate or a.sim_baseline:
                raise ValueError("--simulate models llama-server: vLLM runs are real only")
            modes = [vllm_mode(params.window)]
        else:
            modes = [mode(k.strip(), params.window) for k in a.modes.split(",") if k.strip()]
            modes = [replace(m, flags=replace(m.flags, threads=a.threads)) for m in modes]
        strategies = chosen(a)
        settings = Settings.load()
        if not a.table_only:
            await run_missing(a, params, modes, strategies, settings)
    except (ValueError, Sakur4Error) as e:
        print(f"bench/eviction.py: {e}", file=sys.stderr)
        return 2
    labels = [s.label for s in strategies] if a.only else None
    tables = []
    for m in modes:
        res, notes = assemble(params, m, labels, a.any_engine)
        if res is None:
            print(f"\n== {m.name}: no kept baseline run for {params.key}; nothing to show")
            for line in notes:
                print("  " + line)
            continue
        tables.append((res, notes))
        print(f"\n== {params.name}, {m.name}, window {m.window:,} -- {_which(res)}")
        print(text_table(rows(res)))
        for line in [*goals(res), *notes]:
            print("  " + line)
    if not tables:
        return 1
    name = a.name or f"eviction-{params.name}"
    a.out.mkdir(parents=True, exist_ok=True)
    md = a.out / f"{name}.md"
    md.write_text(document(params, tables, f"Script key {params.key}."))
    (a.out / f"{name}.json").write_text(json.dumps(_dump(tables, params), indent=1))
    png = a.out / f"{name}.png"
    why = write_plot([t[0] for t in tables], png)
    print(f"\ntable: {md}\nplot:  {png if why is None else 'not written: ' + why}")
    return 0


if __name__ == "__main__":
    stoppable()
    try:
        sys.exit(asyncio.run(main(sys.argv[1:])))
    except KeyboardInterrupt:
        print("bench/eviction.py: interrupted; the runs finished so far are kept", file=sys.stderr)
        sys.exit(130)
