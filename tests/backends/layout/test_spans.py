"""What a layout is: byte ends mapped to token spans (a straddling token, an unknown
boundary), and where the user messages start."""

from __future__ import annotations

from sakur4.backends.layout.spans import MessageSpan, TokenLayout, spans_at


def test_a_token_straddling_a_boundary_ends_the_earlier_span_unclean() -> None:
    # Text "ab|cd|ef" where the tokenizer merged "bc" across the first boundary.
    offsets = [0, 0, 1, 3, 4]  # BOS, "a", "bc", "d", "ef"
    spans, gen = spans_at(
        [{"role": "user"}, {"role": "assistant"}, {"role": "user"}],
        [2, 4, 6],
        offsets,
        n_bytes=6,
        n_lead=1,
        n_tokens=5,
    )
    assert [(s.start, s.end, s.clean_end) for s in spans] == [
        (1, 2, False),
        (2, 4, True),
        (4, 5, True),
    ]
    assert gen == 5


def test_an_unknown_boundary_gives_an_empty_span() -> None:
    spans, _ = spans_at(
        [{"role": "system"}, {"role": "user"}],
        [None, 4],
        [0, 0, 2],
        n_bytes=4,
        n_lead=1,
        n_tokens=3,
    )
    assert (spans[0].start, spans[0].end, spans[0].rendered_alone) == (1, 1, False)
    assert (spans[1].start, spans[1].end) == (1, 3)


def test_specials_after_the_text_belong_to_the_generation_prompt() -> None:
    """An EOS the server adds after the text shares the text's end offset: the last
    message ends before it, cleanly."""
    spans, gen = spans_at([{"role": "user"}], [3], [0, 0, 3], n_bytes=3, n_lead=1, n_tokens=3)
    assert [(s.start, s.end, s.clean_end) for s in spans] == [(1, 2, True)]
    assert gen == 2


def test_user_starts_are_the_user_messages_rendered_alone() -> None:
    """The server's checkpoints go where user messages start; a user message whose end
    the template gave no boundary for (its span empty, its text in the next) has none."""
    spans = (
        MessageSpan(0, "system", 1, 1, False, False),
        MessageSpan(1, "user", 1, 9, True, True),
        MessageSpan(2, "assistant", 9, 14, True, True),
        MessageSpan(3, "user", 14, 14, False, False),
        MessageSpan(4, "user", 14, 20, True, True),
    )
    layout = TokenLayout(
        prompt="",
        tokens=tuple(range(22)),
        spans=spans,
        generation_start=20,
        method="full",
        renders=1,
        tokenized_bytes=0,
        token_bytes=(),
        prefix_hashes=(),
        message_byte_ends=(),
    )
    assert layout.user_starts == (1, 14)
