"""Stubs and reference lines: what they say, and that they never change."""

from __future__ import annotations

import json

from sakur4.engine import Episode, Kind, Tier
from sakur4.engine.folds import FOLD_KEY, masked_stub, reference_line, shown_text

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
    header, preview, how = stub.split("\n")
    assert header == "[folded tool_result read_file · episode 42 · 3812 tokens]"
    assert preview.startswith("line one line two line one")
    assert preview.endswith("…")
    assert how == "open with open_fold(42)"


def test_reference_line_is_one_line_naming_the_episode_and_the_way_back() -> None:
    line = reference_line(BIG)
    assert "\n" not in line
    assert "episode 42" in line
    assert "open_fold(42)" in line
    assert "recall" in line


def test_renderings_are_pure_functions_of_episode_and_tier() -> None:
    for tier in (Tier.LIVE, Tier.MASKED, Tier.REFERENCED):
        assert shown_text(BIG, tier) == shown_text(BIG, tier)
    assert shown_text(BIG, Tier.ARCHIVED) == ""
    assert shown_text(BIG, Tier.LIVE) is BIG.content


def test_a_folded_tool_call_keeps_json_arguments() -> None:
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
        args = json.loads(shown_text(call, tier))
        assert set(args) == {FOLD_KEY}
        assert "open_fold(3)" in args[FOLD_KEY]


def test_referenced_is_shorter_than_masked_so_that_step_always_reclaims() -> None:
    tiny = Episode(1, "user", Kind.MESSAGE, "", 0)
    for e in (BIG, tiny):
        assert count(reference_line(e)) < count(masked_stub(e))


def test_a_short_message_has_a_stub_longer_than_itself() -> None:
    # The shape behind the seed's deadlock: the step must still be allowed.
    msg = Episode(5, "user", Kind.MESSAGE, "x" * 136, 34)
    assert count(masked_stub(msg)) > msg.tokens
