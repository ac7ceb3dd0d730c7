"""A number SQLite cannot hold is the caller's error, never the driver's OverflowError."""

from __future__ import annotations

import pytest

from sakur4.anchors import pin_anchor, unpin_anchor
from sakur4.episodes import open_fold
from sakur4.errors import InputError
from sakur4.receipts import list_receipts
from sakur4.store import Store
from sakur4.store.projects import Project

HUGE = 10**23


def test_store_calls_refuse_integers_sqlite_cannot_hold(store: Store, project: Project) -> None:
    for call in (
        lambda: open_fold(store, project.id, HUGE),  # a read (Store.query)
        lambda: unpin_anchor(store, project.id, HUGE),  # a write (Store.tx)
        lambda: list_receipts(store, project.id, limit=HUGE),
        lambda: pin_anchor(store, project.id, "x", priority=HUGE),
    ):
        with pytest.raises(InputError, match="out of range"):
            call()
    # The refused write rolled back: the store is usable and unchanged.
    assert pin_anchor(store, project.id, "y").id == 1
