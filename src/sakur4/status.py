"""Per-project counts, as ``sakur4 status`` and the MCP ``status`` tool show them."""

from __future__ import annotations

from sakur4.store import Store

# Each count is scoped to one project; unattributed rows (NULL project) are
# doctor's business, never folded into a project's figures.
_COUNTS = {
    "files": "SELECT count(*) FROM repo_file WHERE project_id = ? AND deleted = 0",
    "facts": "SELECT count(*) FROM symbolic_fact WHERE project_id = ?",
    "atlas_entries": "SELECT count(*) FROM semantic_atlas WHERE project_id = ?",
    "episodes": "SELECT count(*) FROM episodic_stream WHERE project_id = ?",
    "anchors": "SELECT count(*) FROM anchor WHERE project_id = ? AND unpinned_at IS NULL",
    "receipts": "SELECT count(*) FROM receipt WHERE project_id = ?",
}


def empty_status() -> dict[str, int]:
    """The counts of a project the store has recorded nothing for."""
    return dict.fromkeys(_COUNTS, 0)


def project_status(store: Store, project_id: int) -> dict[str, int]:
    """Row counts for ``project_id`` only."""
    return {k: int(store.query(sql, (project_id,))[0][0]) for k, sql in _COUNTS.items()}
