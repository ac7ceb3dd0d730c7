"""Resume points: where the server picks up after a change."""

from __future__ import annotations

import pytest

from sakur4.engine import Checkpoints, Layout, Span
from sakur4.errors import InputError


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
