"""The anchor renderer: priority order, budget check, never a silent drop."""

from __future__ import annotations

import pytest

from sakur4.engine import Anchor, render_anchor_block
from sakur4.errors import AnchorBudgetError, InputError


def test_orders_by_priority_then_id() -> None:
    block = render_anchor_block(
        [Anchor(3, "use tabs", 1, 3), Anchor(1, "never push", 5, 3), Anchor(2, "py3.11", 1, 3)],
        budget=100,
    )
    assert block.head_ids == (1, 2, 3)
    lines = block.head.splitlines()
    assert lines[1:] == ["- [anchor 1] never push", "- [anchor 2] py3.11", "- [anchor 3] use tabs"]
    assert block.riding == ""
    assert block.tokens == 9


def test_anchors_pinned_mid_session_ride_separately_in_the_same_order() -> None:
    block = render_anchor_block(
        [Anchor(1, "a", 1, 2), Anchor(2, "b", 9, 2), Anchor(3, "c", 3, 2)], budget=10, riding={2, 3}
    )
    assert block.head_ids == (1,)
    assert block.riding_ids == (2, 3)
    assert block.riding.splitlines()[1:] == ["- [anchor 2] b", "- [anchor 3] c"]


def test_too_many_anchors_is_a_typed_error_naming_the_shortfall() -> None:
    anchors = [Anchor(1, "a", 1, 60), Anchor(2, "b", 1, 50)]
    with pytest.raises(AnchorBudgetError) as caught:
        render_anchor_block(anchors, budget=100, riding={2})  # riders count too
    assert (caught.value.needed, caught.value.budget) == (110, 100)
    assert "short by 10" in str(caught.value)


def test_exactly_at_budget_fits_and_keeps_every_anchor() -> None:
    block = render_anchor_block([Anchor(1, "a", 1, 60), Anchor(2, "b", 1, 40)], budget=100)
    assert block.head_ids == (1, 2)


def test_no_anchors_renders_nothing() -> None:
    block = render_anchor_block([], budget=0)
    assert (block.head, block.riding, block.tokens) == ("", "", 0)


def test_duplicate_ids_are_input_errors() -> None:
    with pytest.raises(InputError):
        render_anchor_block([Anchor(1, "a", 1, 1), Anchor(1, "b", 1, 1)], budget=10)
