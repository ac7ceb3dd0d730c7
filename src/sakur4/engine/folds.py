"""What the prompt shows for an episode at each tier: the content, a stub, or a line.

Every rendering is a pure function of the episode and its tier — no clock, no
counter, no session state — so the same episode at the same tier is the same
bytes every turn and the server's cached prefix survives.
"""

from __future__ import annotations

import json

from sakur4.engine.episode import Episode, Kind
from sakur4.engine.tiers import Tier

# Sits at the head, before the anchor block: it is what makes folds usable and
# the anchors trustworthy to the model. Fixed text, so the head caches.
PREAMBLE = (
    "Context management (Sakur4): to keep this conversation inside the context window, "
    "older parts of it may appear folded. A folded item names its episode id; "
    "open_fold(id) returns it in full and recall(query) searches everything in this "
    "session. Pinned constraints are never folded or removed: follow them."
)

PREVIEW_CHARS = 160
# A folded tool call keeps its place in the assistant message; its arguments
# must stay valid JSON because llama-server parses them for some templates.
FOLD_KEY = "sakur4_folded"


def _what(e: Episode) -> str:
    if e.kind in (Kind.TOOL_CALL, Kind.TOOL_RESULT):
        return f"{e.kind} {e.tool_name or 'tool'}"
    return f"{e.role} {e.kind}"


def _preview(content: str) -> str:
    # Slice before splitting so a huge result costs O(preview), not O(content).
    flat = " ".join(content[: PREVIEW_CHARS * 2].split())
    if len(flat) > PREVIEW_CHARS or len(content) > PREVIEW_CHARS * 2:
        return flat[:PREVIEW_CHARS] + "…"
    return flat


def masked_stub(e: Episode) -> str:
    """The Masked rendering: header (kind, tool, id, original size), preview, how to open."""
    return (
        f"[folded {_what(e)} · episode {e.id} · {e.tokens} tokens]\n"
        f"{_preview(e.content)}\n"
        f"open with open_fold({e.id})"
    )


def reference_line(e: Episode) -> str:
    """The Referenced rendering: one line naming the episode and how to get it back."""
    # Kept strictly shorter than the Masked stub, so Masked → Referenced always shrinks.
    return f"[episode {e.id} · {_what(e)} · {e.tokens} tokens · recall: open_fold({e.id})]"


def shown_text(e: Episode, tier: Tier) -> str:
    """The text the prompt carries for ``e`` at ``tier`` (a tool call's arguments string).

    Archived and Dropped show nothing; callers leave the episode out.
    """
    if tier is Tier.LIVE:
        return e.content
    if tier is Tier.MASKED:
        text = masked_stub(e)
    elif tier is Tier.REFERENCED:
        text = reference_line(e)
    else:
        return ""
    if e.kind == Kind.TOOL_CALL:
        return json.dumps({FOLD_KEY: text}, ensure_ascii=False)
    return text
