"""What the prompt shows for an episode at each tier: the content or one line.

Every rendering is a pure function of the episode and its tier — no clock, no
counter, no session state — so the same episode at the same tier is the same
bytes every turn and the server's cached prefix survives.
"""

from __future__ import annotations

from functools import lru_cache

from sakur4.engine.episode import Episode
from sakur4.vocabulary import Kind, Tier

# Sits at the head, before the anchor block: it is what makes folds usable and
# the anchors trustworthy to the model. Fixed text, so the head caches.
PREAMBLE = (
    "Context management (Sakur4): to keep this conversation inside the context window, "
    "older parts of it may appear folded. A folded item names its episode id (#id); "
    "open_fold(id) returns it in full and recall(query) searches everything in this "
    "session. Pinned constraints are never folded or removed: follow them."
)
# Where the request offers no open_fold tool (aider, a plain client, a harness without
# Sakur4's MCP server): naming a tool the model cannot call invites a call that fails.
PREAMBLE_WITHOUT_TOOLS = (
    "Context management (Sakur4): to keep this conversation inside the context window, "
    "older parts of it may appear folded into one line naming an episode id (#id), "
    "without their content; if you need one again, ask for it (read the file again, run "
    "the command again). Pinned constraints are never folded or removed: follow them."
)

# Every rendering is new tokens the server processes once, for every episode that
# folds. A fold is one line that says where the content went (``open_fold``), at
# about the cost of observation masking's placeholder, and the same line at Masked
# and Referenced, so the second step changes no bytes. (A header with the size and
# a 60-character preview cost S8 3,600 tokens over masking's placeholder on an
# exact-prefix server and 3,500 on the ring: docs/DESIGN.md, issue 28.)


def _what(e: Episode) -> str:
    if e.kind == Kind.TOOL_RESULT:
        return f"{e.tool_name or 'tool'} result"
    if e.kind == Kind.TOOL_CALL:
        return f"{e.tool_name or 'tool'} call"
    return f"{e.role} {e.kind}"


def fold_line(e: Episode) -> str:
    """The Masked and Referenced rendering: the episode named, and how to get it back."""
    return f"[{_what(e)} #{e.id}: open_fold({e.id})]"


# Renderings are pure, so they are remembered: the planner asks ~8 times per episode
# per turn (2,400 asks at 100k tokens), and each ask built the stub it measured.
# Bounded, as a key holds its episode (and content) alive in a long-running daemon:
# a 100k-token session is ~300-1,000 episodes at one or two tiers each.
_REMEMBERED = 1 << 13


@lru_cache(maxsize=_REMEMBERED)
def rendering(e: Episode, tier: Tier) -> Tier:
    """The tier whose text ``e`` shows at ``tier``: a rendering is never longer than
    what it replaces (SPEC §7) — nor taken unless it halves it — so where a stub
    would not, the lower tier's text stays. A tool call keeps its arguments until Archived: they are
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
    # Worth its own tokens only at half the length or less: a new rendering is
    # processed once, and one saving a few tokens cost more than it gave back.
    return Tier.MASKED if len(fold_line(e)) * 2 <= len(e.content) else Tier.LIVE


@lru_cache(maxsize=_REMEMBERED)
def shown_text(e: Episode, tier: Tier) -> str:
    """The text the prompt carries for ``e`` at ``tier`` (a tool call's arguments string).

    Archived and Dropped show nothing; callers leave the episode out.
    """
    shown = rendering(e, tier)
    if shown is Tier.MASKED:
        return fold_line(e)
    return e.content if shown is Tier.LIVE else ""
