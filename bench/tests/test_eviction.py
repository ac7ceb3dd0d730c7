"""The eviction benchmark's strategy list and its tables from kept runs, without a server."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import eviction
import pytest
import runs
from strategies import all_strategies

from sakur4.demo.agent import ScriptedAgent, drive
from sakur4.demo.compare import ring
from sakur4.demo.records import RequestRecord, StrategyRun
from sakur4.demo.scenario import Request
from sakur4.demo.script import generate, preset
from sakur4.settings import Settings


def test_every_sakur4_variant_is_a_settings_override() -> None:
    for st in all_strategies():
        assert all(k in Settings.model_fields for k, _ in st.overrides), st.label
    assert {"live_results", "tidy_budget"} <= {
        k for st in all_strategies() for k, _ in st.overrides
    }


def _kept(strategy: str, simulated: bool, processed: list[int], failed: int = 0) -> runs.Stored:
    records = tuple(
        RequestRecord(i, i, 0, n, n, 0, 1.0, 1.0, failed="HTTP 400" if i < failed else None)
        for i, n in enumerate(processed)
    )
    key = runs.RunKey("S8-x", "ring", strategy, simulated)
    return runs.Stored(key, {}, StrategyRun(strategy, 8192, records), key.path())


def test_a_baseline_that_failed_turns_is_never_the_measure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen 2026-12-03: the real S8 baseline lost 15 turns to the model's 32,768-token
    # context (whatever -c said), processed 32,549 tokens instead of 62,303, and the
    # table doubled every strategy's overhead (Sakur4 49,743 for 19,989).
    failed_real = _kept("baseline", False, [100, 100, 100], failed=2)
    sakur4 = _kept("sakur4", False, [500, 500])
    mode = ring(8192)
    monkeypatch.setattr(eviction.kept, "stored", lambda *_: [failed_real, sakur4])
    res, notes = eviction.assemble(preset("S8"), mode, None, False)
    assert res is None
    assert "failed 2 turns" in notes[0]
    assert "--sim-baseline" in notes[0]
    simulated = _kept("baseline", True, [400, 400])
    monkeypatch.setattr(eviction.kept, "stored", lambda *_: [failed_real, simulated, sakur4])
    res, notes = eviction.assemble(preset("S8"), mode, None, False)
    assert res is not None
    assert res.baseline.processed == 800
    assert "not used" in notes[0]


@pytest.mark.parametrize(
    ("size", "shape"), [("demo", "plain"), ("S8", "plain"), ("demo", "claude-code")]
)
def test_the_progress_total_is_the_calls_the_agent_makes_without_rereads(
    size: str, shape: str
) -> None:
    """The bench's meter counts call i of script_calls(session): what the scripted agent
    sends when every needed result is still in the prompt (Claude Code's shape attaches
    the reads to the user's message: no call of their own)."""
    params = preset(size)
    session = generate(params if shape == "plain" else replace(params, shape=shape))

    async def send(i: int, req: Request) -> list[dict[str, Any]]:
        return req.messages  # everything sent in full: no re-read

    calls = asyncio.run(drive(ScriptedAgent(session), send))
    assert eviction.script_calls(session) == calls > len(session.turns)


def test_a_peers_run_of_an_older_reading_is_not_shown_as_current(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen 2026-12-07: OpenCode 1.18's ring and KV-shifting rows were runs kept from an
    # earlier reading of the release (19 compactions; the current one makes 8), shown
    # beside the current --swa-full row because a peer's run carried no version.
    base = _kept("baseline", True, [400, 400])
    unversioned = _kept("opencode-1.18", True, [900, 900])
    stale = _kept("opencode-1.18", True, [800, 800])
    stale = replace(stale, key=replace(stale.key, engine="peers-00000000"))
    mode = ring(8192)
    monkeypatch.setattr(eviction.kept, "stored", lambda *_: [base, unversioned, stale])
    res, _ = eviction.assemble(preset("S8"), mode, None, False)
    assert res is not None
    assert [r.strategy for r in res.runs] == []
    current = _kept("opencode-1.18", True, [700, 700])
    current = replace(
        current, key=replace(current.key, engine=runs.policy_version("opencode-1.18"))
    )
    monkeypatch.setattr(eviction.kept, "stored", lambda *_: [base, unversioned, current, stale])
    res, _ = eviction.assemble(preset("S8"), mode, None, False)
    assert res is not None
    assert [r.processed for r in res.runs] == [1400]
