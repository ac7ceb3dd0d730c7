"""Codex CLI (openai/codex): refused by ``sakur4 wrap``. It speaks only the OpenAI
Responses API (``/v1/responses``) since 0.122 (``wire_api = "chat"`` was removed), and
the gateway serves Chat Completions and Anthropic Messages. Nothing else is known of its
requests: they are read as the generic harness's."""

from __future__ import annotations

from sakur4.harnesses.base import Harness, Wrap

DISPLAY = "Codex CLI"

HARNESS = Harness(
    "codex",
    DISPLAY,
    order=40,
    wrap=Wrap(
        "codex",
        DISPLAY,
        "codex",
        None,
        refusal="Codex CLI speaks only the OpenAI Responses API (/v1/responses) since "
        '0.122 (wire_api = "chat" was removed), and the gateway serves Chat Completions '
        "and Anthropic Messages: Codex cannot run through Sakur4 yet",
    ),
)
