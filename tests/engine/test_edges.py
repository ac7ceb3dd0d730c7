"""Edges the other engine tests did not pin, found by mutation testing (scripts/mutation.py).

Each test states a promise at a boundary a mutant crossed unseen: where a preview is
cut, which bytes a folded call carries, what a message key names, what the input
checks accept. docs/verification/guards.md lists the mutants and why the rest are
equivalent.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sakur4.engine import (
    Anchor,
    Checkpoints,
    Episode,
    Kind,
    Layout,
    PlanSettings,
    Policy,
    RenderedPrompt,
    Span,
    Tier,
    choose_profile,
    plan_turn,
    render_anchor_block,
    render_messages,
)
from sakur4.engine.folds import fold_line, shown_text
from sakur4.engine.messages import block_ids_of, head_key, riding_key, shape_of
from sakur4.errors import InputError

from .sessions import count, error_text, layout_of, message
from .test_plan_report import _plan


def test_a_result_without_a_tool_name_is_folded_as_a_tool() -> None:
    e = Episode(4, "tool", Kind.TOOL_RESULT, "output", 3, tool_call_id="c1")
    assert fold_line(e) == "[tool result #4: open_fold(4)]"


def test_a_call_keeps_its_arguments_verbatim_until_archived() -> None:
    e = Episode(
        5,
        "assistant",
        Kind.TOOL_CALL,
        '{"path": "café.py"}',
        8,
        tool_name="read",
        tool_call_id="c1",
    )
    for tier in (Tier.LIVE, Tier.MASKED, Tier.REFERENCED):
        assert shown_text(e, tier) is e.content  # the same bytes: stepping it is free
    assert shown_text(e, Tier.ARCHIVED) == ""


def _session() -> list[Episode]:
    return [
        Episode(1, "system", Kind.MESSAGE, "be brief", 3),
        Episode(2, "user", Kind.MESSAGE, "look at a and b", 5),
        Episode(3, "assistant", Kind.MESSAGE, "reading both", 4),
        Episode(
            4, "assistant", Kind.TOOL_CALL, '{"p": "a"}', 4, tool_name="read", tool_call_id="c1"
        ),
        Episode(
            5, "assistant", Kind.TOOL_CALL, '{"p": "b"}', 4, tool_name="read", tool_call_id="c2"
        ),
        Episode(6, "tool", Kind.TOOL_RESULT, "A" * 40, 10, tool_call_id="c1"),
        Episode(7, "tool", Kind.TOOL_RESULT, "B" * 40, 10, tool_call_id="c2"),
        Episode(8, "user", Kind.MESSAGE, "thanks", 2),
    ]


def test_an_assistant_message_and_its_calls_are_one_message() -> None:
    shape = shape_of(_session())
    assert shape.head == (0,)
    assert list(shape.members(0)) == [1]
    assert list(shape.members(1)) == [2, 3, 4]
    assert list(shape.members(2)) == [5]
    assert list(shape.members(len(shape.starts) - 1)) == [7]


def _render(episodes: list[Episode], anchors: tuple[Anchor, ...] = ()) -> RenderedPrompt:
    plan = plan_turn(
        episodes,
        PlanSettings(100_000, choose_profile("detected"), Policy(cut_tolerance=0, live_results=2)),
        anchors=anchors,
        layout=None,
        checkpoints=Checkpoints.none(),
        count=count,
    )
    return render_messages(episodes, anchors, plan)


def test_a_message_whose_members_are_all_archived_is_not_sent() -> None:
    gone = {3, 4, 5, 6, 7}
    episodes = [replace(e, tier=Tier.ARCHIVED) if e.id in gone else e for e in _session()]
    prompt = _render(episodes)
    assert [m["role"] for m in prompt.messages] == ["system", "user", "user"]


def test_a_rendered_call_is_an_openai_function_call() -> None:
    calls = _render(_session()).messages[2]["tool_calls"]
    assert [c["type"] for c in calls] == ["function", "function"]


def test_the_head_key_names_its_anchors_and_changes_with_their_text() -> None:
    eps, shown = _session(), [Tier.LIVE] * 8
    key = head_key((0,), eps, shown, [2, 1], "block")
    assert block_ids_of(key) == frozenset({1, 2})
    assert head_key((0,), eps, shown, [2, 1], "block, edited") != key
    assert riding_key("one") != riding_key("two")
    assert block_ids_of(riding_key("one")) is None
    assert block_ids_of("2.0,3.1") is None


def test_a_rider_has_its_own_key_in_the_layout() -> None:
    anchors = (Anchor(1, "rule", 1, 3),)
    episodes = _session()
    prompt = _render(episodes, anchors)
    layout = layout_of(prompt, [10] * len(prompt.keys))
    plan = plan_turn(
        episodes,
        PlanSettings(100_000, choose_profile("detected"), Policy(cut_tolerance=0, live_results=2)),
        anchors=(*anchors, Anchor(2, "new rule", 1, 3)),
        layout=layout,
        checkpoints=Checkpoints.every(),
        count=count,
    )
    riding = render_messages(episodes, (*anchors, Anchor(2, "new rule", 1, 3)), plan)
    assert riding.keys[-1].startswith("riding|")
    assert riding.messages[-1]["content"].endswith("new rule")


def test_a_layout_span_may_be_empty_but_never_reversed_or_overlapping() -> None:
    prompt = _render(_session())
    n = len(prompt.keys)
    with pytest.raises(InputError, match="in order with start <= end"):
        Layout((Span("a", 0, 1), Span("b", 3, 2)))  # a negative size
    with pytest.raises(InputError, match="in order with start <= end"):
        Layout((Span("a", -1, 3),))  # before the first token
    layout = layout_of(prompt, [0] + [5] * (n - 1))  # an empty message is a span
    assert layout.spans[0] == Span(prompt.keys[0], 0, 0)
    assert Layout((Span("a", 0, 0), Span("b", 0, 3))).end == 3
    with pytest.raises(InputError, match="in order with start <= end"):
        Layout((Span("a", 0, 3), Span("b", 2, 4)))


def test_a_checkpoint_at_the_head_is_a_position() -> None:
    assert Checkpoints.at([5, 0]).positions == (0, 5)
    with pytest.raises(InputError, match="must not be negative"):
        Checkpoints.at([-1, 5])
    assert Checkpoints.none().every_boundary is False


def test_episode_checks_name_the_episode_and_what_is_wrong() -> None:
    with pytest.raises(InputError, match="episode 7: "):
        Episode(7, "user", "not-a-kind", "x", 1)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="episode 7 has a negative token count"):
        Episode(7, "user", Kind.MESSAGE, "x", -1)
    with pytest.raises(InputError, match=r"episode 7 \(tool_call\) has no tool name"):
        Episode(7, "assistant", Kind.TOOL_CALL, "{}", 1, tool_call_id="c")
    with pytest.raises(InputError, match="one of assistant, system, user"):
        Episode(7, "tool", Kind.MESSAGE, "x", 1)
    # A result needs its call's id, not a tool name: clients often omit it.
    Episode(7, "tool", Kind.TOOL_RESULT, "x", 1, tool_call_id="c")


def _call(i: int, cid: str) -> Episode:
    return Episode(i, "assistant", Kind.TOOL_CALL, "{}", 1, tool_name="read", tool_call_id=cid)


def _result(i: int, cid: str) -> Episode:
    return Episode(i, "tool", Kind.TOOL_RESULT, "out", 1, tool_call_id=cid)


def _user(i: int) -> Episode:
    return Episode(i, "user", Kind.MESSAGE, "go", 1)


def test_a_repeated_episode_id_is_named() -> None:
    with pytest.raises(InputError, match="episode 2 appears twice"):
        shape_of([_user(1), _user(2), _user(3), _user(2)])


def test_grouping_and_pairing_at_the_edges() -> None:
    only_system = [
        Episode(1, "system", Kind.MESSAGE, "a", 1),
        Episode(2, "system", Kind.MESSAGE, "b", 1),
    ]
    s = shape_of(only_system)
    assert (s.head, s.starts, s.group_of) == ((0, 1), (), (-1, -1))
    # A call that opens the conversation is a message of its own, and its result pairs.
    s = shape_of([_call(1, "c"), _result(2, "c")])
    assert (s.starts, s.results_of, s.call_of) == ((0, 1), {0: [1]}, (-1, 0))
    # Calls with no assistant text before them still form one message; after a result,
    # the next call opens a new one.
    s = shape_of([_user(1), _call(2, "a"), _call(3, "b"), _result(4, "a"), _call(5, "d")])
    assert s.starts == (0, 1, 3, 4)
    assert s.group_of == (0, 1, 1, 2, 3)
    # A result whose call is not in the session is an orphan, paired with nothing.
    s = shape_of([_user(1), _result(2, "gone")])
    assert (s.orphans, s.call_of, s.results_of) == ((1,), (-1, -1), {})


def test_profile_bounds() -> None:
    from sakur4.engine import Profile

    Profile("full", 1.0, 0.5)  # a trigger at the whole window is allowed
    for target, trigger in ((0.0, 0.5), (0.5, 0.5), (0.3, 1.5)):
        with pytest.raises(InputError, match=f"got target {target} and trigger {trigger}"):
            Profile("bad", trigger, target)
    with pytest.raises(InputError, match="expected one of detected, none, shifting, uncertain"):
        choose_profile("maybe")
    with pytest.raises(
        InputError, match="expected one of balanced, cache-first, shift-first, window-first"
    ):
        choose_profile("none", "fastest")


def test_anchor_block_input_checks() -> None:
    from sakur4.engine import render_anchor_block
    from sakur4.errors import AnchorBudgetError

    with pytest.raises(InputError, match="anchor ids must be unique"):
        render_anchor_block([Anchor(1, "a", 1, 1), Anchor(1, "b", 1, 1)], 10)
    with pytest.raises(InputError, match="anchor token counts must not be negative"):
        render_anchor_block([Anchor(1, "a", 1, -1)], 10)
    assert render_anchor_block([Anchor(1, "free", 1, 0)], 0).tokens == 0
    with pytest.raises(AnchorBudgetError) as refused:
        render_anchor_block([Anchor(1, "a", 1, 5)], -3)
    assert (refused.value.needed, refused.value.budget) == (5, 0)


def test_input_errors_say_exactly_what_is_wrong() -> None:
    # anchors x_render_anchor_block__mutmut_4, _10; checkpoints xǁCheckpointsǁat__mutmut_9;
    # planner x_plan_turn__mutmut_10.
    assert (
        error_text(lambda: render_anchor_block([Anchor(1, "a", 1, 1), Anchor(1, "b", 1, 1)], 9))
        == "anchor ids must be unique"
    )
    assert (
        error_text(lambda: render_anchor_block([Anchor(1, "a", 1, -1)], 9))
        == "anchor token counts must not be negative"
    )
    assert (
        error_text(lambda: Checkpoints.at([-1, 5])) == "checkpoint positions must not be negative"
    )
    assert (
        error_text(lambda: _plan([message(0, "user", 5)], 0))
        == "the window must be positive, got 0"
    )


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
