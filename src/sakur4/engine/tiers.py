"""The ladder's rules: a step, what it gives back, and the one rule that may refuse one.

An episode descends Live → Masked → Referenced → Archived → Dropped, at most one
rung per turn. The only refusal is at the final rung (Dropped's gate): refusing
steps that reclaim nothing deadlocked the ladder once, because a Masked stub is
longer than a short message (design record, "Graduated eviction"). The tiers
themselves are the foundation's (:class:`sakur4.vocabulary.Tier`), shared with the
store and the surfaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from sakur4.vocabulary import Tier


def reclaimed(before: int, after: int) -> int:
    """Tokens a step gave back; a step whose stub outgrew its content gave back 0.

    Saturating on purpose, here at the site: the seed's plain subtraction
    underflowed exactly when a Masked stub was longer than its message.
    """
    return before - after if before > after else 0


def refusal(to_tier: Tier, *, droppable: bool, live_dependent: bool) -> str | None:
    """Why a one-rung step to ``to_tier`` is refused, or None when it may be taken.

    Only Dropped's gate refuses. A step that reclaims nothing now (a stub longer
    than its content) is still taken so the episode reaches Referenced next turn.
    """
    if to_tier is Tier.DROPPED:
        if not droppable:
            return "not marked droppable"
        if live_dependent:
            return "a Live episode depends on it"
    return None


@dataclass(frozen=True, slots=True)
class Step:
    """One episode moved one rung this turn, with its rendered size either side."""

    episode_id: int
    from_tier: Tier
    to_tier: Tier
    tokens_before: int
    tokens_after: int

    @property
    def reclaimed(self) -> int:
        """Tokens this step gave back, never negative (see :func:`reclaimed`)."""
        return reclaimed(self.tokens_before, self.tokens_after)


@dataclass(frozen=True, slots=True)
class Held:
    """A step the final rung's gate refused: the episode stays where it is."""

    episode_id: int
    tier: Tier
    reason: str
