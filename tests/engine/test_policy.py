"""The planner's policy choices measured by bench/eviction.py (docs/design/eviction.md).

Each test shows the default beside the alternative it replaced, on the same session:
the alternative is set through ``planner.POLICY``, as the benchmark does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sakur4.engine import Anchor, Episode, Tier, Verdict, planner
from sakur4.engine.planner import Policy

from .sessions import Session, call, message, result

Use = Callable[[Policy], None]


@pytest.fixture
def use() -> Iterator[Use]:
    """Set ``planner.POLICY`` for one test; the default comes back after it."""
    saved = planner.POLICY

    def set_policy(p: Policy) -> None:
        planner.POLICY = p

    yield set_policy
    planner.POLICY = saved


def opening(system: int = 50) -> list[Episode]:
    return [message(0, "system", system), message(1, "user", 30)]


def early_stub_then_bulky_late() -> Session:
    """A small answered result near the head, 1,500 tokens of talk, a bulky result late."""
    s = Session(window=100_000, live_results=0)
    s.warm(
        [
            *opening(),
            call(2, "a"),
            result(3, "a", 120, 2),
            *[message(4 + k, "assistant" if k % 2 else "user", 300) for k in range(5)],
            call(9, "b"),
            result(10, "b", 3000, 9),
        ]
    )
    return s


def test_tidy_takes_the_cut_with_the_largest_net_gain() -> None:
    s = early_stub_then_bulky_late()
    plan, _ = s.turn([message(11, "assistant", 20)])
    assert plan.verdict is Verdict.FITS
    # Masking the early result too would save ~70 tokens and re-process 1,500.
    assert [st.episode_id for st in plan.steps] == [10]


def test_by_gain_alone_a_small_stub_near_the_head_re_processes_the_talk(
    use: Use,
) -> None:
    use(Policy(tidy_by="gain"))
    s = early_stub_then_bulky_late()
    plan, _ = s.turn([message(11, "assistant", 20)])
    assert [st.episode_id for st in plan.steps] == [3, 10]
    assert plan.reprefill > 1500


def test_with_tidy_off_nothing_steps_below_the_trigger(use: Use) -> None:
    use(Policy(tidy=False))
    s = early_stub_then_bulky_late()
    plan, _ = s.turn([message(11, "assistant", 20)])
    assert plan.verdict is Verdict.FITS
    assert plan.steps == ()


def rider_then_tidy(system: int = 50) -> Session:
    """The head is cached when the anchor is pinned (it rides); then a bulky result
    lying late is masked below the trigger: the plan changes the prompt near its start."""
    s = Session(window=100_000, live_results=1)
    s.warm([*opening(system), call(2, "a"), result(3, "a", 3000, 2)])
    s.anchors = [Anchor(1, "never push to main", 1, 6)]
    return s


def test_a_rider_joins_the_head_when_the_plan_steps_anyway_and_it_pays_back() -> None:
    s = rider_then_tidy()
    plan, prompt = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert [(st.episode_id, st.to_tier) for st in plan.steps] == [(3, Tier.MASKED)]
    assert plan.joined_anchors == (1,)
    assert plan.reused == 0  # joining re-processes the head: ~90 tokens, < 8 calls of riding
    assert plan.reason.endswith("; riding anchor 1 joins the head block")  # says why
    assert "never push to main" in prompt.messages[0]["content"]
    assert all("never push" not in str(m["content"]) for m in prompt.messages[1:])


def test_waiting_for_the_head_a_rider_rides_on_a_server_that_keeps_it(
    use: Use,
) -> None:
    use(Policy(join="head"))
    s = rider_then_tidy()
    plan, prompt = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert [st.episode_id for st in plan.steps] == [3]
    assert plan.joined_anchors == ()
    assert plan.reused > 0
    assert prompt.messages[-1]["content"].endswith("never push to main")


def test_a_rider_does_not_join_when_joining_costs_more_than_riding() -> None:
    # A 2,000-token cached head: re-processing it costs more than 8 calls of the rider.
    s = rider_then_tidy(system=2000)
    plan, prompt = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert [st.episode_id for st in plan.steps] == [3]
    assert plan.joined_anchors == ()
    assert "joins" not in plan.reason
    assert plan.reused >= 2000
    assert prompt.messages[-1]["content"].endswith("never push to main")
