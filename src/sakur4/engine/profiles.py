"""Eviction profiles: when to act (trigger) and how far down to go (target).

The profile follows the capability probe because the right ratios depend on
whether the server can resume from a cut: with no checkpoint source every event
is a full re-prefill, so events should be deep and rare (WindowFirst); measured
in the seed, CacheFirst there paid 29% more tokens per turn and bought nothing.

A server that shifts the KV of kept text into place (llama-server ``--cache-reuse``)
gets ShiftFirst: a later trigger (0.80), and at it the planner removes the oldest
answered turns whole instead of folding in place, where that re-processes less;
below it, above the drain line, it removes them one a call while that is free
(``drain``). Issue 40: a fold ends the server's reuse, a removal does not.
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
    # A server that shifts kept runs into place (engine.removal): below the trigger,
    # above this fraction of the window, the oldest answered turn leaves whole while
    # that is free; nothing folds in place. None: the server does not shift.
    drain: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.target < self.trigger <= 1.0:
            raise InputError(
                f"profile {self.name}: need 0 < target < trigger <= 1, "
                f"got target {self.target} and trigger {self.trigger}"
            )
        if self.drain is not None and not self.target < self.drain < self.trigger:
            raise InputError(
                f"profile {self.name}: need target < drain < trigger, got drain {self.drain}"
            )


CACHE_FIRST = Profile("cache-first", 0.75, 0.55)
WINDOW_FIRST = Profile("window-first", 0.70, 0.30)
BALANCED = Profile("balanced", 0.75, 0.45)
# Its trigger and drain line ranked with the simulator (issue 40, --cache-reuse 256;
# overhead incl. re-reads at demo / S8 / S16, drop-oldest 327 / 8,081 / 33,633):
# trigger 0.75, drain 0.72: 510 / 6,552 / 35,526; 0.80 and 0.77: 81 / 6,728 / 34,248;
# 0.85 and 0.82: 518 / 7,120 (a drain line lower than 0.70 re-read more at demo).
SHIFT_FIRST = Profile("shift-first", 0.80, 0.55, drain=0.77)

_BY_NAME = {p.name: p for p in (CACHE_FIRST, WINDOW_FIRST, BALANCED, SHIFT_FIRST)}
_BY_SOURCE = {
    "detected": CACHE_FIRST,
    "none": WINDOW_FIRST,
    "uncertain": BALANCED,
    "shifting": SHIFT_FIRST,
}


def choose_profile(checkpoint_source: str, override: str | None = None) -> Profile:
    """The profile for the probe's checkpoint source (detected/none/uncertain/shifting),
    or the override.

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
