"""The seed's ladder deadlock, as a regression.

Many short messages at heavy pressure: each one's Masked stub is longer than the
message, so a ladder that refuses steps reclaiming nothing never moves, and the
session sits above the trigger forever ("would not reclaim anything at this
tier"). The ladder must take those steps and relieve the pressure within a few
turns. docs/verification/engine.md records this test failing with the old rule.
"""

from __future__ import annotations

import pytest

from sakur4.engine import Tier, Verdict
from sakur4.engine.folds import fold_line, shown_text

from .sessions import Session, message

WINDOW = 32_768
TURNS = 6
SHORT = 12  # tokens (48 characters): its fold line does not halve it


def short_history() -> list:  # type: ignore[type-arg]
    eps = [message(0, "system", 40)]
    i = 1
    while len(eps) * (SHORT + 4) < 26_422:
        eps.append(message(i, "user" if i % 2 else "assistant", SHORT))
        i += 1
    return eps


@pytest.mark.parametrize("checkpoints", ["ring", "every", "none"])
def test_short_messages_reach_referenced_and_the_pressure_is_relieved(checkpoints: str) -> None:
    s = Session(window=WINDOW, checkpoints=checkpoints)
    s.warm(short_history())
    # The deadlock's shape: a stub that does not pay (here, not half the message's
    # length), so Masked renders as the message itself and reclaims nothing.
    e = s.episodes[5]
    assert len(fold_line(e)) * 2 > len(e.content)
    assert shown_text(e, Tier.MASKED) == e.content
    start = len(s.sent) / WINDOW
    assert start >= 0.75

    pressures = []
    next_id = len(s.episodes)
    for _ in range(TURNS):
        plan, _ = s.turn([message(next_id, "user", SHORT)])
        next_id += 1
        assert plan.verdict is not Verdict.REFUSED, plan.reason
        assert all(st.reclaimed >= 0 for st in plan.steps)
        pressures.append(len(s.sent) / WINDOW)
        assert pressures[-1] < 1.0  # every prompt it sent fits the window
        if pressures[-1] < s.profile.trigger:
            break

    assert pressures[-1] < s.profile.trigger, f"still under pressure after {TURNS}: {pressures}"
    assert any(t >= Tier.REFERENCED for t in s.tiers().values())
