"""What must hold in a store after any process was killed at any moment (SPEC §3, §9).

:class:`StoreChecker` is run after every kill, with the writer dead:

- ``PRAGMA integrity_check`` is ok, ``PRAGMA foreign_key_check`` finds nothing, and
  the full-text index agrees with the episodes (FTS5 ``integrity-check``);
- nothing is half-written: a gateway request's new messages are all stored or none;
  a tool result whose call was stored before it depends on that call; no message is
  stored twice at one place of a session; a file's current facts are exactly what
  its ``repo_file`` version parses to (a removed file's facts are all tombstones);
- every write a client saw acknowledged is in the store, once (:class:`Acks`);
- the Ledger is append-only across crashes: the fact count never decreases and no
  fact row seen before has changed.

The checker never writes: it opens its own connection and closes it before the
next process starts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reliability.projectfiles import ProjectFiles
from sakur4.episodes.messages import message_fields
from sakur4.store.db import DriverError, connect

FACT_COLUMNS = (
    "id, project_id, path, qualified_name, kind, language, signature, start_line, end_line, "
    "symbol_hash, file_hash, tombstone, indexed_at"
)


def message_key(seq: int, message: dict[str, Any]) -> tuple[int, str]:
    """Where and what a chat message is in the episodic stream: (seq, content hash)."""
    return seq, message_fields(message).content_hash


@dataclass(frozen=True)
class SentTurn:
    """A chat request as the client sent it: its session and the messages new in it."""

    session: str
    new: tuple[tuple[int, str], ...]  # (seq, content hash) of messages not in the previous one


@dataclass(frozen=True)
class AckedTurn:
    """A chat request the gateway answered: every message of it, and its receipt."""

    session: str
    messages: tuple[tuple[int, str], ...]
    receipt: int
    completed: bool  # non-streamed: the receipt was completed before the answer was sent


@dataclass
class Acks:
    """The client's log: everything it sent, and what it saw acknowledged."""

    notes: dict[str, int] = field(default_factory=dict)  # note text -> acked episode id
    notes_sent: set[str] = field(default_factory=set)
    anchors: dict[str, int] = field(default_factory=dict)  # anchor text -> acked anchor id
    turns: list[AckedTurn] = field(default_factory=list)
    sent_turns: list[SentTurn] = field(default_factory=list)
    index_runs: int = 0  # acked `sakur4 index` runs (each checked against the tree at once)

    @property
    def count(self) -> int:
        return len(self.notes) + len(self.anchors) + len(self.turns) + self.index_runs


@dataclass
class StoreChecker:
    """Checks one store file after each kill; remembers the Ledger it saw last time."""

    path: Path
    files: ProjectFiles | None = None  # the tree `sakur4 index` works on, if any
    facts: dict[int, str] = field(default_factory=dict)  # fact id -> digest of its row
    checks: int = 0
    verified: int = 0  # acknowledged writes found, summed over checks

    def check(self, acks: Acks) -> list[str]:
        """Every violation found now (empty: the store is sound)."""
        if not self.path.exists():
            return [] if acks.count == 0 else [f"{self.path} is gone but {acks.count} acks"]
        conn = connect(self.path)
        try:
            self.checks += 1
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            problems = _integrity(conn)
            if problems or "schema_migrations" not in tables:
                return problems  # nothing more can be trusted (or nothing was created yet)
            if "symbolic_fact" not in tables:
                return problems if acks.count == 0 else [*problems, "schema missing, acks exist"]
            problems += self._append_only(conn)
            problems += _transcript(conn)
            problems += _turns(conn, acks)
            problems += self._acked(conn, acks)
            if self.files is not None:
                problems += ledger_agreement(conn, self.files)
            return problems
        finally:
            conn.close()

    def _append_only(self, conn: Any) -> list[str]:
        rows = conn.execute(f"SELECT {FACT_COLUMNS} FROM symbolic_fact ORDER BY id").fetchall()
        seen = {int(r[0]): _digest(r) for r in rows}
        out = []
        if len(seen) < len(self.facts):
            out.append(f"Ledger shrank: {len(self.facts)} facts before, {len(seen)} now")
        changed = [i for i, d in self.facts.items() if seen.get(i) != d]
        if changed:
            out.append(f"Ledger facts changed or removed: ids {changed[:10]}")
        self.facts = seen
        return out

    def _acked(self, conn: Any, acks: Acks) -> list[str]:
        out = []
        notes: dict[str, list[int]] = {}
        for r in conn.execute("SELECT id, content FROM episodic_stream WHERE kind = 'note'"):
            notes.setdefault(str(r[1]), []).append(int(r[0]))
        for text, eid in acks.notes.items():
            if notes.get(text) != [eid]:
                out.append(f"acked note {eid} {text!r}: stored as {notes.get(text)}")
        twice = [t for t in acks.notes_sent if len(notes.get(t, [])) > 1]
        if twice:
            out.append(f"notes stored twice: {twice[:5]}")
        anchors = {int(r[0]): str(r[1]) for r in conn.execute("SELECT id, text FROM anchor")}
        for text, aid in acks.anchors.items():
            if anchors.get(aid) != text:
                out.append(f"acked anchor {aid} {text!r} is not in the store")
        self.verified += len(acks.notes) + len(acks.anchors) + len(acks.turns)
        return out


def _digest(row: Iterable[Any]) -> str:
    return hashlib.blake2b(repr(tuple(row)).encode(), digest_size=12).hexdigest()


def _integrity(conn: Any) -> list[str]:
    rows = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
    out = [] if rows == ["ok"] else [f"integrity_check: {'; '.join(map(str, rows[:5]))}"]
    fk = conn.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        out.append(f"foreign_key_check: {[tuple(r) for r in fk[:5]]}")
    has_fts = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='episode_fts'"
    ).fetchone()
    if has_fts:
        try:
            conn.execute("INSERT INTO episode_fts (episode_fts) VALUES ('integrity-check')")
        except DriverError as e:
            out.append(f"full-text index disagrees with the episodes: {e}")
    return out


def _transcript(conn: Any) -> list[str]:
    """No message stored twice at one place; no tool result without its stored call."""
    out = []
    twice = conn.execute(
        "SELECT project_id, session, seq, count(*) FROM episodic_stream WHERE kind != 'note' "
        "GROUP BY project_id, session, seq, content_hash HAVING count(*) > 1 LIMIT 5"
    ).fetchall()
    if twice:
        out.append(f"messages stored twice (project, session, seq, n): {[tuple(r) for r in twice]}")
    # A result recorded after a matching call must have been linked to one (same tx).
    orphans = conn.execute(
        "SELECT r.id, r.tool_call_id FROM episodic_stream r WHERE r.kind = 'tool_result' "
        "AND r.tool_call_id IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM episode_dependency d WHERE d.episode_id = r.id) "
        "AND EXISTS (SELECT 1 FROM episodic_stream c WHERE c.kind = 'tool_call' "
        "  AND c.project_id = r.project_id AND c.session = r.session AND c.seq < r.seq "
        "  AND c.id < r.id AND instr(',' || c.tool_call_id || ',', ',' || r.tool_call_id || ','))"
        " LIMIT 5"
    ).fetchall()
    if orphans:
        out.append(f"tool results without their call's dependency: {[tuple(r) for r in orphans]}")
    return out


def _turns(conn: Any, acks: Acks) -> list[str]:
    if not acks.sent_turns and not acks.turns:
        return []
    stored: dict[str, set[tuple[int, str]]] = {}
    for r in conn.execute(
        "SELECT session, seq, content_hash FROM episodic_stream WHERE kind != 'note'"
    ):
        stored.setdefault(str(r[0]), set()).add((int(r[1]), str(r[2])))
    out = []
    for t in acks.sent_turns:
        have = sum(1 for k in t.new if k in stored.get(t.session, ()))
        if 0 < have < len(t.new):
            out.append(f"half-written request in {t.session}: {have} of {len(t.new)} new messages")
    receipts = {
        int(r[0]): (str(r[1]), r[2], str(r[3]))
        for r in conn.execute("SELECT id, session, server_processed, detail FROM receipt")
    }
    for t in acks.turns:
        missing = [k for k in t.messages if k not in stored.get(t.session, ())]
        if missing:
            out.append(f"acked turn in {t.session}: messages {missing[:3]} not stored")
        got = receipts.get(t.receipt)
        if got is None or got[0] != t.session:
            out.append(f"acked turn in {t.session}: receipt {t.receipt} missing or misfiled")
        elif t.completed and got[1] is None and not json.loads(got[2]).get("failed"):
            out.append(f"acked turn in {t.session}: receipt {t.receipt} never completed")
    return out


def ledger_agreement(conn: Any, files: ProjectFiles) -> list[str]:
    """Each file's current facts are exactly what its stored version parses to."""
    root = str(files.root.resolve())
    row = conn.execute("SELECT id FROM project WHERE root = ?", (root,)).fetchone()
    if row is None:
        return []
    pid = int(row[0])
    current: dict[str, set[tuple[Any, ...]]] = {}
    tombstoned: dict[str, int] = {}
    for r in conn.execute(
        "SELECT path, qualified_name, kind, signature, start_line, end_line, symbol_hash, "
        "tombstone FROM symbolic_fact WHERE id IN (SELECT max(id) FROM symbolic_fact "
        "WHERE project_id = ? GROUP BY path, qualified_name)",
        (pid,),
    ):
        if r[7]:
            tombstoned[r[0]] = tombstoned.get(r[0], 0) + 1
        else:
            current.setdefault(r[0], set()).add(tuple(r[1:7]))
    out = []
    rows = conn.execute(
        "SELECT path, content_hash, deleted FROM repo_file WHERE project_id = ?", (pid,)
    ).fetchall()
    known = set()
    for path, digest, deleted in rows:
        known.add(path)
        facts = current.get(path, set())
        if deleted:
            if facts:
                out.append(f"{path}: removed, yet {len(facts)} live facts")
            continue
        want = files.expected_symbols(path, digest)
        if want is None:
            out.append(f"{path}: repo_file names version {digest}, which was never written")
        elif facts != set(want):
            out.append(
                f"{path}@{digest[:8]}: half-indexed ({len(facts)} live facts, "
                f"{len(want)} expected; {len(facts ^ set(want))} differ)"
            )
    strays = sorted(set(current) - known)
    if strays:
        out.append(f"facts for files with no repo_file row: {strays[:5]}")
    return out[:20]


def index_matches(path: Path, files: ProjectFiles, tree: dict[str, str]) -> list[str]:
    """After an acknowledged `sakur4 index`: the Ledger's live files are exactly ``tree``."""
    conn = connect(path)
    try:
        root = str(files.root.resolve())
        row = conn.execute("SELECT id FROM project WHERE root = ?", (root,)).fetchone()
        if row is None:
            return ["acked index run, but the project is not in the store"]
        live = {
            str(r[0]): str(r[1])
            for r in conn.execute(
                "SELECT path, content_hash FROM repo_file WHERE project_id = ? AND deleted = 0",
                (int(row[0]),),
            )
        }
    finally:
        conn.close()
    if live == tree:
        return []
    wrong = sorted(k for k in tree.keys() | live.keys() if tree.get(k) != live.get(k))
    return [f"acked index run: {len(wrong)} file(s) differ from the tree, e.g. {wrong[:3]}"]
