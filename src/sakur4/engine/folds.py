"""What the prompt shows for an episode at each tier: the content, a stub, or a line.

Every rendering is a pure function of the episode and its tier — no clock, no
counter, no session state — so the same episode at the same tier is the same
bytes every turn and the server's cached prefix survives.
"""

from __future__ import annotations

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

PREVIEW_CHARS = 80


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


def rendering(e: Episode, tier: Tier) -> Tier:
    """The tier whose text ``e`` shows at ``tier``: a rendering is never longer than
    what it replaces (SPEC §7), so where a stub would outgrow the text, the lower
    tier's text stays. A tool call keeps its arguments until Archived: they are
    short, and the call must stay readable beside its folded result.

    Steps between tiers with the same rendering change no bytes, so they cost no
    re-processing at any position; the planner takes them when due. (A stub longer
    than its message once made the first rungs cost more than they saved, and a
    1-token ``Ok.`` grew into a 25-token stub.)
    """
    if tier is Tier.LIVE or tier >= Tier.ARCHIVED:
        return tier
    if e.kind == Kind.TOOL_CALL:
        return Tier.LIVE
    shown = Tier.LIVE
    length = len(e.content)
    for t, text in ((Tier.MASKED, masked_stub), (Tier.REFERENCED, reference_line)):
        if t > tier:
            break
        # A stub is at most ~PREVIEW_CHARS + 120 characters: a long text needs no render.
        size = len(text(e)) if length < PREVIEW_CHARS + 400 else 0
        if size < length:
            shown, length = t, size or length
    return shown


def shown_text(e: Episode, tier: Tier) -> str:
    """The text the prompt carries for ``e`` at ``tier`` (a tool call's arguments string).

    Archived and Dropped show nothing; callers leave the episode out.
    """
    shown = rendering(e, tier)
    if shown is Tier.MASKED:
        return masked_stub(e)
    if shown is Tier.REFERENCED:
        return reference_line(e)
    return e.content if shown is Tier.LIVE else ""
