"""doctor never fails on a bad store: each case gives a report and an exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sakur4.cli import cli
from sakur4.store import open_store
from sakur4.store.db import driver
from sakur4.store.migrations import MIGRATIONS


def run_doctor(store: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["--store", str(store), "doctor", "--json", *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.output)


def check(report: dict, name: str) -> dict:  # type: ignore[type-arg]
    found = [c for c in report["checks"] if c["name"] == name]
    assert found, f"no {name} check in {report['checks']}"
    return found[0]  # type: ignore[no-any-return]


def make_real_store(path: Path) -> None:
    s = open_store(path)
    with s.tx() as c:
        c.execute("INSERT INTO project (root, name) VALUES ('/p', 'p')")
        for i in range(200):
            c.execute(
                "INSERT INTO episodic_stream (project_id, session, turn, seq, role, kind, "
                "content, content_hash, tokens) "
                "VALUES (1, 's', 1, ?, 'user', 'message', ?, 'h', 5)",
                (i, "x" * 500),
            )
    s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()


def test_missing_store_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    code, report = run_doctor(tmp_path / "nope.db")
    assert code == 0
    assert check(report, "store")["level"] == "warn"
    assert not (tmp_path / "nope.db").exists(), "doctor must not create the store"


def test_directory_in_place_of_the_store(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    code, report = run_doctor(tmp_path / "dir.db")
    assert code == 1
    assert "directory" in check(report, "store")["detail"]


def test_zero_length_file(tmp_path: Path) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    code, report = run_doctor(tmp_path / "empty.db")
    assert check(report, "store")["level"] == "warn"
    assert "empty" in check(report, "store")["detail"]
    assert code == 0


def test_random_bytes(tmp_path: Path) -> None:
    (tmp_path / "rand.db").write_bytes(os.urandom(8192))
    code, report = run_doctor(tmp_path / "rand.db")
    assert code == 1
    assert "not a SQLite database" in check(report, "store")["detail"]


def test_truncated_real_store(tmp_path: Path) -> None:
    path = tmp_path / "trunc.db"
    make_real_store(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    code, report = run_doctor(path)
    assert code == 1
    failing = [c for c in report["checks"] if c["level"] == "fail"]
    assert failing, report
    # The other checks still ran, and a damaged file is not blamed on another process.
    assert check(report, "vectors")["level"] in ("ok", "warn")
    assert "another process" not in check(report, "lock")["detail"]


def test_corrupted_page_fails_integrity(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    make_real_store(path)
    data = bytearray(path.read_bytes())
    page = 4096
    for i in range(page * 3, page * 6):
        data[i] = 0xA5
    path.write_bytes(bytes(data))
    code, report = run_doctor(path)
    assert code == 1
    assert check(report, "integrity")["level"] == "fail"
    # Each store check is guarded on its own: the schema was still read.
    assert check(report, "schema")["detail"].startswith(f"version {len(MIGRATIONS)} ")


def test_store_from_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    make_real_store(path)
    s = open_store(path)
    with s.tx() as c:
        c.execute("INSERT INTO schema_migrations (name) VALUES ('m900_future')")
    s.close()
    code, report = run_doctor(path)
    assert code == 1
    assert "newer" in check(report, "schema")["detail"]
    assert report["projects"][0]["episodes"] == 200


@pytest.fixture
def locked_store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "locked.db"
    make_real_store(path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, {driver.__name__.split(".")[0]} as d
            c = d.connect({str(path)!r}, isolation_level=None)
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO project (root, name) VALUES ('/q', 'q')")
            print("locked", flush=True)
            sys.stdin.readline()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    yield path
    holder.communicate("\n", timeout=10)


def test_store_locked_by_another_writer(locked_store: Path) -> None:
    code, report = run_doctor(locked_store)
    assert check(report, "lock")["level"] == "warn"
    assert check(report, "integrity")["level"] == "ok"
    assert report["projects"][0]["episodes"] == 200
    assert code == 0


def _doctor_as_unprivileged(path: Path) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAKUR4_")}
    cmd = [sys.executable, "-m", "sakur4", "--store", str(path), "doctor", "--json"]
    if os.geteuid() == 0:
        # root reads anything: run doctor as an unprivileged user instead.
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv")
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        env["HOME"] = "/nonexistent"
        can_run = subprocess.run(
            [*drop, sys.executable, "-c", "import sakur4"], env=env, capture_output=True, timeout=60
        )
        if can_run.returncode != 0:
            pytest.skip("the unprivileged user cannot run this checkout's Python")
        cmd = [*drop, *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout), out.stderr


@pytest.fixture
def open_dir() -> Iterator[Path]:
    # pytest's own tmp dirs are private to their owner; this one anyone may enter.
    d = Path(tempfile.mkdtemp(prefix="sakur4-doctor-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_no_read_permission_on_the_file(open_dir: Path) -> None:
    path = open_dir / "private.db"
    make_real_store(path)
    path.chmod(0)
    code, report, _ = _doctor_as_unprivileged(path)
    assert code == 1
    assert "not readable" in check(report, "store")["detail"]


def test_no_permission_on_the_directory(open_dir: Path) -> None:
    inner = open_dir / "locked-dir"
    inner.mkdir()
    make_real_store(inner / "s.db")
    inner.chmod(0o700)
    code, report, _ = _doctor_as_unprivileged(inner / "s.db")
    assert code == 1
    assert "cannot be reached" in check(report, "store")["detail"]


def test_human_output_has_no_traceback_on_garbage(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(5000))
    out = subprocess.run(
        [sys.executable, "-m", "sakur4", "--store", str(path), "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in out.stderr + out.stdout
    assert out.returncode == 1
    assert "FAIL" in out.stdout


def test_healthy_store(tmp_path: Path) -> None:
    path = tmp_path / "ok.db"
    make_real_store(path)
    code, report = run_doctor(path)
    assert code == 0, report
    assert check(report, "integrity")["level"] == "ok"
    assert check(report, "schema")["detail"].startswith(f"version {len(MIGRATIONS)} ")
    assert report["projects"] == [
        {
            "id": 1,
            "name": "p",
            "root": "/p",
            "files": 0,
            "facts": 0,
            "atlas_entries": 0,
            "episodes": 200,
            "receipts": 0,
        }
    ]


def test_unattributed_rows_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    make_real_store(path)
    s = open_store(path)
    with s.tx() as c:
        c.execute(
            "INSERT INTO episodic_stream (project_id, session, turn, seq, role, kind, content, "
            "content_hash, tokens) VALUES (NULL, 's', 1, 999, 'user', 'message', 'old', 'h', 1)"
        )
    s.close()
    _, report = run_doctor(path)
    u = check(report, "unattributed")
    assert u["level"] == "warn"
    assert u["detail"].startswith("1 row")
