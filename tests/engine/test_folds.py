"""Stubs and reference lines: what they say, and that they never change."""

from __future__ import annotations

from sakur4.engine import Episode, Kind, Tier
from sakur4.engine.folds import masked_stub, reference_line, rendering, shown_text

from .sessions import count

BIG = Episode(
    42,
    "tool",
    Kind.TOOL_RESULT,
    "line one\n   line two\t" * 400,
    3812,
    tool_name="read_file",
    tool_call_id="c1",
)


def test_masked_stub_has_header_preview_and_how_to_open() -> None:
    stub = masked_stub(BIG)
    assert "\n" not in stub  # one line: every rendering is tokens the server processes
    header, preview = stub.split("] ", 1)
    assert header == "[folded read_file result #42, 3812 tokens: open_fold(42)"
    assert preview.startswith("line one line two line one")
    assert preview.endswith("…")


def test_reference_line_is_one_line_naming_the_episode_and_the_way_back() -> None:
    line = reference_line(BIG)
    assert line == "[read_file result #42: open_fold(42)]"


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


def test_referenced_is_shorter_than_masked_so_that_step_always_reclaims() -> None:
    tiny = Episode(1, "user", Kind.MESSAGE, "", 0)
    for e in (BIG, tiny):
        assert count(reference_line(e)) < count(masked_stub(e))


def test_a_short_message_is_its_own_masked_and_referenced_rendering() -> None:
    # A stub longer than the text would grow the prompt ("Ok." became a 25-token
    # stub): the rendering stays the text, and the step changes no bytes.
    for text in ("Ok.", "x" * 50):
        msg = Episode(5, "user", Kind.MESSAGE, text, 34)
        assert len(masked_stub(msg)) > len(text)
        for tier in (Tier.MASKED, Tier.REFERENCED):
            assert shown_text(msg, tier) is msg.content
            assert rendering(msg, tier) is Tier.LIVE


def test_a_middling_message_is_masked_as_itself_and_referenced_as_a_line() -> None:
    # A stub is taken only where it halves the text: one that saves a few tokens
    # costs more (its own tokens, processed once) than it gives back.
    msg = Episode(5, "assistant", Kind.MESSAGE, "y" * 150, 38)
    assert len(masked_stub(msg)) * 2 > 150 >= len(reference_line(msg)) * 2
    assert rendering(msg, Tier.MASKED) is Tier.LIVE
    assert shown_text(msg, Tier.REFERENCED) == reference_line(msg)


def test_no_rendering_is_longer_than_the_text() -> None:
    for n in (0, 1, 40, 90, 150, 200, 260, 400, 5000):
        e = Episode(7, "tool", Kind.TOOL_RESULT, "z" * n, n // 4, tool_call_id="c")
        for tier in Tier:
            assert len(shown_text(e, tier)) <= n
