"""Which manager each strategy kind runs with: a kind the demo does not know is refused,
never run unmanaged (the benchmark's Headroom runs drop-oldest behind its proxy)."""

from __future__ import annotations

import pytest

from sakur4.demo.compare import Strategy, manager_for
from sakur4.demo.direct import DropOldest, NoManagement
from sakur4.demo.peers import ClaudeCode, OpenCode, OpenCodeAnchored


def test_each_kind_has_its_manager() -> None:
    assert isinstance(manager_for(Strategy("drop-oldest", "drop-oldest"), 128), DropOldest)
    assert isinstance(manager_for(Strategy("opencode", "opencode"), 128), OpenCode)
    assert isinstance(manager_for(Strategy("none", "baseline"), 128), NoManagement)
    new = manager_for(Strategy("opencode-1.18", "opencode-1.18"), 128)
    assert isinstance(new, OpenCodeAnchored)
    # Each release under its own name: the old policy clears, 2.1.332 (locally) does not.
    old, now = (manager_for(Strategy(k, k), 128) for k in ("claude-code", "claude-code-2.1"))
    assert isinstance(old, ClaudeCode)
    assert isinstance(now, ClaudeCode)
    assert (old.name, old.clear, now.name, now.clear) == (
        "claude-code",
        True,
        "claude-code-2.1",
        False,
    )


def test_an_unknown_kind_is_refused_not_run_unmanaged() -> None:
    with pytest.raises(ValueError, match="no strategy of kind 'headroom'"):
        manager_for(Strategy("headroom", "headroom"), 128)
