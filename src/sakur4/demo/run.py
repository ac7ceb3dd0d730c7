"""``sakur4 demo``: a short session through the gateway against a llama-server it starts.

The server is the set-up's binary with the packaged model, on loopback, with flags
that give it checkpoints (the ring, ``-cms`` small), stopped by its own pid however
the demo ends (errors and Ctrl-C included: :class:`~sakur4.backends.local.LlamaServer`
is a context manager). The same short script then goes to a second fresh server with
the same flags under drop-oldest truncation, for the side-by-side totals. The
baseline — what the script costs with no eviction at all — is counted with the
server's tokenizer instead of run: the tokens each call appends to the previous
prompt (an append-only cache processes exactly those; the benchmark runs it for real).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.local import LlamaServer
from sakur4.demo.compare import CHAT, ModeResult, Strategy, ring, run_strategy
from sakur4.demo.compare import swa_full as swa_full_mode
from sakur4.demo.records import RequestRecord, StrategyRun
from sakur4.demo.report import markdown, rows, text_table, write_plot
from sakur4.demo.scenario import CORRECTION, Request, build_session, replay
from sakur4.receipts import Receipt
from sakur4.settings import Settings

Echo = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    """What the demo ran: the side-by-side runs and Sakur4's receipts."""

    result: ModeResult
    receipts: tuple[Receipt, ...]
    turns: int


async def appended_baseline(url: str, requests: Sequence[Request]) -> StrategyRun:
    """The no-eviction baseline without prefilling it: per call, the tokens it adds
    after the longest prefix it shares with the call before (server's own template
    and tokenizer). Times are left at zero."""
    records = []
    prev: list[int] = []
    async with LlamaCppClient(url, timeout=600.0) as client:
        for i, req in enumerate(requests):
            prompt = await client.apply_template({**CHAT, "messages": req.messages})
            tokens = await client.tokenize(prompt, add_special=True)
            shared = len(os.path.commonprefix([prev, tokens]))  # noqa: RUF071 - any sequences
            records.append(
                RequestRecord(
                    i, req.turn, req.step, len(tokens), len(tokens) - shared, shared, 0.0, 0.0
                )
            )
            prev = tokens
    return StrategyRun("baseline (counted)", 0, tuple(records))


async def run_demo(
    settings: Settings,
    *,
    turns: int,
    file_chars: int,
    window: int,
    cms: int,
    echo: Echo,
    swa_full: bool = False,
    compare_with: Sequence[str] = ("drop-oldest",),
    on_server: Callable[[LlamaServer], None] | None = None,
) -> DemoResult:
    """Run the demo; every server it starts is stopped before this returns or raises."""
    requests = replay(build_session(turns=turns, file_chars=file_chars))
    mode = swa_full_mode(window) if swa_full else ring(window, cms)
    runs: list[StrategyRun] = []
    baseline: StrategyRun | None = None
    with tempfile.TemporaryDirectory(prefix="sakur4-demo-") as tmp:
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
                    baseline = await appended_baseline(server.url, requests)
                echo(_running(kind, turns, len(requests)))
                run = await run_strategy(
                    Strategy(kind, kind),
                    server.url,
                    requests,
                    settings=settings,
                    mode=mode,
                    anchor=CORRECTION,
                    summary_tokens=128,
                    workdir=Path(tmp),
                )
                runs.append(run)
            echo(f"  done: {run.processed:,} tokens processed, {run.events} management events")
    assert baseline is not None
    result = ModeResult(mode, baseline, tuple(runs))
    receipts = tuple(
        Receipt(**{k: v for k, v in r.items() if k not in ("pressure", "reprefilled")})
        for r in runs[0].detail.get("receipts", [])
    )
    return DemoResult(result, receipts, turns)


def write_outputs(demo: DemoResult, out: Path) -> tuple[Path, Path | None, str | None]:
    """Write the Markdown table and the plot: (table, plot or None, why no plot)."""
    out.mkdir(parents=True, exist_ok=True)
    table = out / "demo.md"
    calls = len(demo.result.baseline.records)
    table.write_text(_document(demo.result, demo.turns, calls))
    plot = out / "demo.png"
    note = write_plot([demo.result], plot)
    return table, (plot if note is None else None), note


def _running(kind: str, turns: int, calls: int) -> str:
    what = {
        "sakur4": "through the Sakur4 gateway",
        "drop-oldest": "with drop-oldest truncation (straight to the server)",
        "summarise": "with summarise-and-replace compaction (straight to the server)",
    }.get(kind, kind)
    return f"replaying a {turns}-turn agent session ({calls} calls) {what} ..."


def _document(result: ModeResult, turns: int, calls: int) -> str:
    return (
        f"# sakur4 demo\n\n{turns} turns, {calls} calls, window {result.mode.window:,}, "
        f"{result.mode.name}. Baseline counted with the server's tokenizer.\n\n"
        + markdown(rows(result))
        + "\n"
    )


def side_by_side(result: ModeResult) -> str:
    """The terminal table: the baseline, Sakur4 and what it is compared with."""
    return text_table(rows(result))
