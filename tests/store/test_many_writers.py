"""Many writers, no loss (issue 39, item 2): real processes, each with a data directory
of its own (two "machines"), writing one PostgreSQL store at the same time: turn
receipts, one shared session's transcript, notes and Ledger indexing. Nothing
acknowledged is lost, nothing is stored twice, and a writer killed mid-run loses none
of what it acknowledged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from fixtures_postgresql import PostgresServer
from sakur4.store import Store, open_store
from sakur4.store.migrations import MIGRATIONS

WRITER = Path(__file__).with_name("writer.py")
# Issue 39's goal: 4 writers x 200 mixed operations (a round is a receipt, a transcript,
# a note; every fifth an index too: 64 rounds are 204 operations), a writer killed 10 times.
WRITERS = 4
ROUNDS = 64
KILLS = 10


def _start(url: str, name: str, root: Path, home: Path, rounds: int) -> subprocess.Popen[str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data")}
    env["XDG_CACHE_HOME"] = str(home / "cache")
    return subprocess.Popen(
        [sys.executable, str(WRITER), url, name, str(root), str(rounds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=home,
    )


def _acks(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "shared.py").write_text("def shared():\n    return 1\n\n\nclass Thing:\n    pass\n")
    return root


def _check_no_duplicates(s: Store, rounds: int) -> None:
    # One row per message of the shared session, whoever sent it first.
    seqs = [r[0] for r in s.query("SELECT seq FROM episodic_stream WHERE session = 'shared'")]
    assert sorted(seqs) == list(range(rounds))
    # Notes: one per acknowledged remember, numbered without a gap or a repeat.
    notes = s.query("SELECT seq, content FROM episodic_stream WHERE kind = 'note'")
    assert len({r[1] for r in notes}) == len(notes)
    assert sorted(r[0] for r in notes) == list(range(len(notes)))
    # Receipts: (session, turn) once each.
    keys = Counter((r[0], r[1]) for r in s.query("SELECT session, turn FROM receipt"))
    assert max(keys.values()) == 1
    # The Ledger: no fact appended that says what the current fact of its key already
    # says (two indexers racing over one file would append it twice).
    facts = s.query(
        "SELECT path, qualified_name, symbol_hash, tombstone FROM symbolic_fact ORDER BY id"
    )
    last: dict[tuple[str, str], tuple[str, int]] = {}
    for path, name, digest, tomb in facts:
        assert last.get((path, name)) != (digest, tomb), f"{path}:{name} appended twice"
        last[(path, name)] = (digest, tomb)
    assert {name for _, name in last} >= {"shared.shared", "shared.Thing"}
    assert s.query("SELECT count(*) FROM project")[0][0] == 1


def test_many_writers_lose_nothing_and_duplicate_nothing(
    tmp_path: Path, postgresql_server: PostgresServer
) -> None:
    url = postgresql_server.new_schema_url()
    open_store(url).close()  # the schema made once, before the race (as a deployment does)
    root = _project(tmp_path)
    names = [f"w{i}" for i in range(WRITERS)]
    procs = [_start(url, n, root, tmp_path / n, ROUNDS) for n in names]
    acks = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        acks += _acks(out)
    s = open_store(url)
    try:
        receipts = {int(r[0]) for r in s.query("SELECT id FROM receipt")}
        assert {a["value"] for a in acks if a["kind"] == "receipt"} == receipts
        assert len(receipts) == ROUNDS * len(names)
        notes = {int(r[0]) for r in s.query("SELECT id FROM episodic_stream WHERE kind = 'note'")}
        assert {a["value"] for a in acks if a["kind"] == "note"} == notes
        assert len(notes) == ROUNDS * len(names)
        # Both writers were told the same ids for the shared transcript's messages.
        told = [a["value"] for a in acks if a["kind"] == "episodes"]
        longest = max(told, key=len)
        assert all(t == longest[: len(t)] for t in told)  # type: ignore[index]
        _check_no_duplicates(s, ROUNDS)
    finally:
        s.close()


def test_a_killed_writer_loses_nothing_it_acknowledged(
    tmp_path: Path, postgresql_server: PostgresServer
) -> None:
    url = postgresql_server.new_schema_url()
    open_store(url).close()
    root = _project(tmp_path)
    steady = _start(url, "steady", root, tmp_path / "steady", ROUNDS)
    acks: list[dict[str, object]] = []
    for kill in range(KILLS):
        victim = _start(url, f"victim{kill}", root, tmp_path / f"victim{kill}", 1000)
        assert victim.stdout is not None
        # Killed mid-run, after a number of acknowledged writes that moves the kill
        # through every kind of write (and an index, from the 16th on).
        for seen, line in enumerate(victim.stdout, 1):
            acks.append(json.loads(line))
            if seen == 3 + 2 * kill:
                victim.send_signal(signal.SIGKILL)
                break
        rest, _ = victim.communicate(timeout=60)
        acks += _acks(rest)  # lines already written before the kill
        assert victim.returncode == -signal.SIGKILL
    out, err = steady.communicate(timeout=300)
    assert steady.returncode == 0, err
    acks += _acks(out)
    s = open_store(url)
    try:
        receipts = {int(r[0]) for r in s.query("SELECT id FROM receipt")}
        notes = {int(r[0]) for r in s.query("SELECT id FROM episodic_stream WHERE kind = 'note'")}
        assert {a["value"] for a in acks if a["kind"] == "receipt"} <= receipts
        assert {a["value"] for a in acks if a["kind"] == "note"} <= notes
        episodes = {int(r[0]) for r in s.query("SELECT id FROM episodic_stream")}
        for a in acks:
            if a["kind"] == "episodes":
                assert set(a["value"]) <= episodes  # type: ignore[arg-type]
        _check_no_duplicates(s, ROUNDS)
    finally:
        s.close()


def test_writers_opening_a_new_store_at_once_migrate_it_once(
    tmp_path: Path, postgresql_server: PostgresServer
) -> None:
    """Each migration is applied by whichever process takes the write lock first; the
    others find it recorded inside their own transaction and go on."""
    url = postgresql_server.new_schema_url()
    opening = "import sys; from sakur4.store import open_store; open_store(sys.argv[1]).close()"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", opening, url], stderr=subprocess.PIPE, text=True, cwd=tmp_path
        )
        for _ in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    s = open_store(url)
    try:
        names = [r[0] for r in s.query("SELECT name FROM schema_migrations ORDER BY id")]
        assert names == [m.name for m in MIGRATIONS]
    finally:
        s.close()
