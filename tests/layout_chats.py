"""Conversations for the token-layout tests (tests/backends/layout/), and the check
that a layout's spans tile the prompt."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from sakur4.backends.layout import TokenLayout


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def conversation(turns: int, tag: str | None = None) -> list[dict[str, Any]]:
    """A system prompt, then per turn a user question, an assistant tool call and its
    result (non-ASCII text in both), then a last user message."""
    tag = tag or secrets.token_hex(3)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": f"[{tag}] You are terse."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i}: what is in file_{i}.py?\n"})
        msgs.append(
            {
                "role": "assistant",
                "content": f"Reading file_{i}.py 🎉",
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"n": {i}}}'},
                    }
                ],
            }
        )
        msgs.append(
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"def f{i}(): 日本語 {i}"}
        )
    msgs.append({"role": "user", "content": "Summarise."})
    return msgs


def growing(messages: list[dict[str, Any]], first: int, step: int) -> list[list[dict[str, Any]]]:
    """The requests of a conversation that grows ``step`` messages a turn."""
    return [messages[:n] for n in range(first, len(messages) + 1, step)]


def check_partition(layout: TokenLayout) -> None:
    """The spans tile the prompt: BOS, then each message, then the generation prompt."""
    start = layout.spans[0].start
    assert start == 1  # the BOS the server adds
    for s in layout.spans:
        assert s.start == start
        assert s.end >= s.start
        start = s.end
    assert layout.generation_start == start
    joined = list(layout.tokens[:1])
    for s in layout.spans:
        joined += layout.tokens[s.start : s.end]
    joined += layout.tokens[layout.generation_start :]
    assert tuple(joined) == layout.tokens
