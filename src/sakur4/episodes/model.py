"""The episodic stream's record: one episode as stored.

Its tier and kind are the foundation's (:mod:`sakur4.vocabulary`), the same values
the context engine plans with; the store writes a tier's label.
"""

from __future__ import annotations

from dataclasses import dataclass

from sakur4.vocabulary import Kind, Nature, Tier


@dataclass(frozen=True)
class Episode:
    """One message, tool call, tool result or note, as stored.

    ``content`` is the searchable text (None once Dropped: only the tombstone row
    remains); ``payload`` is the original message as JSON, so a gateway can send it
    back unchanged. ``depends_on`` lists the episodes this one needs (a tool
    result needs its call). ``nature``: what it is (None: recorded before episodes
    were classified); ``part`` > 0: a slice of the harness message before it.
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
    nature: Nature | None = None
    part: int = 0
