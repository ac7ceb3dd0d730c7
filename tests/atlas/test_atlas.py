"""The Atlas against the real Ledger: anchors are checked on write and on every read."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from sakur4.atlas import anchor_status, atlas_read, atlas_write
from sakur4.errors import AtlasAnchorError
from sakur4.ledger.facts import current_fact
from sakur4.ledger.index import index_project
from sakur4.store import Store
from sakur4.store.projects import Project, add_project

SOURCE = """\
def greet(name):
    return "hi " + name


class Parser:
    def parse(self, src):
        return src
"""


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    # Change detection may trust (size, mtime): move the mtime so no test depends on timing.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


@pytest.fixture
def indexed(store: Store, project: Project, project_dir: Path) -> Path:
    src = project_dir / "mod.py"
    _write(src, SOURCE)
    index_project(store, project)
    return src


def test_fresh_entry_reads_back_unlabelled(store: Store, project: Project, indexed: Path) -> None:
    e = atlas_write(store, project.id, "mod.py", "mod.greet", "Greets someone by name.", "gemma")
    (r,) = atlas_read(store, project.id)
    assert r.entry == e
    assert r.status == "current"
    assert r.label == ""
    assert r.current_signature is None


def test_edit_reindex_stale_then_delete_removed(
    store: Store, project: Project, indexed: Path
) -> None:
    atlas_write(store, project.id, "mod.py", "mod.greet", "Greets someone by name.")
    atlas_write(store, project.id, "mod.py", "mod.Parser.parse", "Returns the source unchanged.")
    _write(indexed, SOURCE.replace("def greet(name):", "def greet(name, punctuation='!'):"))
    index_project(store, project)
    readings = {r.entry.qualified_name: r for r in atlas_read(store, project.id)}
    greet = readings["mod.greet"]
    assert greet.label == "[STALE]"
    assert greet.current_signature == "def greet(name, punctuation='!'):"
    assert greet.current_hash
    assert greet.current_hash != greet.entry.anchor_hash
    assert readings["mod.Parser.parse"].label == ""  # untouched symbol stays current

    _write(indexed, SOURCE.split("\n\n\n")[1])  # greet deleted
    index_project(store, project)
    (greet,) = atlas_read(store, project.id, "mod.py", "mod.greet")
    assert greet.label == "[STALE: removed]"
    assert greet.current_signature is None

    indexed.unlink()  # the whole file goes: every entry in it is removed
    index_project(store, project)
    assert {r.label for r in atlas_read(store, project.id)} == {"[STALE: removed]"}


def test_a_new_summary_supersedes_a_stale_one(
    store: Store, project: Project, indexed: Path
) -> None:
    atlas_write(store, project.id, "mod.py", "mod.greet", "Old summary.")
    _write(indexed, SOURCE.replace('"hi "', '"hello "'))
    index_project(store, project)
    assert atlas_read(store, project.id)[0].label == "[STALE]"
    atlas_write(store, project.id, "mod.py", "mod.greet", "Says hello.")
    (now,) = atlas_read(store, project.id)
    assert (now.entry.summary, now.label) == ("Says hello.", "")
    assert [r.label for r in atlas_read(store, project.id, history=True)] == ["", "[STALE]"]


@pytest.mark.parametrize(
    ("path", "name", "message"),
    [
        ("mod.py", "mod.nothing", "no symbol 'mod.nothing' in mod.py"),
        ("other.py", "mod.greet", "no symbol 'mod.greet' in other.py"),
        ("../outside.py", "x", "outside the project root"),
        ("/etc/passwd", "x", "outside the project root"),
    ],
)
def test_no_valid_anchor_is_refused_and_nothing_stored(
    store: Store, project: Project, indexed: Path, path: str, name: str, message: str
) -> None:
    with pytest.raises(AtlasAnchorError, match=message):
        atlas_write(store, project.id, path, name, "A summary.")
    assert store.query("SELECT count(*) FROM semantic_atlas")[0][0] == 0


def test_tombstoned_symbol_is_refused(store: Store, project: Project, indexed: Path) -> None:
    _write(indexed, SOURCE.split("\n\n\n")[1])
    index_project(store, project)
    with pytest.raises(AtlasAnchorError, match="was removed"):
        atlas_write(store, project.id, "mod.py", "mod.greet", "Greets.")
    assert store.query("SELECT count(*) FROM semantic_atlas")[0][0] == 0


def test_paths_are_normalised_to_the_ledger_key(
    store: Store, project: Project, indexed: Path
) -> None:
    a = atlas_write(store, project.id, str(indexed), "mod.greet", "Absolute path.")
    b = atlas_write(store, project.id, "./sub/../mod.py", "mod.greet", "Dotted path.")
    assert a.path == b.path == "mod.py"


def test_symlink_out_of_the_project_is_refused(
    store: Store, project: Project, indexed: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (project.root / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(AtlasAnchorError, match="outside"):
        atlas_write(store, project.id, "link/mod.py", "mod.greet", "Through a symlink.")


def test_another_projects_symbol_is_no_anchor(
    store: Store, project: Project, indexed: Path, tmp_path: Path
) -> None:
    (tmp_path / "o").mkdir()
    other = add_project(store, tmp_path / "o")
    with pytest.raises(AtlasAnchorError, match="no symbol"):
        atlas_write(store, other.id, "mod.py", "mod.greet", "Not here.")
    atlas_write(store, project.id, "mod.py", "mod.greet", "Here.")
    assert atlas_read(store, other.id) == []


def test_the_verdict_rule(store: Store, project: Project, indexed: Path) -> None:
    fact = current_fact(store, project.id, "mod.py", "mod.greet")
    assert fact is not None
    assert anchor_status(fact.symbol_hash, fact) == "current"
    assert anchor_status("another hash", fact) == "stale"
    assert anchor_status(fact.symbol_hash, replace(fact, tombstone=True)) == "removed"
    assert anchor_status(fact.symbol_hash, None) == "removed"


def test_an_edit_not_yet_indexed_reads_stale(store: Store, project: Project, indexed: Path) -> None:
    """Issue 15, row 13: the read checks the anchored file, not only the Ledger."""
    atlas_write(store, project.id, "mod.py", "mod.greet", "Greets someone by name.")
    atlas_write(store, project.id, "mod.py", "mod.Parser.parse", "Returns the source unchanged.")
    _write(indexed, SOURCE.replace('"hi "', '"hello "'))  # edited; no index_project
    readings = {r.entry.qualified_name: r for r in atlas_read(store, project.id)}
    assert readings["mod.greet"].label == "[STALE]"
    assert readings["mod.Parser.parse"].label == ""  # same file, symbol unchanged
    facts = store.query("SELECT count(*) FROM symbolic_fact")[0][0]
    _write(indexed, indexed.read_text())  # touched, same bytes: the hash says unchanged
    assert [r.label for r in atlas_read(store, project.id, qualified_name="greet")] == ["[STALE]"]
    assert store.query("SELECT count(*) FROM symbolic_fact")[0][0] == facts
    indexed.unlink()
    assert {r.label for r in atlas_read(store, project.id)} == {"[STALE: removed]"}


SHAPES = """\
class Circle:
    def area(self):
        return 3.14 * self.r * self.r


class Square:
    def area(self):
        return self.side * self.side
"""


def test_a_name_resolves_as_ledger_symbol_resolves_it(
    store: Store, project: Project, project_dir: Path
) -> None:
    """Issue 15, row 17: `Circle.area` is what ledger_symbol finds; atlas_write too."""
    _write(project_dir / "shapes.py", SHAPES)
    index_project(store, project)
    e = atlas_write(store, project.id, "shapes.py", "Circle.area", "Area of the circle.")
    assert e.qualified_name == "shapes.Circle.area"  # the entry names the match
    (r,) = atlas_read(store, project.id, qualified_name="Circle.area")
    assert (r.entry.id, r.label) == (e.id, "")
    with pytest.raises(AtlasAnchorError, match=r"'area' in shapes.py matches 2 symbols"):
        atlas_write(store, project.id, "shapes.py", "area", "Which one?")
    with pytest.raises(AtlasAnchorError, match=r"has it in shapes.py \(shapes.Circle.area\)"):
        atlas_write(store, project.id, "other.py", "Circle.area", "Wrong file.")
