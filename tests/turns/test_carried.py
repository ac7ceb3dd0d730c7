"""What a session carries between turns: a memo never outlives the message it holds."""

from __future__ import annotations

from typing import Any

from sakur4.episodes.natures import classify
from sakur4.turns.carried import Classified

REMINDER = "<system-reminder>Called the Read tool with {}</system-reminder>\n"


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are Claude Code, an agent."},
        {"role": "user", "content": REMINDER + "Fix the totals."},
        {"role": "assistant", "content": "Reading."},
        {"role": "user", "content": "And the tests."},
    ]


def test_an_edited_message_is_classified_again_and_only_it() -> None:
    memo = Classified()
    msgs = conversation()
    assert memo.classify(msgs, "claude-code") == classify(msgs, "claude-code")
    kept = list(memo.parts)
    edited = [*msgs[:1], {"role": "user", "content": "Fix the totals."}, *msgs[2:]]
    grown = [*edited, {"role": "assistant", "content": "Done."}]
    assert memo.classify(grown, "claude-code") == classify(grown, "claude-code")
    assert [a is b for a, b in zip(memo.parts, kept, strict=False)] == [True, False, True, True]
    assert len(memo.parts) == 5


def test_another_harness_classifies_every_message_again() -> None:
    memo = Classified()
    msgs = conversation()
    memo.classify(msgs, "claude-code")
    kept = list(memo.parts)
    assert memo.classify(msgs, "generic") == classify(msgs, "generic")
    assert not any(a is b for a, b in zip(memo.parts, kept, strict=True))
    assert len(classify(msgs[1:2], "claude-code")) != len(classify(msgs[1:2], "generic"))
