"""Reading what a test's gateway wrote: one helper for every test (issue 38: five copies
of it differed in limit and order)."""

from __future__ import annotations

from typing import Any

from sakur4.receipts import Receipt, list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project


def receipts_of(gw: Any, session: str | None = None) -> list[Receipt]:
    """Every receipt the gateway ``gw`` (the ``start_gateway`` fixture's) stored for its
    project, or for one ``session``, oldest first."""
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        return list_receipts(store, project.id, session=session, limit=10_000)
    finally:
        store.close()
