"""Guards for engine mutants that survived scripts/mutation.py (docs/verification/mutation.md).

Each test names the mutants it kills. Error messages and refusal reasons are
compared whole: ``pytest.raises(match=...)`` is a regex *search*, so a message
wrapped in other text still matched it, and these texts are what a user reads.
"""

from __future__ import annotations

import pytest

from sakur4.engine import (
    Anchor,
    Checkpoints,
    Episode,
    Kind,
    Span,
    Tier,
    Verdict,
    render_anchor_block,
)
from sakur4.engine.messages import block_ids_of, shape_of
from sakur4.errors import InputError

from .sessions import Session, count, layout_of, message, text_of
from .test_plan_report import _plan


def _message_of(call: object) -> str:
    with pytest.raises(InputError) as caught:
        call()  # type: ignore[operator]
    return str(caught.value)


def test_input_errors_say_exactly_what_is_wrong() -> None:
    # anchors x_render_anchor_block__mutmut_4, _10; checkpoints xǁCheckpointsǁat__mutmut_9;
    # planner x_plan_turn__mutmut_10.
    assert (
        _message_of(lambda: render_anchor_block([Anchor(1, "a", 1, 1), Anchor(1, "b", 1, 1)], 9))
        == "anchor ids must be unique"
    )
    assert (
        _message_of(lambda: render_anchor_block([Anchor(1, "a", 1, -1)], 9))
        == "anchor token counts must not be negative"
    )
    assert (
        _message_of(lambda: Checkpoints.at([-1, 5])) == "checkpoint positions must not be negative"
    )
    assert (
        _message_of(lambda: _plan([message(0, "user", 5)], 0))
        == "window must be positive and underestimate not negative"
    )


def test_a_negative_message_size_is_refused_in_these_words() -> None:
    # Was render x_layout_of__mutmut_16; layout_of left src/ (issue 18: only tests and
    # bench/ built a Layout from sizes), so the words are now the Layout's own.
    s = Session(window=10_000)
    prompt = s.warm([message(0, "system", 5), message(1, "user", 5)])
    assert (
        _message_of(lambda: layout_of(prompt, [3, -1]))
        == f"layout spans must be in order with start <= end: {Span(prompt.keys[1], 3, 2)}"
    )


def test_checkpoint_values_are_what_they_say() -> None:
    # checkpoints xǁCheckpointsǁat__mutmut_12 (every_boundary None), xǁCheckpointsǁevery__mutmut_1
    # (positions None): the fields are public, and equal values must compare equal.
    assert Checkpoints.at([4, 2]) == Checkpoints((2, 4), False)
    assert Checkpoints.every() == Checkpoints((), True)


def test_resuming_at_the_first_tokens_keeps_them() -> None:
    # checkpoints xǁCheckpointsǁlatest_at_or_before__mutmut_2 (``<= 1``), _3 (``return 1``):
    # the head position is 0, and position 1 is a position.
    assert Checkpoints.every().latest_at_or_before(0) == 0
    assert Checkpoints.every().latest_at_or_before(1) == 1
    assert Checkpoints.at([1, 9]).latest_at_or_before(1) == 1
    assert Checkpoints.at([1, 9]).latest_at_or_before(0) == 0


def test_a_message_ends_where_the_next_one_starts() -> None:
    # messages xǁShapeǁmembers__mutmut_11 (``g + 2 < len``): the last message but one
    # swallowed the last.
    eps = [message(0, "user", 5), message(1, "assistant", 5), message(2, "user", 5)]
    shape = shape_of(eps)
    assert [list(shape.members(g)) for g in range(3)] == [[0], [1], [2]]


def test_only_a_head_key_names_the_head_block() -> None:
    # messages x_block_ids_of__mutmut_4 (``or`` → ``and``): a four-part key that is not
    # the head's, or a head key of another shape, holds no block.
    assert block_ids_of("head|0.0|1,2|d") == frozenset({1, 2})
    assert block_ids_of("riding|0.0|1,2|d") is None
    assert block_ids_of("head|1,2|d") is None


def test_a_refusal_with_nothing_steppable_says_so() -> None:
    # planner decide: the refusal's reason is the receipt's text, with the figures;
    # a refused plan still reports the anchor block.
    anchors = [Anchor(1, "keep it short", 1, 5)]
    plan = _plan([message(0, "system", 20), message(1, "user", 600)], 500, anchors=anchors)
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


def test_the_prompt_size_is_known_before_the_server_sees_it() -> None:
    # The head's and a rider's estimates (nothing cached sizes them): planner
    # x_plan_turn__mutmut_77, _83 and xǁ_Plannerǁ_estimate__mutmut_1-4, _8, _14, _20-25.
    # The toy tokenizer counts a joined head a token apart from its parts.
    rule = "always answer in French " * 30
    s = Session(window=100_000)
    s.episodes = [message(0, "system", 50), message(1, "user", 30), message(2, "assistant", 40)]
    s.anchors = [Anchor(1, rule, 5, count(f"- [anchor 1] {rule}"))]
    plan = s.plan()
    s.apply(plan)
    assert abs(plan.prompt_tokens - len(s.sent)) <= 2
    s.anchors.append(Anchor(2, "never use tabs " * 20, 1, 80))  # pinned after: it rides
    plan, _ = s.turn([message(3, "user", 30)])
    assert plan.joined_anchors == ()
    assert abs(plan.new_tokens - len(s.sent)) <= 2


def test_an_archived_message_mid_session_leaves_the_rest_of_the_prompt_counted() -> None:
    # planner xǁ_Plannerǁmeasure__mutmut_27 (``continue`` → ``break``): the messages
    # after an archived one dropped out of the size.
    s = Session(window=100_000)
    s.episodes = [
        message(0, "system", 50),
        message(1, "user", 30, tier=Tier.ARCHIVED),
        message(2, "assistant", 40),
        message(3, "user", 30),
    ]
    plan = s.plan()
    s.apply(plan)
    assert abs(plan.prompt_tokens - len(s.sent)) <= 2


def test_an_edited_anchor_re_processes_from_the_head_and_the_rest_keeps_its_cached_size() -> None:
    # planner xǁ_Plannerǁmeasure__mutmut_50 (``m = 1``: the head never compared), _78 (a
    # cached span's size as end + start), _87/_88 (cached sizes ignored: episode 1's
    # declared size, 10, is not what the server saw, 44).
    s = Session(window=100_000)
    s.anchors = [Anchor(1, "rule one " * 10, 1, 30)]
    odd = Episode(1, "user", Kind.MESSAGE, text_of(40, 1), 10)
    s.warm([message(0, "system", 50), odd, message(2, "assistant", 40), message(3, "user", 30)])
    sent = len(s.sent)
    s.anchors = [Anchor(1, "rule two " * 10, 1, 30)]  # same id, same size, new text
    plan = s.plan()
    assert plan.reused == 0
    assert abs(plan.prompt_tokens - sent) <= 2


def test_the_first_episodes_step_and_a_leading_user_message_is_protected() -> None:
    # planner xǁ_Plannerǁcandidates__mutmut_10 (indices 0 and 1 never candidates) and
    # xǁ_Plannerǁprotected__mutmut_52/_53 (a latest user message at index 0 unprotected).
    bulky = [message(0, "assistant", 3000), message(1, "assistant", 3000), message(2, "user", 20)]
    plan = _plan(bulky, 7000)
    assert [st.episode_id for st in plan.steps] == [0, 1]
    no_system = [message(0, "user", 30), message(1, "assistant", 3000), message(2, "assistant", 20)]
    plan = _plan(no_system, 4000)
    assert plan.verdict is Verdict.RECLAIMED
    assert 0 not in {st.episode_id for st in plan.steps}
