"""Atlas and impact staleness at the edges the area tests left open (SPEC §4, §5).

Found by mutation testing (scripts/mutation.py, target ``staleness``): a reading's
current hash attached to an entry that is not stale, an entry read back without its
anchor's fact id, impact's staleness giving up at the first Atlas entry of a symbol
impact did not ask about, and impact's default depth and depth bound.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sakur4.atlas import atlas_read, atlas_write
from sakur4.errors import InputError, NotFound
from sakur4.ledger.facts import current_fact, newest_facts
from sakur4.ledger.impact import MAX_DEPTH, ImpactEntry, impact, staleness
from sakur4.ledger.index import index_project
from sakur4.store import Store
from sakur4.store.projects import Project

CHAIN = {
    "a.py": "def a():\n    return 1\n",
    "b.py": "from a import a\n\n\ndef b():\n    return a()\n",
    "c.py": "from b import b\n\n\ndef c():\n    return b()\n",
    "d.py": "from c import c\n\n\ndef d():\n    return c()\n",
    "e.py": "from d import d\n\n\ndef e():\n    return d()\n",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.write_text(text)
        st = path.stat()  # move the mtime: change detection may trust (size, mtime)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


@pytest.fixture
def chain(store: Store, project: Project, project_dir: Path) -> Path:
    _write(project_dir, CHAIN)
    index_project(store, project)
    return project_dir


def test_an_entry_reads_back_as_written_with_its_anchor(
    store: Store, project: Project, chain: Path
) -> None:
    written = atlas_write(store, project.id, "b.py", "b.b", "Calls a.", author="gemma")
    fact = current_fact(store, project.id, "b.py", "b.b")
    assert fact is not None
    assert written.id > 0
    assert written.fact_id == fact.id
    assert written.author == "gemma"
    assert written.created_at
    (reading,) = atlas_read(store, project.id)
    assert reading.entry == written
    # Current: nothing to correct, so no current signature or hash is attached.
    assert (reading.status, reading.current_hash, reading.current_signature) == (
        "current",
        None,
        None,
    )
    assert reading.current_fact_id == fact.id


def test_a_stale_reading_names_the_fact_it_was_checked_against(
    store: Store, project: Project, chain: Path
) -> None:
    atlas_write(store, project.id, "b.py", "b.b", "Calls a.")
    _write(chain, {"b.py": CHAIN["b.py"].replace("return a()", "return a() + 1")})
    index_project(store, project)
    fact = current_fact(store, project.id, "b.py", "b.b")
    assert fact is not None
    (reading,) = atlas_read(store, project.id)
    assert (reading.status, reading.current_hash) == ("stale", fact.symbol_hash)
    assert reading.current_fact_id == fact.id


def test_an_empty_summary_is_refused_with_its_reason(
    store: Store, project: Project, chain: Path
) -> None:
    with pytest.raises(InputError) as refused:
        atlas_write(store, project.id, "b.py", "b.b", "   ")
    assert str(refused.value) == "an Atlas entry needs a summary"


def test_staleness_judges_every_key_it_is_asked_about_whatever_else_the_file_holds(
    store: Store, project: Project, project_dir: Path
) -> None:
    # Two symbols in one file, both with Atlas entries; impact asks about the second
    # only. The first entry must not end the search for the second's verdict.
    _write(project_dir, {"m.py": "def first():\n    return 1\n\n\ndef second():\n    return 2\n"})
    index_project(store, project)
    atlas_write(store, project.id, "m.py", "m.first", "Returns one.")
    atlas_write(store, project.id, "m.py", "m.second", "Returns two.")
    _write(project_dir, {"m.py": "def first():\n    return 1\n\n\ndef second():\n    return 3\n"})
    index_project(store, project)
    second = current_fact(store, project.id, "m.py", "m.second")
    assert staleness(store, project.id, {("m.py", "m.second"): second}) == {
        ("m.py", "m.second"): "changed"
    }


def test_impact_goes_three_levels_by_default_and_up_to_the_bound(
    store: Store, project: Project, chain: Path
) -> None:
    default = {e.qualified_name for e in impact(store, project.id, "a.a").entries}
    assert "d.d" in default  # depth 3
    assert "e.e" not in default  # depth 4
    deepest = impact(store, project.id, "a.a", MAX_DEPTH)
    assert deepest.depth == MAX_DEPTH
    with pytest.raises(InputError, match=f"between 1 and {MAX_DEPTH}, not {MAX_DEPTH + 1}"):
        impact(store, project.id, "a.a", MAX_DEPTH + 1)


def test_impact_reports_every_field_of_every_entry_and_where_it_was_cut(
    store: Store, project: Project, chain: Path
) -> None:
    # Mutation survivors: entry fields at depth 0 and 1, the target's own staleness,
    # the truncation bound. Both the symbol asked about and a referrer changed since
    # their summaries were written.
    atlas_write(store, project.id, "a.py", "a.a", "Returns one.")
    atlas_write(store, project.id, "b.py", "b.b", "Calls a.")
    _write(
        chain,
        {"a.py": "def a():\n    return 2\n", "b.py": CHAIN["b.py"].replace("a()", "a() + 1")},
    )
    index_project(store, project)

    def entry(depth: int, path: str, name: str, kind: str, via: str, ref: str, line: int,
              stale: str | None = None) -> ImpactEntry:  # fmt: skip
        return ImpactEntry(depth, path, name, kind, via, ref, line, True, bool(stale), stale)

    expected = (
        entry(0, "a.py", "a.a", "function", "", "", 1, "changed"),
        entry(1, "b.py", "b", "module", "a", "import", 1),
        entry(1, "b.py", "b.b", "function", "a", "call", 5, "changed"),
        entry(2, "c.py", "c", "module", "b", "import", 1),
        entry(2, "c.py", "c.c", "function", "b", "call", 5),
    )
    whole = impact(store, project.id, "a.a", 2)
    assert (whole.name, whole.depth, whole.truncated) == ("a.a", 2, False)
    assert whole.entries == expected
    exact = impact(store, project.id, "a.a", 2, limit=len(expected))
    assert (exact.entries, exact.truncated) == (expected, False)
    cut = impact(store, project.id, "a.a", 2, limit=2)
    assert (cut.entries, cut.truncated) == (expected[:2], True)


def test_impact_on_an_unknown_name_says_whether_anything_is_indexed(
    store: Store, project: Project, project_dir: Path
) -> None:
    with pytest.raises(NotFound) as empty:
        impact(store, project.id, "nowhere")
    assert str(empty.value) == (
        "no current symbol named 'nowhere' in this project (nothing is indexed yet: run "
        "`sakur4 index`)"
    )
    _write(project_dir, CHAIN)
    index_project(store, project)
    with pytest.raises(NotFound) as indexed:
        impact(store, project.id, "nowhere")
    assert str(indexed.value) == "no current symbol named 'nowhere' in this project"


def test_facts_and_staleness_of_more_files_than_one_query_holds(
    store: Store, project: Project, project_dir: Path
) -> None:
    # newest_facts and staleness query a few hundred paths at a time: every chunk counts.
    files = {f"m{i:03}.py": f"def f():\n    return {i}\n" for i in range(801)}
    _write(project_dir, files)
    index_project(store, project)
    keys = [(path, f"{path[:-3]}.f") for path in files]
    for path, name in keys:
        atlas_write(store, project.id, path, name, "Returns its number.")
    assert set(newest_facts(store, project.id, keys)) == set(keys)
    assert staleness(store, project.id, dict.fromkeys(keys)) == dict.fromkeys(keys, "removed")
