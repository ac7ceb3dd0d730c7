"""Drop-oldest's one rule (engine/truncation.py), shared by the demo's direct strategy,
the offline benchmark and the dashboard's estimate."""

from __future__ import annotations

from sakur4.engine.truncation import oldest_to_drop


def test_whole_messages_go_until_the_need_is_covered() -> None:
    assert oldest_to_drop([100, 200, 300, 400], ["user", "assistant", "user", "user"], 250) == 2
    assert oldest_to_drop([100, 200, 300], ["user", "assistant", "user"], 0) == 0


def test_a_tool_result_leaves_with_its_call() -> None:
    roles = ["user", "assistant", "tool", "tool", "user"]
    # 300 frees enough after the call, but its two results go with it.
    assert oldest_to_drop([100, 200, 50, 50, 400], roles, 300) == 4


def test_the_newest_message_always_stays() -> None:
    assert oldest_to_drop([100, 200, 300], ["user", "assistant", "user"], 10_000) == 2
    assert oldest_to_drop([500], ["user"], 10_000) == 0
    assert oldest_to_drop([], [], 10) == 0
