"""Profiles follow the probe and honour the override."""

from __future__ import annotations

import pytest

from sakur4.engine import Profile, choose_profile
from sakur4.errors import InputError


@pytest.mark.parametrize(
    ("source", "name", "trigger", "target"),
    [
        ("detected", "cache-first", 0.75, 0.55),
        ("none", "window-first", 0.70, 0.30),
        ("uncertain", "balanced", 0.75, 0.45),
    ],
)
def test_the_probe_chooses(source: str, name: str, trigger: float, target: float) -> None:
    p = choose_profile(source)
    assert (p.name, p.trigger, p.target) == (name, trigger, target)
    assert p.reason == f"probe: checkpoint source {source}"


def test_the_override_wins_and_says_so() -> None:
    p = choose_profile("detected", "window-first")
    assert (p.name, p.trigger, p.target) == ("window-first", 0.70, 0.30)
    assert "SAKUR4_EVICTION_PROFILE=window-first" in p.reason
    assert "detected" in p.reason


def test_unknown_names_are_input_errors() -> None:
    with pytest.raises(InputError, match="checkpoint source"):
        choose_profile("maybe")
    with pytest.raises(InputError, match="eviction profile"):
        choose_profile("none", "fast")


def test_a_profile_needs_target_below_trigger() -> None:
    with pytest.raises(InputError):
        Profile("odd", 0.5, 0.6)


@pytest.mark.parametrize("drain", [0.55, 0.50, 0.80, 0.90])
def test_a_drain_line_lies_strictly_between_target_and_trigger(drain: float) -> None:
    # ShiftFirst removes above its drain line and plans at its trigger: a line at or
    # past either end would remove below the target or never before the trigger.
    with pytest.raises(InputError, match=f"need target < drain < trigger, got drain {drain}"):
        Profile("p", 0.80, 0.55, drain=drain)
    assert Profile("p", 0.80, 0.55, drain=0.77).drain == 0.77
    assert Profile("p", 0.80, 0.55).drain is None
