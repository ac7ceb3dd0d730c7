"""The ladder's rules, tested where they live."""

from __future__ import annotations

import pytest

from sakur4.engine import Step, Tier
from sakur4.engine.tiers import reclaimed, refusal


def test_a_stub_longer_than_its_message_reclaims_zero_not_a_negative() -> None:
    # The seed's underflow: a 34-token message became an 80-token stub and the
    # report subtracted the two counts.
    assert reclaimed(34, 80) == 0
    assert Step(7, Tier.LIVE, Tier.MASKED, 34, 80).reclaimed == 0


def test_reclaimed_counts_what_a_shrinking_step_gave_back() -> None:
    assert reclaimed(3812, 61) == 3751
    assert reclaimed(61, 61) == 0
    assert Step(7, Tier.MASKED, Tier.REFERENCED, 80, 18).reclaimed == 62


@pytest.mark.parametrize("to", [Tier.MASKED, Tier.REFERENCED, Tier.ARCHIVED])
def test_no_rung_before_the_last_refuses(to: Tier) -> None:
    assert refusal(to, droppable=False, live_dependent=True) is None


def test_dropped_needs_droppable_and_no_live_dependent() -> None:
    assert refusal(Tier.DROPPED, droppable=False, live_dependent=False) == "not marked droppable"
    assert refusal(Tier.DROPPED, droppable=True, live_dependent=True) == (
        "a Live episode depends on it"
    )
    assert refusal(Tier.DROPPED, droppable=True, live_dependent=False) is None
