"""The planner's policy: an argument of every plan, and what each choice does.

The choices were ranked with the benchmark (docs/design/eviction.md); each test
shows one on a session where it decides the plan.
"""

from __future__ import annotations

from sakur4.engine import Anchor, Episode, Tier, Verdict

from .sessions import Session, call, message, result, start_of


def opening(system: int = 50) -> list[Episode]:
    return [message(0, "system", system), message(1, "user", 30)]


def changed(plan: object) -> list[int]:
    return [
        st.episode_id
        for st in plan.steps  # type: ignore[attr-defined]
        if st.tokens_after != st.tokens_before or st.to_tier >= Tier.ARCHIVED
    ]


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
    assert changed(plan) == [10]


def test_the_policy_passed_in_is_the_one_applied() -> None:
    # Two sessions in one process, the same history, two policies: two plans.
    plans = {}
    for live in (0, 1):
        s = Session(window=100_000, live_results=live)
        s.warm([*opening(), call(2, "a"), result(3, "a", 3000, 2)])
        plans[live], _ = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert changed(plans[0]) == [3]  # folded on the call after it was answered
    assert changed(plans[1]) == []  # working memory: kept Live below the trigger


def test_results_kept_live_below_the_trigger_fold_at_it_cheapest_first() -> None:
    # live_results 1: each answered result stays Live while there is room (folding
    # one behind a Live result is never nearly free); at the trigger the event folds
    # what buys room below it for the fewest re-processed tokens: the newest answered
    # result, which little follows, not the whole history behind it.
    s = Session(window=12_000, live_results=1)
    s.warm([*opening()])
    ids = iter(range(2, 1000))
    folded_below: list[int] = []
    for _ in range(8):
        c, r, a = next(ids), next(ids), next(ids)
        old = s.layout
        plan, _ = s.turn([call(c, f"c{c}"), result(r, f"c{c}", 1200, c)])
        if plan.verdict is Verdict.FITS:
            folded_below += changed(plan)
        else:
            folded = set(changed(plan))
            assert r - 3 in folded  # the newest answered result folds too
            assert r not in folded  # the new one is unanswered
            assert plan.new_tokens < s.window * plan.profile.trigger
            assert old is not None
            assert plan.chosen_cut is not None
            assert plan.chosen_cut >= (start_of(old, r - 4) or 0)  # not back into history
            break
        s.turn([message(a, "assistant", 20)])
    else:
        raise AssertionError("the trigger was never reached")
    assert folded_below == []


def rider_then_tidy(system: int = 50) -> Session:
    """The head is cached when the anchor is pinned (it rides); then a bulky result
    lying late is masked below the trigger."""
    s = Session(window=100_000, live_results=0)
    s.warm([*opening(system), call(2, "a"), result(3, "a", 3000, 2)])
    s.anchors = [Anchor(1, "never push to main", 1, 6)]
    return s


def test_a_rider_waits_for_a_plan_that_re_processes_the_head() -> None:
    s = rider_then_tidy(system=2000)
    plan, prompt = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert changed(plan) == [3]
    assert plan.joined_anchors == ()
    assert "joins" not in plan.reason
    assert plan.reused >= 2000
    assert prompt.messages[-1]["content"].endswith("never push to main")


def test_a_rider_joins_when_the_head_is_re_processed_anyway() -> None:
    s = rider_then_tidy()
    s.checkpoints = "none"  # every change re-processes from the head
    plan, prompt = s.turn([message(4, "assistant", 20), call(5, "b"), result(6, "b", 50, 5)])
    assert plan.joined_anchors == (1,)
    assert plan.reused == 0
    assert plan.reason.endswith("; riding anchor 1 joins the head block")  # says why
    assert "never push to main" in prompt.messages[0]["content"]
    assert all("never push" not in str(m["content"]) for m in prompt.messages[1:])
