"""Which harness a request came from (issue 31, item 6: sessions were listed by hash
alone), by User-Agent and by request shape. Header values as the harnesses send them
(Claude Code's `claude-cli/…`, OpenCode's `opencode/…`, the SDKs' own)."""

from __future__ import annotations

from typing import Any

import pytest

from sakur4.gateway.harnesses import harness_of

CLAUDE_SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=cli"},
    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
]


@pytest.mark.parametrize(
    ("agent", "body", "name"),
    [
        ("claude-cli/2.1.332 (external, cli)", {"system": CLAUDE_SYSTEM}, "Claude Code 2.1.332"),
        ("opencode/1.0.3 ai-sdk/provider-utils/3.0.9", {}, "OpenCode 1.0.3"),
        # OpenCode through the AI SDK's OpenAI-compatible provider: the SDK's agent.
        (
            "ai-sdk/openai-compatible/1.0.19 runtime/bun/1.2.21",
            {"messages": [{"role": "system", "content": "You are opencode, an agent"}]},
            "OpenCode",
        ),
        # aider through LiteLLM and the openai SDK: its own system prompt says so.
        (
            "OpenAI/Python 1.99.1",
            {"messages": [{"role": "system", "content": "Act as an expert software developer.\n"}]},
            "aider",
        ),
        (None, {"system": CLAUDE_SYSTEM}, "Claude Code"),
        ("curl/8.5.0", {"messages": [{"role": "user", "content": "hi"}]}, "curl 8.5.0"),
        ("OpenAI/Python 1.99.1", {"messages": []}, "OpenAI/Python"),
        (None, {"messages": "not a list"}, "unknown"),
        (None, None, "unknown"),
    ],
)
def test_the_harness_is_named(agent: str | None, body: Any, name: str) -> None:
    headers = {} if agent is None else {"user-agent": agent}
    assert harness_of(headers, body) == name
