"""A request's messages checked whole, a conversation's unchanged ones once (issue 27)."""

from __future__ import annotations

from typing import Any

import pytest

from sakur4.errors import InputError, TooLarge
from sakur4.turns import validate
from sakur4.turns.validate import MAX_MESSAGE_BYTES, Checked, chat_messages


def conversation(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for i in range(turns):
        out += [
            {"role": "user", "content": f"Step {i}."},
            {"role": "assistant", "content": f"Done {i}."},
        ]
    return out


def test_a_turn_checks_only_the_messages_that_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = Checked()
    chat_messages({"messages": conversation(3)}, checked)
    seen: list[Any] = []
    real = validate._surely_within

    def spy(message: Any, limit: int) -> bool:
        seen.append(message)
        return real(message, limit)

    monkeypatch.setattr(validate, "_surely_within", spy)
    grown = conversation(4)
    assert chat_messages({"messages": grown}, checked) == grown
    assert seen == grown[7:]  # the new turn's two messages, nothing before them


def test_a_message_edited_since_is_checked_again() -> None:
    checked = Checked()
    chat_messages({"messages": conversation(3)}, checked)
    edited = conversation(4)
    edited[3] = {"role": "narrator", "content": "Done 1."}
    with pytest.raises(InputError, match=r"messages\[3\] has role 'narrator'"):
        chat_messages({"messages": edited}, checked)
    edited[3] = {"role": "assistant", "content": "\x00" * (MAX_MESSAGE_BYTES // 5)}
    with pytest.raises(TooLarge, match=r"messages\[3\]"):
        chat_messages({"messages": edited}, checked)


def test_a_refused_request_is_not_remembered_as_passed() -> None:
    checked = Checked()
    bad = [*conversation(2), {"role": "tool", "content": "no call id"}]
    for _ in range(2):  # the same request again: refused again, not waved through
        with pytest.raises(InputError, match=r"messages\[5\] is a tool result without"):
            chat_messages({"messages": bad}, checked)
