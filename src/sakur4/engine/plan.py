"""A turn's decision: what steps, where the prompt changes, and the verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from sakur4.engine.episode import Episode
from sakur4.engine.profiles import Profile
from sakur4.engine.tiers import Held, Step
from sakur4.vocabulary import Tier


class Verdict(StrEnum):
    """What a plan achieved (SPEC §7)."""

    FITS = "fits"
    RECLAIMED = "reclaimed"
    STEPPING = "stepping"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Plan:
    """One turn's decision: the steps, the cut, the predicted reuse, and why.

    ``rider_at``: anchors pinned since the head was cached render just before the
    first message whose first episode index is at least this (None: at the end).
    A rider stays where it was first sent, so it is cached like any message
    instead of moving to the end, and being re-processed, on every call.
    """

    verdict: Verdict
    profile: Profile
    window: int
    prompt_tokens: int
    new_tokens: int
    target_tokens: int
    steps: tuple[Step, ...]
    held: tuple[Held, ...]
    requested_cut: int | None
    chosen_cut: int | None
    reused: int
    reprefill: int
    block_anchors: tuple[int, ...]
    joined_anchors: tuple[int, ...]
    anchor_budget: int
    reason: str
    rider_at: int | None = None
    # The head's text on folds (PlanSettings.preamble); None: folds.PREAMBLE.
    preamble: str | None = None
    moves: Mapping[int, Tier] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    @property
    def pressure(self) -> float:
        """Prompt tokens before the plan, as a fraction of the window."""
        return self.prompt_tokens / self.window

    def tier_of(self, episode: Episode) -> Tier:
        """The tier ``episode`` has after this plan."""
        return self.moves.get(episode.id, episode.tier)
