"""Crash safety, bounded: a few SIGKILLs of each writer, the store checked after each one.

The long run is ``PYTHONPATH=bench python -m reliability.crash`` (docs/RELIABILITY.md).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from reliability.crash import CrashHarness, run_targets

from sakur4.backends.launcher import LlamaServer

SEED = 1107


def _assert_clean(harness: CrashHarness, runs: list, kills: int) -> None:
    for run in runs:
        print(f"{run.target}: {run.kills} kills, {run.requests} writes sent, {run.acked} acked")
    assert not harness.violations, harness.violations[:5]
    assert not harness.tracebacks, harness.tracebacks[:3]
    assert not [e for r in runs for e in r.errors], [e for r in runs for e in r.errors][:3]
    assert all(r.kills >= kills for r in runs), [(r.target, r.kills) for r in runs]
    assert harness.acks.count > 0, "nothing was acknowledged: the kills came too early"


def test_sigkill_serve_and_index_loses_nothing_acknowledged(tmp_path: Path) -> None:
    harness = CrashHarness(tmp_path, random.Random(SEED), files_count=250)
    runs = run_targets(harness, ("serve-stdio", "serve-http", "index"), kills=3)
    _assert_clean(harness, runs, kills=3)
    assert harness.checker.checks >= 9
    assert len(harness.checker.facts) > 0, "the index never wrote a fact"


@pytest.mark.backend
def test_sigkill_gateway_loses_nothing_acknowledged(
    llama_ring: LlamaServer, tmp_path: Path
) -> None:
    # The kill window starts at two turn-times of this estimate; from 3 s, on a loaded
    # 2-core machine both kills came before any turn was answered (nothing to check).
    harness = CrashHarness(
        tmp_path, random.Random(SEED), backend=llama_ring.url, files_count=5, turn_seconds=10.0
    )
    runs = run_targets(harness, ("gateway",), kills=2)
    _assert_clean(harness, runs, kills=2)
    assert harness.acks.sent_turns, "no chat request was sent"
