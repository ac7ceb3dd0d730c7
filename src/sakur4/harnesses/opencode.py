"""OpenCode (sst/opencode; 1.18.33 recorded in tests/wrap/fixtures): its User-Agent and
prompt, its attached files' natures, its compaction request that quotes the
conversation, its run and saved configuration.

- On the wire: User-Agent ``opencode/…``, or its HTTP library's (the AI SDK), when its
  system prompt opens with "You are opencode" / "You are OpenCode".
- Its messages (``session/prompt.ts``, ``message-v2.ts``): an attached file is a text
  part ``Called the Read tool with the following input: {"filePath":…}`` and the next
  text part, the Read tool's output (tool output); ``<system-reminder>`` parts are
  instructions.
- Its compaction (tests/wrap/fixtures/opencode_compaction.json): the whole conversation
  again as text, under a summariser's system prompt and with no tools ("Here is the
  conversation so far: <conversation>…</conversation>"): rewritten onto the session's
  cached prompt (harnesses/compaction.py).
- Its run: ``OPENCODE_CONFIG_CONTENT``, merged over the user's own opencode.json files
  for the run; ``--save`` writes ``opencode.json`` in ``$XDG_CONFIG_HOME/opencode``
  (``~/.config/opencode``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sakur4.harnesses.base import (
    TOLD_WINDOW,
    Edit,
    Harness,
    Launch,
    QuotesConversation,
    Slices,
    Target,
    Wrap,
    home_of,
    is_reminder,
    message_text,
)
from sakur4.vocabulary import Nature

DISPLAY = "OpenCode"
_CALL = re.compile(r"\s*Called the \S+ tool (?:with the following input:|on )")
_NAMED = re.compile(r"\bopencode\b", re.I)


def _sent(system: str, messages: Sequence[Mapping[str, Any]]) -> bool:
    return _NAMED.search(system) is not None


def _slices(message: Mapping[str, Any]) -> Slices:
    """Text parts, joined as the store joins them (a newline between parts); a Read
    call's synthetic part and the output after it are tool output. A message of one
    string: a reminder is an instruction, anything else the user's words."""
    parts = message.get("content")
    if not isinstance(parts, list):
        whole = message_text(message) or ""
        return [(whole, Nature.INSTRUCTION if is_reminder(whole) else Nature.REQUEST)]
    texts: list[str] = []
    for p in parts:
        if isinstance(p, str):
            texts.append(p)
        elif isinstance(p, Mapping) and isinstance(p.get("text"), str):
            texts.append(p["text"])
    out: Slices = []
    after_call = False
    for i, t in enumerate(texts):
        sep = "\n" if i + 1 < len(texts) else ""
        if _CALL.match(t):
            nature, after_call = Nature.TOOL_OUTPUT, True
        elif after_call:
            nature, after_call = Nature.TOOL_OUTPUT, False
        elif is_reminder(t):
            nature = Nature.INSTRUCTION
        else:
            nature = Nature.REQUEST
        out.append((t + sep, nature))
    return out or [("", Nature.REQUEST)]


def _recipe(t: Target, args: Sequence[str], tmp: Path) -> Launch:
    # OPENCODE_CONFIG_CONTENT is merged over the user's own opencode.json files for this
    # run. "limit.output" caps every request, the title request included: without it a
    # small model wrote ~2,150 tokens of title for 10 minutes (issue 30).
    config: dict[str, object] = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"sakur4/{t.model}",
        "small_model": f"sakur4/{t.model}",
        "provider": {
            "sakur4": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Sakur4 gateway",
                "options": {
                    "baseURL": t.openai_base,
                    "apiKey": t.key,
                    **t.project_headers(),
                },
                "models": {
                    t.model: {
                        "name": t.model,
                        "limit": {"context": t.window or TOLD_WINDOW, "output": t.max_output},
                    }
                },
            }
        },
    }
    if t.mcp is not None:
        config["mcp"] = {
            "sakur4": {
                "type": "local",
                "command": [t.mcp.command, *t.mcp.args],
                "environment": dict(t.mcp.env),
                "enabled": True,
            }
        }
    env = {
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        # The provider is declared here: no need to fetch the public model catalogue.
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
    }
    window = t.window or TOLD_WINDOW
    return Launch(("opencode", *args), env, mcp=t.mcp is not None, window=window)


def _saved(run: Launch, environ: Mapping[str, str]) -> list[Edit]:
    xdg = environ.get("XDG_CONFIG_HOME")
    where = (Path(xdg) if xdg else home_of(environ) / ".config") / "opencode" / "opencode.json"
    content = json.loads(run.env["OPENCODE_CONFIG_CONTENT"])
    content.pop("$schema", None)
    return [Edit(where, content)]


HARNESS = Harness(
    "opencode",
    DISPLAY,
    order=20,
    agents=("opencode",),
    openings=("You are opencode", "You are OpenCode"),
    sent=_sent,
    slices=_slices,
    compaction=QuotesConversation(
        "Here is the conversation so far:",
        "<conversation>",
        "</conversation>",
        "[Assistant]: ",
        # Said before its own words, which refer to "the <conversation> tags above".
        "The conversation above is the conversation to summarise (what the instruction "
        "below calls the conversation in <conversation> tags).",
    ),
    wrap=Wrap(
        "opencode",
        DISPLAY,
        "opencode",
        _recipe,
        window_why="measured: told the server's, OpenCode never compacted and processed 6% "
        "more (11,219 vs 10,595 tokens, 0 turns failed either way; docs/harnesses.md)",
        saved=_saved,
    ),
)
