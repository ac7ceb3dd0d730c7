"""aider (Aider-AI/aider, through LiteLLM's OpenAI client): its User-Agent and prompts,
its repo map's and files' natures, its run with the window and repo map sized to the
server's window.

- On the wire: User-Agent ``aider/…``, or LiteLLM's, when its system prompt opens with
  "Act as an expert software developer" / "… code analyst" (or it summarises its
  history: "*Briefly* summarize this partial conversation").
- Its messages (``coders/base_coder.py``, ``base_prompts.py``, ``prompts.py``,
  ``linter.py``): the repo map, read-only and chat files are instructions, sent as user
  messages; ``I ran this command:`` (``/run``), lint output and its commit notes are
  tool output. Its chat-files and read-only-files messages carry files whole: a large
  fenced block in them is an attachment (episodes/natures.py).
- Its run: ``AIDER_*`` variables (read below its command-line flags, so the user's own
  flags still win) and two files: the model settings (the answer's cap, the project
  header) and the metadata (the window). It is told the server's window less the output
  cap, with its repo map sized to fit (:func:`aider_sizes`, bench/aider_window.py): its
  map, files and system prompt are current-turn content, which the gateway never folds.
  Its configuration is YAML, which ``--save`` does not rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sakur4.harnesses.base import (
    TOLD_WINDOW,
    Harness,
    Launch,
    Slices,
    Target,
    Wrap,
    joined_text,
    message_text,
)
from sakur4.vocabulary import Nature

# The share of its window its repo map may take, and the floors below which aider is not
# usable (issue 41, measured with bench/aider_window.py; docs/harnesses.md).
AIDER_MAP_SHARE = 1 / 8
AIDER_MIN_MAP = 512
AIDER_MIN_WINDOW = 2048

# aider's prompts, by what they start with.
_CONTEXT = (
    "Here are summaries of some files present in my git repository.",
    "Here are some READ ONLY files, provided for your reference.",
    "I have *added these files to the chat*",
    "I am not sharing any files that you can edit yet.",
    "Don't try and edit any existing code without asking me to add the files",
    "I switched to a new code base.",
    "I added these files to the chat:",
)
# Its messages that carry files whole (its chat files, its read-only files).
_FILES = (
    "Here are some READ ONLY files, provided for your reference.",
    "I have *added these files to the chat*",
)
_TOOL = (
    "I ran this command:",
    "# Fix any errors below, if possible.",
    "## Running: ",
    "I committed the changes with git hash",
    "I updated the files.",
    "I edited the files myself.",
)


def _sent(system: str, messages: Sequence[Mapping[str, Any]]) -> bool:
    return system.startswith("Act as an expert") or any(
        (message_text(m) or "").startswith(_CONTEXT[:3])
        for m in messages
        if m.get("role") == "user"
    )


def _slices(message: Mapping[str, Any]) -> Slices:
    text = message_text(message)
    whole = text if text is not None else (joined_text(message) or "")
    if whole.startswith(_TOOL):
        return [(whole, Nature.TOOL_OUTPUT)]
    if whole.startswith(_CONTEXT):
        return [(whole, Nature.INSTRUCTION)]
    return [(whole, Nature.REQUEST)]


@dataclass(frozen=True, slots=True)
class AiderSizes:
    """What aider is told: the window (its ``max_input_tokens``) and the repo map's
    budget, with files in the chat and without."""

    window: int
    map_tokens: int
    map_no_files: int

    @property
    def multiplier(self) -> float:
        return self.map_no_files / self.map_tokens


def aider_sizes(server_window: int | None, max_output: int) -> AiderSizes:
    """aider's window and repo map, derived from the server's window and the output cap.

    aider's repo map, its system prompt and the files in its chat are current-turn
    content, which the gateway never folds; aider sizes its map from the window it is
    told (an eighth of it, 1,024-4,096 tokens, times 2 with no file in the chat), so told
    1,000,000 its map grew to ~8,000 tokens and with its prompt overflowed an 8,192
    window on every turn (issue 41). Told the server's window less the answer's cap,
    what aider sends fits where the answer still has room; the map gets
    :data:`AIDER_MAP_SHARE` of that, twice that with no file in the chat (capped at
    aider's own 4,096). A server that reports no window: the large window, as before."""
    if server_window is None:
        return AiderSizes(TOLD_WINDOW, 4096, 8192)
    window = max(server_window - max_output, AIDER_MIN_WINDOW)
    map_tokens = max(AIDER_MIN_MAP, min(4096, int(window * AIDER_MAP_SHARE)))
    return AiderSizes(window, map_tokens, min(8192, 2 * map_tokens))


def _recipe(t: Target, args: Sequence[str], tmp: Path) -> Launch:
    # Aider reads AIDER_* variables below its command-line flags, so the user's own flags
    # still win. The settings file caps each answer (max_tokens) and names the project;
    # the metadata file gives the window, without which aider reports a window of 0.
    sizes = aider_sizes(t.server_window, t.max_output)
    window = t.window or sizes.window
    model = f"openai/{t.model}"
    headers = json.dumps(t.project_headers().get("headers", {}))
    settings = (
        f"- name: {json.dumps(model)}\n"
        "  extra_params:\n"
        f"    max_tokens: {t.max_output}\n"
        f"    extra_headers: {headers}\n"
    )
    metadata = {
        model: {
            "max_input_tokens": window,
            "max_output_tokens": t.max_output,
            "max_tokens": t.max_output,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }
    env = {
        "AIDER_MODEL": model,
        "AIDER_WEAK_MODEL": model,
        "AIDER_EDITOR_MODEL": model,
        "AIDER_OPENAI_API_BASE": t.openai_base,
        "AIDER_OPENAI_API_KEY": t.key,
        "AIDER_MODEL_SETTINGS_FILE": str(tmp / ".aider.model.settings.yml"),
        "AIDER_MODEL_METADATA_FILE": str(tmp / ".aider.model.metadata.json"),
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_SHOW_RELEASE_NOTES": "false",
        "AIDER_ANALYTICS": "false",  # this session only (--analytics-disable is permanent)
        # The repo map sized to the window (aider's own sizing follows the told window).
        "AIDER_MAP_TOKENS": str(sizes.map_tokens),
        "AIDER_MAP_MULTIPLIER_NO_FILES": f"{sizes.multiplier:g}",
        # The map is re-ranked for the names each message mentions ("auto") and sits
        # before the history: every question naming another file re-processed all of
        # it (400 of 6,621 tokens reused, bench/aider_window.py). "files": re-drawn only
        # when the files in the chat change.
        "AIDER_MAP_REFRESH": "files",
    }
    files = {
        ".aider.model.settings.yml": settings,
        ".aider.model.metadata.json": json.dumps(metadata, indent=2),
    }
    notes: tuple[str, ...] = (
        f"aider's repo map: {sizes.map_tokens:,} tokens, {sizes.map_no_files:,} with no file "
        "in the chat (--map-tokens to change it)",
    )
    if t.mcp is not None:
        notes += ("aider has no MCP client: the memory tools are not offered to it",)
    return Launch(("aider", *args), env, files, notes, window=window)


HARNESS = Harness(
    "aider",
    "aider",
    order=30,
    agents=("aider",),
    openings=(
        "Act as an expert software developer",
        "Act as an expert code analyst",
        "*Briefly* summarize this partial conversation",
    ),
    sent=_sent,
    slices=_slices,
    file_messages=_FILES,
    wrap=Wrap(
        "aider",
        "aider",
        "aider",
        _recipe,
        window_why="the server's less the output cap, measured: told 1,000,000, aider's "
        "repo map overflowed an 8,192 window (1 of 4 turns refused, 4.1% reuse); told this, "
        "with the map below, 4 of 4 served, 49% reuse, 90% once files were in the chat "
        "(docs/harnesses.md)",
        save_refusal="aider's configuration is YAML (.aider.conf.yml, "
        ".aider.model.settings.yml), which Sakur4 does not rewrite: docs/harnesses.md "
        "lists the lines to add",
    ),
)
