"""Anchor storage: pin, unpin, list; scoped to project and session."""

from __future__ import annotations

from pathlib import Path

import pytest

from sakur4.anchors import list_anchors, pin_anchor, unpin_anchor
from sakur4.errors import InputError, NotFound
from sakur4.status import project_status
from sakur4.store import Store
from sakur4.store.projects import Project, add_project


def test_pin_list_orders_by_priority_then_age(store: Store, project: Project) -> None:
    low = pin_anchor(store, project.id, "Write tests first.")
    high = pin_anchor(store, project.id, "Never push to main.", priority=10)
    also_low = pin_anchor(store, project.id, "Use ruff.")
    assert [a.id for a in list_anchors(store, project.id)] == [high.id, low.id, also_low.id]
    assert high.priority == 10
    assert high.unpinned_at is None


def test_session_anchors_join_project_ones(store: Store, project: Project) -> None:
    everywhere = pin_anchor(store, project.id, "Python 3.11 only.")
    mine = pin_anchor(store, project.id, "This session: fix issue 8.", session="s1")
    pin_anchor(store, project.id, "Other session's goal.", session="s2")
    assert [a.id for a in list_anchors(store, project.id, "s1")] == [everywhere.id, mine.id]
    assert [a.id for a in list_anchors(store, project.id)] == [everywhere.id]


def test_unpin_keeps_the_row(store: Store, project: Project) -> None:
    a = pin_anchor(store, project.id, "Temporary rule.")
    gone = unpin_anchor(store, project.id, a.id)
    assert gone.unpinned_at is not None
    assert list_anchors(store, project.id) == []
    assert [x.id for x in list_anchors(store, project.id, include_unpinned=True)] == [a.id]
    assert project_status(store, project.id)["anchors"] == 0
    with pytest.raises(InputError, match="already unpinned"):
        unpin_anchor(store, project.id, a.id)


def test_other_projects_anchors_are_invisible(
    store: Store, project: Project, tmp_path: Path
) -> None:
    (tmp_path / "o").mkdir()
    other = add_project(store, tmp_path / "o")
    theirs = pin_anchor(store, other.id, "Their rule.")
    assert list_anchors(store, project.id) == []
    with pytest.raises(NotFound):
        unpin_anchor(store, project.id, theirs.id)
    assert list_anchors(store, other.id)[0].unpinned_at is None


def test_empty_text_is_refused(store: Store, project: Project) -> None:
    with pytest.raises(InputError):
        pin_anchor(store, project.id, "  \n")
