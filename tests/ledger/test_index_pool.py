"""Indexing in a process pool writes the same Ledger, row for row, as indexing in
one process: the same facts, tombstones, references and files, in the same order."""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from sakur4 import progress
from sakur4.cli import cli
from sakur4.cli.ledger import PROGRESS_FROM
from sakur4.errors import LedgerError
from sakur4.ledger import index, index_project
from sakur4.ledger.index import pool_size
from sakur4.parsers import LanguageSpec, ParsedFile
from sakur4.store import Store, open_store
from sakur4.store.projects import add_project

FIXTURES = Path(__file__).parents[1] / "fixtures" / "lang"
NO_POOL = 1 << 62


def _tree(root: Path) -> None:
    shutil.copytree(FIXTURES, root / "lang")
    for i in range(40):  # enough files that every worker gets several chunks
        calls = "\n".join(f"    m{(i + j) % 40}.f{j}(x)" for j in range(5))
        (root / f"m{i}.py").write_text(
            "import os\n"
            + "".join(f"import m{(i + j) % 40}\n" for j in range(1, 4))
            + "".join(f"\n\ndef f{j}(x):\n    return os.path.join(x, '{j}')\n" for j in range(5))
            + f"\n\nclass C{i}:\n    def run(self, x):\n{calls}\n"
        )


def _edit(root: Path) -> None:
    (root / "m3.py").write_text("def only():\n    return 3\n")  # symbols removed: tombstones
    (root / "m7.py").unlink()  # a file removed
    (root / "new.py").write_text("from m1 import f1\n\n\ndef g():\n    return f1(2)\n")


def _dump(store: Store) -> dict[str, list[tuple[object, ...]]]:
    """Every row the indexer writes, timestamps aside."""
    return {
        "facts": [
            tuple(r)
            for r in store.query(
                "SELECT id, project_id, path, qualified_name, kind, language, signature, "
                "start_line, end_line, symbol_hash, file_hash, tombstone FROM symbolic_fact "
                "ORDER BY id"
            )
        ],
        "refs": [tuple(r) for r in store.query("SELECT * FROM symbol_ref ORDER BY id")],
        "files": [
            tuple(r)
            for r in store.query(
                "SELECT id, project_id, path, content_hash, language, size, deleted "
                "FROM repo_file ORDER BY id"
            )
        ],
    }


def _no_other_threads() -> None:
    """The pool forks only where no other thread runs: name any an earlier test left."""
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not others, f"threads left running by earlier tests keep the pool off: {others}"


@pytest.mark.skipif(pool_size() < 2, reason="a pool needs two cores")
def test_the_pool_writes_the_same_ledger_as_one_process(tmp_path: Path) -> None:
    _no_other_threads()
    root = tmp_path / "proj"
    root.mkdir()
    _tree(root)
    stores = {name: open_store(tmp_path / f"{name}.db") for name in ("pool", "alone")}
    try:
        projects = {name: add_project(s, root) for name, s in stores.items()}
        for step in ("full", "after edits"):
            got = {}
            for name, s in stores.items():
                threshold = 0 if name == "pool" else NO_POOL
                report = index_project(s, projects[name], pool_from_bytes=threshold)
                assert report.workers == (pool_size() if name == "pool" else 1), step
                got[name] = (_dump(s), report.facts_written, report.tombstones_written)
            assert got["pool"] == got["alone"], step
            assert got["pool"][0]["facts"]
            assert got["pool"][0]["refs"]
            if step == "full":
                _edit(root)
    finally:
        for s in stores.values():
            s.close()


def test_a_threaded_process_parses_alone(tmp_path: Path, store: Store) -> None:
    """A server (threads running) never forks workers: a fork can copy a lock another
    thread holds. It indexes in one process, with the same result."""
    root = tmp_path / "proj"
    root.mkdir()
    _tree(root)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        report = index_project(store, add_project(store, root), pool_from_bytes=0)
    finally:
        stop.set()
        other.join()
    assert report.workers == 1
    assert report.files_parsed == 46


def test_a_long_index_into_a_log_writes_plain_progress_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long index shows a bar to a person; piped or logged, plain lines of files
    parsed of the total (no escape codes), and none with --json."""
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.001)  # a line at every chance
    root = tmp_path / "proj"
    root.mkdir()
    total = PROGRESS_FROM + 5
    for i in range(total):
        (root / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    args = ["--store", str(tmp_path / "s.db"), "--project", str(root), "index"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert f"{total} parsed" in out.stdout
    lines = out.stderr.splitlines()
    assert lines, "no progress line"
    assert all(re.fullmatch(rf"indexing: file [\d,]+ of {total}, .* so far, .*", x) for x in lines)
    assert "\x1b" not in out.stderr
    args[1] = str(tmp_path / "other.db")  # every file to read again
    quiet = CliRunner().invoke(cli, [*args, "--json"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""


@pytest.mark.skipif(pool_size() < 2, reason="a pool needs two cores")
def test_a_worker_that_dies_fails_the_run_instead_of_hanging(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parser crash kills its worker: the run must end with a LedgerError, and every
    file written before it stays whole."""
    _no_other_threads()
    root = tmp_path / "proj"
    root.mkdir()
    _tree(root)
    real = index.parse_source
    parent = os.getpid()

    def crash_on_m30(source: bytes, path: str, spec: LanguageSpec | None = None) -> ParsedFile:
        # Only in a worker: run in this process (no pool: a thread an earlier test left
        # running keeps the pool off), the exit would end pytest itself, silently (CI
        # stopped at exit 3 with no summary).
        if path == "m30.py" and os.getpid() != parent:
            os._exit(3)  # as a segfault in tree-sitter would end the worker
        return real(source, path, spec)

    monkeypatch.setattr(index, "parse_source", crash_on_m30)  # forked workers see it
    with pytest.raises(LedgerError, match="worker died"):
        index_project(store, add_project(store, root), pool_from_bytes=0)
    if store.engine == "sqlite":  # PostgreSQL has no such check: its files are its own
        assert store.query("PRAGMA integrity_check")[0][0] == "ok"
