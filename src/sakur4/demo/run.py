"""``sakur4 demo``: a short session through the gateway against a llama-server it starts.

The server is the set-up's binary with the packaged model, on loopback, with full
attention by default (``--swa-full``: any prefix resumes, the mainstream setup) or the
checkpoint ring (``-cms`` small), stopped by its own pid however the demo ends (errors
and Ctrl-C included: :class:`~sakur4.backends.launcher.LlamaServer` is a context
manager). The same short script then goes to a fresh server with the same flags per
strategy it is compared with (by default drop-oldest and rolling masking; OpenCode's
own policy and the other summarising peers when asked, their summaries capped), for
the side-by-side totals, each replay's progress shown while it runs. The baseline —
what the script costs with no eviction at all — is counted with the server's tokenizer
instead of run: the tokens each call appends to the previous prompt (an append-only
cache processes exactly those; the benchmark runs it for real).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sakur4.backends.launcher import LlamaServer
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.demo.agent import ScriptedAgent, drive
from sakur4.demo.compare import ModeResult, Strategy, chat_for, ring, run_strategy
from sakur4.demo.compare import swa_full as swa_full_mode
from sakur4.demo.records import RequestRecord, StrategyRun
from sakur4.demo.report import SHORT, markdown, rows, text_table, write_plot
from sakur4.demo.scenario import Request, Session
from sakur4.demo.script import ScriptParams, generate
from sakur4.demo.via_gateway import OnDashboard
from sakur4.progress import Meter, shown
from sakur4.receipts import Receipt
from sakur4.settings import Settings

Echo = Callable[[str], None]
# Each summary a compacting strategy generates is capped here (with ignore_eos, every
# one is this long): a harness lets its summary run to hundreds of tokens, which a CPU
# server writes at a few a second. The table says so (summary_note).
SUMMARY_TOKENS = 128


@dataclass(frozen=True)
class DemoResult:
    """What the demo ran: the side-by-side runs and Sakur4's receipts."""

    result: ModeResult
    receipts: tuple[Receipt, ...]
    params: ScriptParams


async def appended_baseline(url: str, session: Session) -> StrategyRun:
    """The no-eviction baseline without prefilling it: per call, the tokens it adds
    after the longest prefix it shares with the call before (server's own template
    and tokenizer). Times are left at zero."""
    records = []
    prev: list[int] = []
    agent = ScriptedAgent(session)
    chat = chat_for(session)
    async with LlamaCppClient(url, timeout=600.0) as client:

        async def send(i: int, req: Request) -> list[dict[str, Any]]:
            nonlocal prev
            prompt = await client.apply_template({**chat, "messages": req.messages})
            tokens = await client.tokenize(prompt, add_special=True)
            shared = len(os.path.commonprefix([prev, tokens]))  # noqa: RUF071 - any sequences
            records.append(
                RequestRecord(
                    i, req.turn, req.step, len(tokens), len(tokens) - shared, shared, 0.0, 0.0
                )
            )
            prev = tokens
            return req.messages

        await drive(agent, send)
    return StrategyRun(
        "baseline (counted)", 0, tuple(records), live_turns=tuple(agent.live_turns())
    )


async def run_demo(
    settings: Settings,
    *,
    params: ScriptParams,
    echo: Echo,
    swa_full: bool = True,
    cms: int = 256,
    compare_with: Sequence[str] = ("drop-oldest", "mask-lag1"),
    on_server: Callable[[LlamaServer], None] | None = None,
    on_dashboard: OnDashboard | None = None,
    keep: Path | None = None,
    progress: TextIO | None = None,
) -> DemoResult:
    """Run the demo; every server it starts is stopped before this returns or raises.

    ``on_dashboard`` is told Sakur4's dashboard address while its gateway runs;
    ``keep``: where Sakur4's store goes, to outlive the demo (default: a temporary
    directory, removed at the end); ``progress``: where each strategy's progress is
    shown while it runs (call i of n, tokens processed, time left; None: nowhere).
    """
    session = generate(params)
    window = params.window
    mode = swa_full_mode(window) if swa_full else ring(window, cms)
    runs: list[StrategyRun] = []
    baseline: StrategyRun | None = None
    with tempfile.TemporaryDirectory(prefix="sakur4-demo-") as tmp:
        workdir = Path(tmp) if keep is None else keep
        for kind in ("sakur4", *compare_with):
            # die_with_parent: a demo killed outright (not Ctrl-C) takes its server along.
            with LlamaServer.from_settings(settings, mode.flags, die_with_parent=True) as server:
                if on_server is not None:
                    on_server(server)
                cache = "--swa-full (any prefix)" if swa_full else f"checkpoint ring (-cms {cms})"
                echo(
                    f"llama-server pid {server.pid} on {server.url}: {server.model.name}, "
                    f"window {window:,}, {cache}"
                )
                if baseline is None:
                    baseline = await appended_baseline(server.url, session)
                calls = len(baseline.records)
                echo(_running(kind, params.turns, calls))
                meter = Meter(
                    f"  {kind}",
                    calls,
                    processed="tokens processed",
                    waiting=_WAITING.get(kind),
                )
                with shown(meter, progress) if progress is not None else nullcontext(meter):
                    run = await run_strategy(
                        Strategy(kind, kind),
                        server.url,
                        session,
                        settings=settings,
                        mode=mode,
                        summary_tokens=SUMMARY_TOKENS,
                        workdir=workdir,
                        on_dashboard=on_dashboard,
                        on_call=meter.advance,
                    )
                runs.append(run)
            echo(
                f"  done: {run.processed:,} tokens processed, {run.events} management events, "
                f"{run.rereads} re-reads"
            )
    assert baseline is not None
    result = ModeResult(mode, baseline, tuple(runs))
    receipts = tuple(Receipt.from_dict(r) for r in runs[0].detail.get("receipts", []))
    return DemoResult(result, receipts, params)


def write_outputs(demo: DemoResult, out: Path) -> tuple[Path, Path | None, str | None]:
    """Write the Markdown table and the plot: (table, plot or None, why no plot)."""
    out.mkdir(parents=True, exist_ok=True)
    table = out / "demo.md"
    calls = len(demo.result.baseline.records)
    table.write_text(_document(demo.result, demo.params, calls))
    plot = out / "demo.png"
    note = write_plot([demo.result], plot)
    return table, (plot if note is None else None), note


# What a strategy's replay waits for before its first call is answered.
_WAITING = {"sakur4": "starting the gateway (it probes the server first)"}


def _running(kind: str, turns: int, calls: int) -> str:
    what = {
        "sakur4": "through the Sakur4 gateway",
        "drop-oldest": "with drop-oldest truncation (straight to the server)",
        "summarise": "with summarise-and-replace compaction (straight to the server)",
        "mask-lag1": "with rolling observation masking, lag 1 (straight to the server)",
        "mask-10turns": "with observation masking, a 10-turn window (straight to the server)",
        "opencode": "with OpenCode's prune-then-compact (straight to the server)",
        "opencode-1.18": "with OpenCode 1.18's anchored compaction (straight to the server)",
        "claude-code": "with Claude Code's clear-then-compact (straight to the server)",
        "claude-code-2.1": "with Claude Code 2.1's auto-compact (straight to the server)",
    }.get(kind, kind)
    return f"replaying a {turns}-turn agent session ({calls} calls) {what} ..."


def summary_note(result: ModeResult) -> str | None:
    """What the table must say when a strategy generated summaries: they were capped."""
    if not any(r.summaries for r in result.runs):
        return None
    return (
        f"Summaries capped at {SUMMARY_TOKENS} generated tokens each (the harnesses let "
        "theirs run longer): their real cost is higher than shown."
    )


def _document(result: ModeResult, params: ScriptParams, calls: int) -> str:
    note = summary_note(result)
    return (
        f"# sakur4 demo\n\nScript: {params.describe()}; {calls} calls (baseline), "
        f"{result.mode.name}. Real llama-server runs; the baseline counted with the "
        "server's tokenizer.\n\n" + markdown(rows(result)) + "\n" + (f"\n{note}\n" if note else "")
    )


def side_by_side(result: ModeResult) -> str:
    """The terminal table: the baseline, Sakur4 and what it is compared with; with
    the summaries' tokens and time, and their cap, when a strategy generated some."""
    note = summary_note(result)
    if note is None:
        return text_table(rows(result), SHORT)
    columns = [*SHORT, "summary tokens", "summary s"]
    return text_table(rows(result), columns) + "\n" + note
