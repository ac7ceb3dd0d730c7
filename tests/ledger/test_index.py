"""Indexing: incremental, append-only, tombstones, skips, and the project boundary."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sakur4.errors import PathOutsideProject, StoreError
from sakur4.ledger import current_fact, fact_history, find_symbols, index_project
from sakur4.store import Store
from sakur4.store.projects import Project

FIXTURES = Path(__file__).parents[1] / "fixtures" / "lang"

APP = """\
from util import helper


def main():
    return helper(1)


def unused():
    return 0
"""
UTIL = """\
def helper(x):
    return x + 1
"""


def write(root: Path, rel: str, text: str | bytes) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def age(path: Path, seconds: int = 60) -> None:
    """Back-date a file so its mtime is trusted (fresh files are re-hashed, see RACY_NS)."""
    t = path.stat().st_mtime_ns - seconds * 1_000_000_000
    os.utime(path, ns=(t, t))


@pytest.fixture
def tree(project_dir: Path) -> Path:
    write(project_dir, "app.py", APP)
    write(project_dir, "util.py", UTIL)
    shutil.copytree(FIXTURES, project_dir / "lang")
    return project_dir


def test_first_index_writes_every_symbol(store: Store, project: Project, tree: Path) -> None:
    r = index_project(store, project)
    assert r.files_parsed == 2 + 6
    assert r.languages == {
        "go": 1,
        "javascript": 1,
        "python": 3,
        "rust": 1,
        "tsx": 1,
        "typescript": 1,
    }
    assert r.files_removed == 0
    assert r.facts_written == store.query("SELECT count(*) FROM symbolic_fact")[0][0]
    f = current_fact(store, project.id, "app.py", "app.main")
    assert f is not None
    assert f.kind == "function"
    assert (f.start_line, f.end_line) == (4, 5)
    assert f.signature == "def main():"
    row = store.query(
        "SELECT language, size, content_hash, deleted FROM repo_file WHERE path = 'app.py'"
    )[0]
    assert (row["language"], row["size"], row["deleted"]) == ("python", len(APP), 0)
    assert len(row["content_hash"]) == 32


def test_unchanged_files_are_not_parsed_again(store: Store, project: Project, tree: Path) -> None:
    index_project(store, project)
    r = index_project(store, project)
    assert (r.files_parsed, r.facts_written, r.tombstones_written) == (0, 0, 0)
    assert r.files_unchanged == r.files_seen == 8
    # Touched but identical: read and hashed, still not parsed.
    for p in tree.rglob("*.py"):
        age(p)
    r = index_project(store, project)
    assert r.files_parsed == 0
    # Now the mtimes are old enough to be trusted: not even read.
    reads: list[str] = []
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        reads.append(self.name)
        return real(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "read_bytes", counting)
        index_project(store, project)
    assert not [n for n in reads if n.endswith(".py")]


def test_editing_a_body_appends_a_new_fact_and_keeps_the_old(
    store: Store, project: Project, tree: Path
) -> None:
    index_project(store, project)
    before = current_fact(store, project.id, "app.py", "app.main")
    unused_before = current_fact(store, project.id, "app.py", "app.unused")
    write(tree, "app.py", APP.replace("helper(1)", "helper(2)"))
    r = index_project(store, project)
    assert (r.files_parsed, r.facts_written, r.tombstones_written) == (1, 1, 0)
    after = current_fact(store, project.id, "app.py", "app.main")
    assert before is not None
    assert after is not None
    assert after.id > before.id
    assert after.symbol_hash != before.symbol_hash
    history = fact_history(store, project.id, "app.py", "app.main")
    assert [h.id for h in history] == [before.id, after.id]  # the old fact is still there
    # The symbol that did not change was not rewritten.
    assert current_fact(store, project.id, "app.py", "app.unused") == unused_before


def test_moving_a_symbol_records_its_new_span_with_the_same_hash(
    store: Store, project: Project, tree: Path
) -> None:
    index_project(store, project)
    before = current_fact(store, project.id, "util.py", "util.helper")
    write(tree, "util.py", "\n\n" + UTIL)
    index_project(store, project)
    after = current_fact(store, project.id, "util.py", "util.helper")
    assert before is not None
    assert after is not None
    assert after.symbol_hash == before.symbol_hash
    assert (after.start_line, before.start_line) == (3, 1)


def test_removing_a_symbol_writes_a_tombstone(store: Store, project: Project, tree: Path) -> None:
    index_project(store, project)
    write(tree, "app.py", APP.split("\n\ndef unused")[0] + "\n")
    r = index_project(store, project)
    assert r.tombstones_written == 1
    gone = current_fact(store, project.id, "app.py", "app.unused")
    assert gone is not None
    assert gone.tombstone
    assert find_symbols(store, project.id, "unused") == []
    assert len(fact_history(store, project.id, "app.py", "app.unused")) == 2
    # It comes back: a new live fact after the tombstone.
    write(tree, "app.py", APP)
    index_project(store, project)
    back = current_fact(store, project.id, "app.py", "app.unused")
    assert back is not None
    assert not back.tombstone


def test_deleting_a_file_tombstones_its_symbols(store: Store, project: Project, tree: Path) -> None:
    index_project(store, project)
    (tree / "util.py").unlink()
    r = index_project(store, project)
    assert (r.files_removed, r.tombstones_written) == (1, 1)
    f = current_fact(store, project.id, "util.py", "util.helper")
    assert f is not None
    assert f.tombstone
    assert store.query("SELECT deleted FROM repo_file WHERE path = 'util.py'")[0][0] == 1
    assert store.query("SELECT count(*) FROM symbol_ref WHERE path = 'util.py'")[0][0] == 0
    # Indexing the deleted path itself is allowed and idempotent.
    r = index_project(store, project, "util.py")
    assert (r.files_removed, r.tombstones_written) == (0, 0)


def test_an_update_through_a_raw_connection_fails(
    store: Store, project: Project, tree: Path, store_path: Path
) -> None:
    index_project(store, project)
    raw = sqlite3.connect(store_path)  # the standard library's driver, no Sakur4 code
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("UPDATE symbolic_fact SET symbol_hash = 'forged' WHERE path = 'app.py'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("DELETE FROM symbolic_fact")
    finally:
        raw.close()


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 shell on this machine")
def test_an_update_through_the_sqlite3_shell_fails(
    store: Store, project: Project, tree: Path, store_path: Path
) -> None:
    index_project(store, project)
    before = store.query("SELECT kind, count(*) FROM symbolic_fact GROUP BY kind")
    done = subprocess.run(
        ["sqlite3", str(store_path), "UPDATE symbolic_fact SET kind = 'class';"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "append-only" in done.stderr
    after = store.query("SELECT kind, count(*) FROM symbolic_fact GROUP BY kind")
    assert [tuple(r) for r in after] == [tuple(r) for r in before]


def test_a_crash_mid_batch_leaves_no_half_indexed_file(
    store: Store, project: Project, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: the reference insert fails after the facts went in.
    real_tx = store.tx

    class Failing:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *a: Any) -> Any:
            return self.conn.execute(sql, *a)

        def executemany(self, sql: str, rows: Any) -> Any:
            if "INSERT INTO symbol_ref" in sql:
                raise sqlite3.OperationalError("disk I/O error (injected)")
            return self.conn.executemany(sql, rows)

    from contextlib import contextmanager

    @contextmanager
    def failing_tx() -> Any:
        with real_tx() as c:
            yield Failing(c)

    monkeypatch.setattr(store, "tx", failing_tx)
    with pytest.raises(sqlite3.OperationalError, match="injected"):
        index_project(store, project)
    monkeypatch.undo()
    assert store.query("SELECT count(*) FROM symbolic_fact")[0][0] == 0
    assert store.query("SELECT count(*) FROM repo_file")[0][0] == 0
    r = index_project(store, project)  # and the next run does the whole job
    assert r.files_parsed == 8


def test_a_fresh_mtime_is_not_trusted(store: Store, project: Project, tree: Path) -> None:
    # Written and indexed within the same moment: a second edit with the same
    # size and mtime must still be seen (git's "racy clean" problem).
    index_project(store, project)
    util = tree / "util.py"
    st = util.stat()
    util.write_text(UTIL.replace("x + 1", "x + 2"))
    os.utime(util, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = index_project(store, project)
    assert r.files_parsed == 1


def test_gitignore_vendored_binary_and_oversized_are_skipped_and_counted(
    store: Store, project: Project, project_dir: Path
) -> None:
    write(project_dir, ".gitignore", "generated/\n*.gen.py\n!keep.gen.py\n")
    write(project_dir, "ok.py", "def ok(): pass\n")
    write(project_dir, "generated/a.py", "def a(): pass\n")
    write(project_dir, "x.gen.py", "def x(): pass\n")
    write(project_dir, "keep.gen.py", "def keep(): pass\n")
    write(project_dir, "sub/.gitignore", "local.py\n")
    write(project_dir, "sub/local.py", "def local(): pass\n")
    write(project_dir, "sub/other.py", "def other(): pass\n")
    write(project_dir, "node_modules/lib/index.js", "function lib() {}\n")
    write(project_dir, ".venv/lib/site.py", "def site(): pass\n")
    write(project_dir, "blob.py", b"def b(): pass\n\x00\x01\x02")
    write(project_dir, "big.py", "x = 1\n" * 400)
    write(project_dir, "README.md", "# hi\n")
    r = index_project(store, project, max_file_bytes=1000)
    indexed = {row[0] for row in store.query("SELECT path FROM repo_file")}
    assert indexed == {"ok.py", "keep.gen.py", "sub/other.py"}
    assert r.skipped == {
        "binary": 1,
        "gitignored": 3,  # generated/, x.gen.py, sub/local.py
        "no-grammar": 3,  # .gitignore, sub/.gitignore, README.md
        "oversized": 1,
        "vendored": 2,  # node_modules/, .venv/
    }


def test_a_build_directory_that_is_a_python_package_is_source(
    store: Store, project: Project, project_dir: Path
) -> None:
    write(project_dir, "pkg/build/__init__.py", "def make(): pass\n")
    write(project_dir, "build/out.py", "def generated(): pass\n")
    r = index_project(store, project)
    assert find_symbols(store, project.id, "make") != []
    assert find_symbols(store, project.id, "generated") == []
    assert r.skipped == {"vendored": 1}


def test_a_file_that_becomes_ignored_is_retired(store: Store, project: Project, tree: Path) -> None:
    index_project(store, project)
    write(tree, ".gitignore", "util.py\n")
    r = index_project(store, project)
    assert r.files_removed == 1
    f = current_fact(store, project.id, "util.py", "util.helper")
    assert f is not None
    assert f.tombstone


def test_paths_outside_the_project_are_refused(
    store: Store, project: Project, tree: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.py", "def secret(): pass\n")
    with pytest.raises(PathOutsideProject, match="outside the project root"):
        index_project(store, project, "../outside")
    with pytest.raises(PathOutsideProject):
        index_project(store, project, outside / "secret.py")
    (tree / "link").symlink_to(outside)
    with pytest.raises(PathOutsideProject):
        index_project(store, project, "link/secret.py")
    assert store.query("SELECT count(*) FROM repo_file")[0][0] == 0


def test_symlinks_found_while_walking_are_not_followed(
    store: Store, project: Project, tree: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.py", "def secret(): pass\n")
    (tree / "out_dir").symlink_to(outside)
    (tree / "out_file.py").symlink_to(outside / "secret.py")
    (tree / "in_file.py").symlink_to(tree / "util.py")
    r = index_project(store, project)
    assert r.skipped["symlink-outside"] == 2
    assert r.skipped["symlink"] == 1
    assert find_symbols(store, project.id, "secret") == []
    assert [f.path for f in find_symbols(store, project.id, "util.helper")] == ["util.py"]


def test_indexing_a_subpath_touches_only_that_subpath(
    store: Store, project: Project, tree: Path
) -> None:
    index_project(store, project)
    write(tree, "app.py", APP.replace("helper(1)", "helper(3)"))
    (tree / "lang" / "sample.go").unlink()
    r = index_project(store, project, "util.py")
    assert (r.scope, r.files_seen, r.files_parsed, r.files_removed) == ("util.py", 1, 0, 0)
    r = index_project(store, project, tree / "app.py")
    assert (r.files_parsed, r.files_removed) == (1, 0)
    r = index_project(store, project, "lang")
    assert (r.scope, r.files_removed) == ("lang", 1)
    # A scope is a path prefix by whole components: "lang" is not "lang2/" or "lang.py".
    write(tree, "lang2/x.py", "def x(): pass\n")
    write(tree, "lang.py", "def y(): pass\n")
    index_project(store, project)
    (tree / "lang2" / "x.py").unlink()
    (tree / "lang.py").unlink()
    r = index_project(store, project, "lang")
    assert r.files_removed == 0
    assert find_symbols(store, project.id, "lang2.x.x") != []


def test_progress_is_reported_per_file(store: Store, project: Project, tree: Path) -> None:
    seen: list[tuple[int, int, str]] = []
    index_project(store, project, progress=lambda d, t, p: seen.append((d, t, p)))
    assert [d for d, _, _ in seen] == list(range(1, 9))
    assert {t for _, t, _ in seen} == {8}


def test_store_errors_surface_as_store_errors(store: Store, project: Project, tree: Path) -> None:
    store.close()
    with pytest.raises(StoreError):
        index_project(store, project)
