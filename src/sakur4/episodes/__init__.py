"""The episodic stream and recall (SPEC §6): what the gateway and MCP server call."""

from sakur4.episodes.messages import estimate_tokens
from sakur4.episodes.model import FOLDED, KINDS, TIERS, Episode, Kind, Tier
from sakur4.episodes.recall import RecallHit, recall
from sakur4.episodes.stream import (
    NOTES_SESSION,
    forget_turn,
    last_turn,
    open_fold,
    record_episodes,
    remember,
    session_episodes,
    set_tiers,
)
from sakur4.episodes.vectors import embed_episodes, embed_pending

__all__ = [
    "FOLDED",
    "KINDS",
    "NOTES_SESSION",
    "TIERS",
    "Episode",
    "Kind",
    "RecallHit",
    "Tier",
    "embed_episodes",
    "embed_pending",
    "estimate_tokens",
    "forget_turn",
    "last_turn",
    "open_fold",
    "recall",
    "record_episodes",
    "remember",
    "session_episodes",
    "set_tiers",
]
