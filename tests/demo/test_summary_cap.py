"""The demo's table says when summaries were capped (without a server): a compacting
strategy's cost is shown with its summaries' tokens and time, and the cap named."""

from __future__ import annotations

from click.testing import CliRunner

from sakur4.cli import cli
from sakur4.cli.demo import DEFAULT_COMPARE
from sakur4.demo.compare import ModeResult, swa_full
from sakur4.demo.records import RequestRecord, StrategyRun, SummaryCall
from sakur4.demo.run import SUMMARY_TOKENS, side_by_side, summary_note


def _run(name: str, summaries: tuple[SummaryCall, ...] = ()) -> StrategyRun:
    records = (RequestRecord(0, 0, 0, 900, 900, 0, 90.0, 5.0),)
    return StrategyRun(name, 4096, records, summaries=summaries)


def _result(*runs: StrategyRun) -> ModeResult:
    return ModeResult(swa_full(4096), _run("baseline (counted)"), runs)


def test_without_summaries_the_table_is_the_short_one() -> None:
    result = _result(_run("sakur4"), _run("drop-oldest"))
    assert summary_note(result) is None
    table = side_by_side(result)
    assert "summary tokens" not in table
    assert "capped" not in table


def test_a_strategy_that_summarised_shows_its_summaries_and_their_cap() -> None:
    summary = SummaryCall(3, 2000, 2000, SUMMARY_TOKENS, 800.0, 6000.0, 6900.0)
    result = _result(_run("sakur4"), _run("opencode", (summary,)))
    table = side_by_side(result)
    head, *rows = table.splitlines()
    assert "summary tokens" in head
    assert "summary s" in head
    opencode = next(r for r in rows if r.startswith("opencode"))
    assert f" {SUMMARY_TOKENS} " in opencode
    assert " 6.9" in opencode
    assert table.endswith(str(summary_note(result)))
    assert f"capped at {SUMMARY_TOKENS} generated tokens" in table


def test_the_default_demo_runs_no_strategy_that_summarises() -> None:
    """The default ends in minutes on a CPU: the summarising peers run when named."""
    summarising = {"opencode", "opencode-1.18", "claude-code", "claude-code-2.1", "summarise"}
    assert set(DEFAULT_COMPARE.split(",")).isdisjoint(summarising)
    helped = CliRunner().invoke(cli, ["demo", "--help"])
    assert helped.exit_code == 0, helped.output
    # Whitespace removed: the help wraps where it likes (inside "drop-oldest" too).
    assert f"[default:{DEFAULT_COMPARE}]" in "".join(helped.output.split())
