"""Atlas and impact guards for staleness mutants that survived at e8d743d.

docs/verification/mutation.md lists every survivor of the ``staleness`` target; these
are the real gaps among them, each shown failing on its mutant there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sakur4.atlas import atlas_read, atlas_write
from sakur4.errors import NotFound
from sakur4.ledger.impact import impact
from sakur4.ledger.index import index_project
from sakur4.store import Store
from sakur4.store.projects import Project

TWO = {
    "a.py": "def a():\n    return 1\n",
    "b.py": "from a import a\n\n\ndef b():\n    return a()\n",
}


@pytest.fixture
def indexed(store: Store, project: Project, project_dir: Path) -> Path:
    for rel, text in TWO.items():
        (project_dir / rel).write_text(text)
    index_project(store, project)
    return project_dir


def test_an_entry_reads_back_with_the_time_it_was_written(
    store: Store, project: Project, indexed: Path
) -> None:
    # atlas x__entry__mutmut_42: created_at read as str(None), "None", on both sides.
    written = atlas_write(store, project.id, "b.py", "b.b", "Calls a.")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d.*", written.created_at)
    (reading,) = atlas_read(store, project.id)
    assert reading.entry.created_at == written.created_at


def test_an_unknown_project_is_named_in_the_error(store: Store, indexed: Path) -> None:
    # atlas x__project__mutmut_10: NotFound(None).
    with pytest.raises(NotFound) as caught:
        atlas_write(store, 999_999, "b.py", "b.b", "Calls a.")
    assert str(caught.value) == "no project 999999"


def test_a_limit_the_symbols_alone_fill_adds_no_referrer(
    store: Store, project: Project, indexed: Path
) -> None:
    # ledger.impact x_impact__mutmut_63 (``max(1, …)``): one referrer past the limit.
    cut = impact(store, project.id, "a.a", 2, limit=1)
    assert [(e.depth, e.qualified_name) for e in cut.entries] == [(0, "a.a")]
    assert cut.truncated is True
