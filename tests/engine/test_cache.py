"""Resume points: where the server picks up after a change."""

from __future__ import annotations

import pytest

from sakur4.engine import Checkpoints, Layout, Span
from sakur4.errors import InputError

from .sessions import Session, error_text, layout_of, message


def test_every_boundary_resumes_exactly_at_the_change() -> None:
    assert Checkpoints.every().latest_at_or_before(1234) == 1234


def test_a_ring_resumes_at_the_latest_checkpoint_at_or_before() -> None:
    ring = Checkpoints.at([5484, 3583, 3583])
    assert ring.positions == (3583, 5484)
    assert ring.latest_at_or_before(5484) == 5484
    assert ring.latest_at_or_before(5300) == 3583
    assert ring.latest_at_or_before(3000) == 0


def test_no_source_resumes_from_the_head() -> None:
    assert Checkpoints.none().latest_at_or_before(10_000) == 0


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(InputError):
        Checkpoints.at([-1])
    with pytest.raises(InputError):
        Layout((Span("a", 0, 10), Span("b", 5, 12)))
    assert Layout(()).end == 0


def test_a_negative_message_size_is_refused_in_these_words() -> None:
    # Was render x_layout_of__mutmut_16; layout_of left src/ (issue 18: only tests and
    # bench/ built a Layout from sizes), so the words are now the Layout's own.
    s = Session(window=10_000)
    prompt = s.warm([message(0, "system", 5), message(1, "user", 5)])
    assert (
        error_text(lambda: layout_of(prompt, [3, -1]))
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
