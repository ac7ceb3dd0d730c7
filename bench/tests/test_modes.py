"""The benchmark's server modes: which model a mode's server runs and which rules its
simulation predicts it by, without a server."""

from __future__ import annotations

from pathlib import Path

import eviction
import pytest
from modes import LFM2, mode, server_settings

from sakur4.backends import ring
from sakur4.backends.ring import CheckpointRules, SentPrompt
from sakur4.settings import Settings

URL = "http://127.0.0.1:9"  # never called: the simulator is only built


def _resumes(rules: CheckpointRules) -> int:
    """Where a prompt that changes a cached 1,000-token prompt at 900 resumes."""
    first = SentPrompt(tuple(range(1000)), user_starts=(100,))
    again = SentPrompt((*range(900), *range(5000, 5100)), user_starts=(100,))
    state = ring.advance(ring.advance(ring.empty_slot(rules), first), again)
    return state.reuse[-1]


@pytest.mark.parametrize(("key", "min_step"), [("recurrent", 8192), ("recurrent-cms256", 256)])
def test_a_recurrent_mode_is_simulated_with_the_recurrent_rules(key: str, min_step: int) -> None:
    chat = eviction.simulated(mode(key, 8192), URL)
    assert chat.rules == CheckpointRules(n_swa=0, min_step=min_step, recurrent=True)
    # A recurrent state cannot be cut back to the change at 900: it resumes at the
    # newest checkpoint before it, the first prompt's end - 516 (Gemma 3's ring
    # still holds position 900 in its window and resumes there).
    assert _resumes(chat.rules) == 1000 - 516
    assert _resumes(eviction.simulated(mode("default", 8192), URL).rules) == 900


def test_a_recurrent_mode_runs_its_own_model(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path)
    with pytest.raises(ValueError, match="scripts/setup-tests builds it"):
        server_settings(mode("recurrent", 8192), settings)
    target = tmp_path / "models" / LFM2.file
    target.parent.mkdir()
    target.write_bytes(b"GGUF")
    assert server_settings(mode("recurrent", 8192), settings).model == target
    assert server_settings(mode("ring", 8192), settings) is settings
    assert "RANDOM weights" in mode("recurrent", 8192).name
