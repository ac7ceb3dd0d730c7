"""The values of the episodic stream: an episode, its tier and kind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Tier = Literal["live", "masked", "referenced", "archived", "dropped"]
# Ordered from the prompt outwards: each step down shows less (SPEC §7).
TIERS: tuple[Tier, ...] = get_args(Tier)
# Folded tiers are out of the prompt (or stubbed) but whole in the store.
FOLDED: frozenset[Tier] = frozenset({"masked", "referenced", "archived"})

Kind = Literal["message", "tool_call", "tool_result", "note"]
KINDS: tuple[Kind, ...] = get_args(Kind)


@dataclass(frozen=True)
class Episode:
    """One message, tool call, tool result or note, as stored.

    ``content`` is the searchable text (None once Dropped: only the tombstone row
    remains); ``payload`` is the original message as JSON, so a gateway can send it
    back unchanged. ``depends_on`` lists the episodes this one needs (a tool
    result needs its call).
    """

    id: int
    project_id: int
    session: str
    turn: int
    seq: int
    role: str
    kind: Kind
    tool_name: str | None
    tool_call_id: str | None
    content: str | None
    payload: str | None
    content_hash: str
    tokens: int
    tier: Tier
    droppable: bool
    created_at: str
    depends_on: tuple[int, ...] = ()
