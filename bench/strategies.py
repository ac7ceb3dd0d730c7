"""The benchmark's strategies (``--only``), each a :class:`~sakur4.demo.compare.Strategy`
that ``run_strategy`` runs: the demo's kinds, each Sakur4 variant as a Settings
override, and Headroom's proxy in front of drop-oldest."""

from __future__ import annotations

from collections.abc import Sequence

from sakur4.demo.compare import Strategy
from sakur4.settings import ProfileName

BASELINE = Strategy("none", "baseline")

# Headroom's proxy in front of drop-oldest: eviction.py starts it (bench/headroom.py)
# and runs drop-oldest behind it.
HEADROOM = Strategy("headroom", "headroom")


def simple_strategies() -> list[Strategy]:
    """The ways harnesses cope today (and the paper's reference), no Sakur4."""
    return [
        Strategy("drop-oldest", "drop-oldest"),
        Strategy("summarise", "summarise"),
        Strategy("mask-lag1", "mask-lag1"),
        Strategy("mask-10turns", "mask-10turns"),
    ]


def peer_strategies() -> list[Strategy]:
    """The harnesses' own policies as published (:mod:`sakur4.demo.peers`)."""
    return [
        Strategy("opencode", "opencode"),
        Strategy("opencode-1.18", "opencode-1.18"),
        Strategy("claude-code", "claude-code"),
        Strategy("claude-code-2.1", "claude-code-2.1"),
    ]


def default_strategies() -> list[Strategy]:
    """Sakur4 with the probe's profile, then the simple policies and the peers."""
    return [Strategy("sakur4", "sakur4"), *simple_strategies(), *peer_strategies()]


def forced_profiles() -> list[Strategy]:
    """Sakur4 with each eviction profile forced (SAKUR4_EVICTION_PROFILE)."""
    names: list[ProfileName] = ["cache-first", "balanced", "window-first"]
    return [Strategy("sakur4", f"sakur4 forced {n}", profile=n) for n in names]


def live_results_variants(values: Sequence[int] = (0, 1, 2, 3)) -> list[Strategy]:
    """Sakur4 with the quality dial ``live_results`` set."""
    return [
        Strategy("sakur4", f"sakur4 live_results={v}", overrides=(("live_results", v),))
        for v in values
    ]


def tidy_budget_variants(values: Sequence[int] = (0, 1024)) -> list[Strategy]:
    """Sakur4 with the planner's ``tidy_budget`` (re-processing a fold below the trigger
    may cost) set."""
    return [
        Strategy("sakur4", f"sakur4 tidy_budget={v}", overrides=(("tidy_budget", v),))
        for v in values
    ]


def all_strategies() -> list[Strategy]:
    return [
        *default_strategies(),
        HEADROOM,
        Strategy("none", "none"),
        *forced_profiles(),
        *live_results_variants(),
        *tidy_budget_variants(),
    ]


def strategy(label: str) -> Strategy:
    for st in all_strategies():
        if st.label == label:
            return st
    names = ", ".join(s.label for s in all_strategies())
    raise ValueError(f"unknown strategy {label!r} (one of: {names})")
