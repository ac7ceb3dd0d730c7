"""The planner's settings as one value: the window, the profile, and the policy (the
choices the §11 benchmark ranks).

:class:`PlanSettings` is built once per session — by the gateway once per backend
window, rebuilt when the window changes; by the bench once per run — and passed to
every :func:`~sakur4.engine.planner.plan_turn` call: two plans with different
settings can run side by side in one process. (The policy used to be a module
global that the benchmark swapped, and the window, profile and policy were three
keywords repeated at every call site.)
"""

from __future__ import annotations

from dataclasses import dataclass

from sakur4.engine.profiles import Profile
from sakur4.errors import InputError


@dataclass(frozen=True, slots=True)
class Policy:
    """How the planner trades re-processed tokens against what the agent still sees.

    ``live_results``: below the trigger, the newest answered tool results that
    never fold — the agent's working memory, the quality dial. An older answered
    result folds only while that is nearly free (``tidy_budget``), which behind a
    Live result it never is: so with 1 or more, results stay Live until the
    trigger, and with 0 each folds on the call after it was answered. At the
    trigger every answered result may fold; the event folds those that buy room
    below the trigger for the fewest re-processed tokens.

    ``tidy_budget``: below the trigger, the most cached tokens a fold may make the
    server re-process beyond what the turn changes anyway. A result folded on the
    call right after it was answered costs about its stub (what follows it is new
    anyway); every call of delay puts cached material behind it.

    ``cut_tolerance``: at the trigger, how far before the requested cut the chosen
    resume point may lie while the planner looks for the cut cheapest per token of
    room it buys below the trigger.
    """

    live_results: int = 1
    tidy_budget: int = 128
    cut_tolerance: int = 4096

    def __post_init__(self) -> None:
        for name in ("live_results", "tidy_budget", "cut_tolerance"):
            if getattr(self, name) < 0:
                raise InputError(f"policy {name} must not be negative")


DEFAULT_POLICY = Policy()


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """What every plan of a session shares: the server's window (tokens), the eviction
    profile (when to act, how far down to go) and the policy."""

    window: int
    profile: Profile
    policy: Policy = DEFAULT_POLICY
    # The head's text on folds (engine.folds: PREAMBLE, or PREAMBLE_WITHOUT_TOOLS where
    # the request offers no open_fold tool); None: PREAMBLE.
    preamble: str | None = None

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise InputError(f"the window must be positive, got {self.window}")

    @property
    def target_tokens(self) -> int:
        """Where an event steps the prompt down to."""
        return int(self.window * self.profile.target)

    @property
    def trigger_tokens(self) -> float:
        """The prompt size at which the planner acts."""
        return self.window * self.profile.trigger
