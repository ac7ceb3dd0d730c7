"""Eviction profiles: when to act (trigger) and how far down to go (target).

The profile follows the capability probe because the right ratios depend on
whether the server can resume from a cut: with no checkpoint source every event
is a full re-prefill, so events should be deep and rare (WindowFirst); measured
in the seed, CacheFirst there paid 29% more tokens per turn and bought nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sakur4.errors import InputError


@dataclass(frozen=True, slots=True)
class Profile:
    """Trigger and target as fractions of the window, and why this profile applies."""

    name: str
    trigger: float
    target: float
    reason: str = ""

    def __post_init__(self) -> None:
        if not 0.0 < self.target < self.trigger <= 1.0:
            raise InputError(
                f"profile {self.name}: need 0 < target < trigger <= 1, "
                f"got target {self.target} and trigger {self.trigger}"
            )


CACHE_FIRST = Profile("cache-first", 0.75, 0.55)
WINDOW_FIRST = Profile("window-first", 0.70, 0.30)
BALANCED = Profile("balanced", 0.75, 0.45)

_BY_NAME = {p.name: p for p in (CACHE_FIRST, WINDOW_FIRST, BALANCED)}
_BY_SOURCE = {"detected": CACHE_FIRST, "none": WINDOW_FIRST, "uncertain": BALANCED}


def choose_profile(checkpoint_source: str, override: str | None = None) -> Profile:
    """The profile for the probe's checkpoint source (detected/none/uncertain), or the override.

    ``override`` is ``SAKUR4_EVICTION_PROFILE`` and is honoured, not second-guessed.
    """
    if checkpoint_source not in _BY_SOURCE:
        raise InputError(
            f"unknown checkpoint source {checkpoint_source!r}; "
            f"expected one of {', '.join(sorted(_BY_SOURCE))}"
        )
    if override is not None:
        if override not in _BY_NAME:
            raise InputError(
                f"unknown eviction profile {override!r}; "
                f"expected one of {', '.join(sorted(_BY_NAME))}"
            )
        why = (
            f"SAKUR4_EVICTION_PROFILE={override} overrides the probe "
            f"(checkpoint source {checkpoint_source})"
        )
        return replace(_BY_NAME[override], reason=why)
    chosen = _BY_SOURCE[checkpoint_source]
    return replace(chosen, reason=f"probe: checkpoint source {checkpoint_source}")
