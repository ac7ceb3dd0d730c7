"""The message list the server receives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sakur4.engine import (
    Anchor,
    Checkpoints,
    Episode,
    Kind,
    Layout,
    Plan,
    PlanSettings,
    Policy,
    RenderedPrompt,
    RenderMemo,
    Span,
    Tier,
    choose_profile,
    plan_turn,
    render_messages,
)
from sakur4.engine.folds import PREAMBLE
from sakur4.errors import AnchorBudgetError, InputError

from .sessions import call, count, layout_of, message, result


def fits(episodes: list[Episode], anchors: list[Anchor] | None = None) -> Plan:
    return plan_turn(
        episodes,
        PlanSettings(100_000, choose_profile("detected"), Policy(cut_tolerance=0, live_results=2)),
        anchors=anchors or [],
        layout=None,
        checkpoints=Checkpoints.every(),
        count=count,
    )


def render(episodes: list[Episode], anchors: list[Anchor] | None = None) -> RenderedPrompt:
    return render_messages(episodes, anchors or [], fits(episodes, anchors))


def at(e: Episode, tier: Tier) -> Episode:
    return replace(e, tier=tier)


def test_the_head_is_one_system_message_harness_prompt_preamble_anchor_block() -> None:
    eps = [message(0, "system", 5), message(1, "system", 5), message(2, "user", 5)]
    anchors = [Anchor(1, "never push", 1, 3)]
    prompt = render(eps, anchors)
    head = prompt.messages[0]
    assert head["role"] == "system"
    parts = head["content"].split("\n\n")
    assert parts[:2] == [eps[0].content, eps[1].content]
    assert parts[2] == PREAMBLE
    assert parts[3].endswith("- [anchor 1] never push")
    assert [m["role"] for m in prompt.messages] == ["system", "user"]


def test_assistant_text_and_its_tool_calls_are_one_message_paired_with_results() -> None:
    eps = [
        message(1, "user", 5),
        message(2, "assistant", 5),
        call(3, "a"),
        call(4, "b"),
        result(5, "a", 20, 3),
        result(6, "b", 20, 4),
        message(7, "assistant", 5),
    ]
    msgs = render(eps).messages
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert msgs[2]["content"] == eps[1].content
    assert [c["id"] for c in msgs[2]["tool_calls"]] == ["a", "b"]
    assert [m["tool_call_id"] for m in msgs[3:5]] == ["a", "b"]


def test_a_hidden_call_hides_its_result_and_a_shown_call_keeps_one() -> None:
    eps = [message(1, "user", 5), call(2, "a"), result(3, "a", 20, 2), message(4, "assistant", 5)]
    hidden_call = [eps[0], at(eps[1], Tier.ARCHIVED), eps[2], eps[3]]
    assert [m["role"] for m in render(hidden_call).messages] == ["system", "user", "assistant"]
    hidden_result = [eps[0], eps[1], at(eps[2], Tier.ARCHIVED), eps[3]]
    msgs = render(hidden_result).messages
    assert msgs[3]["role"] == "tool"
    assert msgs[3]["tool_call_id"] == "a"
    assert msgs[3]["content"] == "[read_file result #3: open_fold(3)]"  # Referenced, never dangling


def test_a_result_without_its_call_never_appears() -> None:
    eps = [message(1, "user", 5), result(2, "ghost", 20, 0), message(3, "assistant", 5)]
    assert [m["role"] for m in render(eps).messages] == ["system", "user", "assistant"]


def test_archived_assistant_text_leaves_its_calls_in_place() -> None:
    eps = [
        message(1, "user", 5),
        at(message(2, "assistant", 5), Tier.ARCHIVED),
        call(3, "a"),
        result(4, "a", 9, 3),
        message(5, "assistant", 5),
    ]
    msgs = render(eps).messages
    assert msgs[2]["content"] is None
    assert msgs[2]["tool_calls"][0]["id"] == "a"


def test_a_masked_result_renders_its_stub_and_its_call_its_arguments() -> None:
    eps = [
        message(1, "user", 5),
        at(call(2, "a"), Tier.REFERENCED),
        at(result(3, "a", 900, 2), Tier.MASKED),
        message(4, "assistant", 5),
    ]
    msgs = render(eps).messages
    assert msgs[2]["tool_calls"][0]["function"]["arguments"] == eps[1].content
    assert msgs[3]["content"] == "[read_file result #3: open_fold(3)]"


def test_rendering_is_byte_identical_turn_after_turn() -> None:
    eps = [
        message(1, "user", 5),
        at(call(2, "a"), Tier.MASKED),
        result(3, "a", 90, 2),
        message(4, "assistant", 5),
    ]
    anchors = [Anchor(1, "x", 1, 1)]
    assert render(eps, anchors) == render(list(eps), list(anchors))


def test_anchors_outside_the_plans_block_ride_at_the_end() -> None:
    eps = [message(1, "user", 5), message(2, "assistant", 5)]
    anchors = [Anchor(1, "old rule", 1, 2), Anchor(2, "new rule", 1, 2)]
    plan = fits(eps, anchors)
    assert plan.block_anchors == (1, 2)  # nothing cached: every anchor is in the block
    assert "new rule" in render_messages(eps, anchors, plan).messages[0]["content"]
    riding = render_messages(eps, anchors, replace(plan, block_anchors=(1,)))
    assert riding.messages[-1]["role"] == "system"
    assert riding.messages[-1]["content"].endswith("- [anchor 2] new rule")
    assert "new rule" not in riding.messages[0]["content"]


def test_over_budget_anchors_raise_instead_of_rendering() -> None:
    eps = [message(1, "user", 5)]
    plan = fits(eps)
    with pytest.raises(AnchorBudgetError):
        render_messages(eps, [Anchor(1, "x", 1, plan.anchor_budget + 1)], plan)


def test_a_layout_names_each_rendered_message_by_its_key_in_order() -> None:
    prompt = render([message(1, "user", 5)])
    layout = layout_of(prompt, [30, 9])
    assert [(s.start, s.end) for s in layout.spans] == [(0, 30), (30, 39)]
    assert [s.key for s in layout.spans] == list(prompt.keys)
    assert layout.end == 39
    with pytest.raises(InputError):
        Layout((Span(prompt.keys[0], 0, 30), Span(prompt.keys[1], 29, 39)))


def test_malformed_episodes_are_input_errors() -> None:
    with pytest.raises(InputError, match="twice"):
        render([message(1, "user", 5), message(1, "user", 5)])
    with pytest.raises(InputError, match="tool_call_id"):
        render([Episode(1, "tool", Kind.TOOL_RESULT, "x", 1)])
    with pytest.raises(InputError, match="role"):
        render([Episode(1, "tool", Kind.MESSAGE, "x", 1)])


def _slices() -> list[Episode]:
    """A user message split by nature (issue 30): the user's words, a file the harness
    attached in it, more words; each slice an episode, the later ones joining."""
    words = "Read b.py.\n\n"
    attached = "<system-reminder>\nResult of calling the Read tool:\n" + "1\tx = 1\n" * 60
    attached += "</system-reminder>\n\n"
    return [
        message(0, "system", 5),
        Episode(1, "user", Kind.MESSAGE, words, count(words), pinned=True),
        Episode(2, "user", Kind.MESSAGE, attached, count(attached), joins=True),
        Episode(3, "user", Kind.MESSAGE, "And a.py?", 3, pinned=True, joins=True),
        message(4, "assistant", 5),
    ]


def test_the_slices_of_a_split_message_render_as_that_one_message() -> None:
    eps = _slices()
    msgs = render(eps).messages
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[1]["content"] == eps[1].content + eps[2].content + eps[3].content


def test_a_folded_slice_leaves_the_users_words_and_its_separator_in_place() -> None:
    eps = _slices()
    for tier in (Tier.MASKED, Tier.REFERENCED):
        eps[2] = at(eps[2], tier)
        text = render(eps).messages[1]["content"]
        assert text.startswith("Read b.py.\n\n[")
        assert "open_fold(2)]" in text
        assert text.endswith("\n\nAnd a.py?")
        assert text.count("x = 1") <= 1  # at most a preview of the file
    eps[2] = at(eps[2], Tier.ARCHIVED)
    assert render(eps).messages[1]["content"] == "Read b.py.\n\nAnd a.py?"


# -- the render memo: a session's next render builds only what changed (issue 27) ------


def _conversation() -> list[Episode]:
    return [
        message(0, "system", 20),
        message(1, "user", 30),
        message(2, "assistant", 10),
        call(3, "c3"),
        result(4, "c3", 200, 3),
        message(5, "user", 30),
    ]


def test_a_memo_render_equals_a_fresh_one_and_an_edited_episode_misses_alone() -> None:
    """An episode whose content changed under its id (a new Episode) is built again;
    every other message is taken from the memo; the prompt is what a render without
    a memo gives, byte for byte."""
    memo = RenderMemo()
    eps = tuple(_conversation())
    first = render_messages(eps, [], fits(list(eps)), memo)
    kept = dict(memo.messages)
    edited = (*eps[:1], replace(eps[1], content="edited: " + eps[1].content), *eps[2:])
    again = render_messages(edited, [], fits(list(edited)), memo)
    assert again == render_messages(edited, [], fits(list(edited)))
    assert again.messages[1]["content"].startswith("edited: ")
    assert first.messages[1] != again.messages[1]
    rebuilt = [k for k, v in memo.messages.items() if kept.get(k) is not v]
    assert rebuilt == [(edited[1], Tier.LIVE)]


def test_a_memo_render_follows_a_tier_change_and_a_new_message() -> None:
    memo = RenderMemo()
    eps = _conversation()
    render_messages(tuple(eps), [], fits(eps), memo)
    kept = dict(memo.messages)
    # The result folds (a tier change is a new episode in the session), a turn is added.
    grown = [*eps[:4], at(eps[4], Tier.MASKED), *eps[5:], message(6, "assistant", 10)]
    again = render_messages(tuple(grown), [], fits(grown), memo)
    assert again == render_messages(tuple(grown), [], fits(grown))
    assert again.messages[3]["content"] == "[read_file result #4: open_fold(4)]"
    rebuilt = {k for k, v in memo.messages.items() if kept.get(k) is not v}
    assert rebuilt == {(grown[4], Tier.MASKED), (grown[6], Tier.LIVE)}
    # A sent message is the render's own copy: changing it leaves the memo as it was.
    again.messages[1]["content"] = "changed by a caller"
    assert render_messages(tuple(grown), [], fits(grown), memo) == render_messages(
        tuple(grown), [], fits(grown)
    )
