"""The episodic stream's record: one episode as stored.

Its tier and kind are the foundation's (:mod:`sakur4.vocabulary`), the same values
the context engine plans with; the store writes a tier's label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

    def as_dict(self, max_chars: int | None = None) -> dict[str, Any]:
        """The episode as every surface shows it (the CLI's ``--json``, the MCP tools,
        the gateway's fold route): one form, its fields named as here. ``max_chars``
        cuts the content (``truncated`` says so; the whole is one ``open_fold`` away)."""
        text = self.content
        cut = text is not None and max_chars is not None and len(text) > max_chars
        return {
            "id": self.id,
            "session": self.session,
            "turn": self.turn,
            "seq": self.seq,
            "role": self.role,
            "kind": self.kind.value,
            "nature": self.nature.value if self.nature is not None else None,
            "tool_name": self.tool_name,
            "tool_call_id": self.tool_call_id,
            "tier": self.tier.label,
            "tokens": self.tokens,
            "created_at": self.created_at,
            "depends_on": list(self.depends_on),
            "content": text[:max_chars] if cut and text is not None else text,
            "truncated": cut,
        }
