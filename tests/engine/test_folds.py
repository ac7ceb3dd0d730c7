"""Stubs and reference lines: what they say, and that they never change."""

from __future__ import annotations

from sakur4.engine import Episode, Kind, Tier
from sakur4.engine.folds import fold_line, rendering, shown_text

BIG = Episode(
    42,
    "tool",
    Kind.TOOL_RESULT,
    "line one\n   line two\t" * 400,
    3812,
    tool_name="read_file",
    tool_call_id="c1",
)


def test_a_fold_is_one_line_naming_the_episode_and_the_way_back() -> None:
    line = fold_line(BIG)
    assert line == "[read_file result #42: open_fold(42)]"
    # Masked and Referenced show the same line: the second step changes no bytes.
    assert shown_text(BIG, Tier.MASKED) == shown_text(BIG, Tier.REFERENCED) == line
    assert rendering(BIG, Tier.MASKED) is rendering(BIG, Tier.REFERENCED)


def test_renderings_are_pure_functions_of_episode_and_tier() -> None:
    for tier in (Tier.LIVE, Tier.MASKED, Tier.REFERENCED):
        assert shown_text(BIG, tier) == shown_text(BIG, tier)
    assert shown_text(BIG, Tier.ARCHIVED) == ""
    assert shown_text(BIG, Tier.LIVE) is BIG.content


def test_a_tool_call_shows_its_arguments_until_archived() -> None:
    call = Episode(
        3,
        "assistant",
        Kind.TOOL_CALL,
        '{"path": "a.py"}',
        6,
        tool_name="read_file",
        tool_call_id="c1",
    )
    for tier in (Tier.MASKED, Tier.REFERENCED):
        assert shown_text(call, tier) == call.content
        assert rendering(call, tier) is Tier.LIVE


def test_a_short_message_is_its_own_masked_and_referenced_rendering() -> None:
    # A stub longer than the text would grow the prompt ("Ok." became a 25-token
    # stub): the rendering stays the text, and the step changes no bytes.
    for text in ("Ok.", "x" * 50):
        msg = Episode(5, "user", Kind.MESSAGE, text, 34)
        assert len(fold_line(msg)) * 2 > len(text)  # the line would not halve it
        for tier in (Tier.MASKED, Tier.REFERENCED):
            assert shown_text(msg, tier) is msg.content
            assert rendering(msg, tier) is Tier.LIVE


def test_a_fold_is_taken_only_where_it_halves_the_text() -> None:
    # A line that saves a few tokens costs more (its own tokens, processed once) than
    # it gives back.
    line = len(fold_line(Episode(5, "assistant", Kind.MESSAGE, "", 1)))
    short = Episode(5, "assistant", Kind.MESSAGE, "y" * (2 * line - 1), 20)
    assert rendering(short, Tier.MASKED) is rendering(short, Tier.REFERENCED) is Tier.LIVE
    enough = Episode(5, "assistant", Kind.MESSAGE, "y" * (2 * line), 20)
    assert shown_text(enough, Tier.MASKED) == fold_line(enough)


def test_no_rendering_is_longer_than_the_text() -> None:
    for n in (0, 1, 40, 90, 150, 200, 260, 400, 5000):
        e = Episode(7, "tool", Kind.TOOL_RESULT, "z" * n, n // 4, tool_call_id="c")
        for tier in Tier:
            assert len(shown_text(e, tier)) <= n
