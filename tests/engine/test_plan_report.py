"""What a plan reports — the figures a receipt carries (SPEC §8) — states what it did.

Found by mutation testing (scripts/mutation.py): the planner tests checked where it
cuts and what steps, and a wrong budget, reuse or reason went unseen.
"""

from __future__ import annotations

import re

import pytest

from sakur4.engine import (
    Anchor,
    Checkpoints,
    Episode,
    Kind,
    Plan,
    PlanSettings,
    Policy,
    Tier,
    Verdict,
    plan_turn,
)
from sakur4.engine.folds import PREAMBLE
from sakur4.errors import InputError

from .sessions import Session, call, count, message, result
from .test_planner import opening, rounds


def _plan(episodes: list[Episode], window: int, policy: Policy | None = None, **kw: object) -> Plan:
    settings = PlanSettings(
        window, Session(window=window).profile, policy or Policy(cut_tolerance=0, live_results=2)
    )
    args: dict[str, object] = {
        "anchors": (),
        "layout": None,
        "checkpoints": Checkpoints.every(),
        "count": count,
    }
    args.update(kw)
    return plan_turn(episodes, settings, **args)  # type: ignore[arg-type]


def test_an_impossible_window_is_refused() -> None:
    with pytest.raises(InputError, match="the window must be positive, got 0"):
        _plan(opening(), 0)


def test_an_impossible_underestimate_is_refused() -> None:
    with pytest.raises(InputError, match="underestimate must not be negative"):
        _plan(opening(), 1000, underestimate=-1)


@pytest.mark.parametrize("field", ["live_results", "tidy_budget", "cut_tolerance"])
def test_an_impossible_policy_is_refused(field: str) -> None:
    with pytest.raises(InputError, match=f"policy {field} must not be negative"):
        Policy(**{field: -1})  # type: ignore[arg-type]


def test_a_one_token_window_is_a_window() -> None:
    assert _plan([], 1).verdict is Verdict.REFUSED  # the preamble alone cannot fit


def test_the_anchor_budget_is_the_target_less_the_preamble() -> None:
    s = Session(window=10_000)
    expected = int(10_000 * s.profile.target) - count(PREAMBLE)
    assert _plan(opening(), 10_000).anchor_budget == expected
    huge = (Anchor(1, "x" * 40_000, 1, 10_000),)
    refused = _plan(opening(), 10_000, anchors=huge)
    assert refused.verdict is Verdict.REFUSED
    assert refused.anchor_budget == expected


def test_a_refused_plan_reuses_nothing_whatever_the_cache_holds() -> None:
    s = Session(window=10_000)
    s.warm([*opening(), *rounds(2, 2, 100)])
    s.anchors = [Anchor(1, "x" * 40_000, 1, 10_000)]
    plan = s.plan()
    assert plan.verdict is Verdict.REFUSED
    assert (plan.reused, plan.chosen_cut) == (0, None)
    assert plan.reprefill == plan.new_tokens == plan.prompt_tokens
    assert re.fullmatch(
        r"pressure \d\.\d\d . trigger 0\.75 \(cache-first\): refused: "
        r"pinned anchors need 10000 tokens .*",
        plan.reason,
    )


def test_a_turn_that_adds_nothing_reprocesses_nothing() -> None:
    s = Session(window=100_000, live_results=2)
    s.warm([*opening(), *rounds(2, 2, 100)])
    plan = s.plan()
    assert plan.verdict is Verdict.FITS
    assert plan.reused == len(s.sent)
    assert plan.reprefill == 0
    assert plan.reason == f"pressure {plan.pressure:.2f} < trigger 0.75 (cache-first)"


def test_pressure_exactly_at_the_trigger_is_pressure() -> None:
    for pad in range(1, 8):
        episodes = [*opening(), *rounds(2, 3, 400), message(50, "user", pad)]
        total = _plan(episodes, 10**6).prompt_tokens
        if total % 3 == 0:
            break
    window = total * 4 // 3  # cache-first triggers at 0.75: exactly here
    assert _plan(episodes, window).verdict is not Verdict.FITS


def test_the_reason_states_pressure_steps_and_the_cut() -> None:
    s = Session(window=9_000, live_results=1)
    s.warm([*opening(), *rounds(2, 8, 900)])
    plan, _ = s.turn([message(100, "user", 30)])
    assert plan.verdict in (Verdict.RECLAIMED, Verdict.STEPPING)
    back = sum(st.reclaimed for st in plan.steps)
    assert plan.reason.startswith(
        f"pressure {plan.pressure:.2f} ≥ trigger 0.75 (cache-first): "
        f"{len(plan.steps)} steps reclaimed {back} tokens"
    )
    assert f"; cut at {plan.chosen_cut} (requested {plan.requested_cut})" in plan.reason
    assert plan.requested_cut is not None
    assert all(st.from_tier is not None and st.to_tier == st.from_tier + 1 for st in plan.steps)


def test_steps_that_change_no_bytes_are_no_event() -> None:
    # Short messages at pressure: each renders as itself at Masked (a stub would be
    # longer), so the step is taken, reclaims nothing, and moves no byte: no cut.
    s = Session(window=4_000, live_results=0)
    s.warm(
        [
            message(0, "system", 20),
            *[message(i, "user" if i % 2 else "assistant", 8) for i in range(1, 300)],
        ]
    )
    plan, _ = s.turn([message(400, "user", 8)])
    masked = [st for st in plan.steps if st.to_tier is Tier.MASKED]
    assert masked
    assert all(st.tokens_after == st.tokens_before for st in masked)
    assert "grew" not in plan.reason


def test_a_call_kept_by_its_live_result_is_held_and_a_free_one_dropped() -> None:
    archived = {"tier": Tier.ARCHIVED, "droppable": True}
    episodes = [
        # The call opens the session (index 0): its Live result still needs it.
        Episode(
            1, "assistant", Kind.TOOL_CALL, "{}", 3, tool_name="ls", tool_call_id="a", **archived
        ),  # type: ignore[arg-type]
        Episode(2, "tool", Kind.TOOL_RESULT, "out", 3, tool_call_id="a"),
        message(3, "assistant", 5),
        call(4, "b"),
        result(5, "b", 50, 4),
        message(6, "user", 5, **archived),
        message(7, "assistant", 5),
        message(8, "user", 5),
    ]
    plan = _plan(episodes, 100_000, policy=Policy(live_results=0))
    assert [(h.episode_id, h.tier, h.reason) for h in plan.held] == [
        (1, Tier.ARCHIVED, "a Live episode depends on it")
    ]
    dropped = [st for st in plan.steps if st.to_tier is Tier.DROPPED]
    assert [(st.episode_id, st.from_tier, st.tokens_before, st.tokens_after) for st in dropped] == [
        (6, Tier.ARCHIVED, 0, 0)
    ]


def test_a_refusal_with_nothing_steppable_says_so() -> None:
    # planner decide: the refusal's reason is the receipt's text, with the figures;
    # a refused plan still reports the anchor block.
    anchors = [Anchor(1, "keep it short", 1, 5)]
    # The user's words are pinned (an unpinned unread user message is an attachment, and
    # folds when the turn cannot fit with it).
    words = message(1, "user", 600, pinned=True)
    plan = _plan([message(0, "system", 20), words], 500, anchors=anchors)
    assert plan.verdict is Verdict.REFUSED
    assert plan.block_anchors == (1,)
    assert plan.reason.endswith(
        f": refused: the prompt needs {plan.prompt_tokens:,} tokens after every step it can "
        "take this turn; the window holds 500"
    )


def test_a_prompt_at_the_window_with_only_free_steps_is_served() -> None:
    # Short messages whose stubs would be longer than they are, in a prompt already
    # at the window: their steps change no bytes, and the prompt that fits is sent.
    eps = [message(0, "system", 20)]
    eps += [message(i, "user" if i % 2 else "assistant", 2) for i in range(1, 40)]
    window = _plan(eps, 100_000).prompt_tokens
    plan = _plan(eps, window)
    assert plan.verdict is Verdict.STEPPING
    assert plan.steps
    assert all(st.tokens_after == st.tokens_before for st in plan.steps)
    assert plan.chosen_cut is None  # nothing moved: no event
    assert plan.new_tokens == plan.prompt_tokens


def test_pressure_exactly_at_the_trigger_reads_as_at_the_trigger() -> None:
    # planner xǁ_Plannerǁ_reason__mutmut_8 (``>``): the plan acts at pressure == trigger,
    # so its reason must not say "<".
    eps = [message(0, "system", 20), message(1, "user", 30)]
    total = _plan(eps, 1_000_000).prompt_tokens
    eps[1] = message(1, "user", 30 + (-total) % 3)
    total = _plan(eps, 1_000_000).prompt_tokens
    plan = _plan(eps, total * 4 // 3)  # cache-first: trigger 0.75
    assert plan.pressure == plan.profile.trigger == 0.75
    assert plan.reason.startswith("pressure 0.75 ≥ trigger 0.75 (cache-first)")


def test_the_first_episodes_step_and_a_leading_user_message_is_protected() -> None:
    # planner xǁ_Plannerǁcandidates__mutmut_10 (indices 0 and 1 never candidates) and
    # xǁ_Plannerǁprotected__mutmut_52/_53 (a latest user message at index 0 unprotected).
    bulky = [message(0, "assistant", 3000), message(1, "assistant", 3000), message(2, "user", 20)]
    plan = _plan(bulky, 5000)  # with nothing cached, only as much as target needs steps
    assert [st.episode_id for st in plan.steps] == [0, 1]
    no_system = [message(0, "user", 30), message(1, "assistant", 3000), message(2, "assistant", 20)]
    plan = _plan(no_system, 4000)
    assert plan.verdict is Verdict.RECLAIMED
    assert 0 not in {st.episode_id for st in plan.steps}
