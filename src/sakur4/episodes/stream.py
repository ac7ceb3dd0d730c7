"""The episodic stream: record a session's messages, read them back, change tiers.

Every row carries its project, and every read is filtered by it (SPEC §3, §6).
The harness resends the whole history each turn, so recording is idempotent: a
message already stored at the same place in the session with the same content
hash is recognised and not stored again. A message the client changed in place
(a moved reminder, a new timestamp) is a new version at that position; the
transcript shows the newest version and recall still finds the old one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from sakur4.episodes.messages import message_fields, text_hash
from sakur4.episodes.model import Episode
from sakur4.errors import InputError, NotFound
from sakur4.store.db import Store
from sakur4.vocabulary import Kind, Nature, Tier, estimate_tokens

# Notes written through MCP with no session of their own live here.
NOTES_SESSION = "notes"
_COLUMNS = (
    "id, project_id, session, turn, seq, role, kind, tool_name, tool_call_id, content, "
    "payload, content_hash, tokens, tier, droppable, created_at, nature, part"
)


def _episode(row: sqlite3.Row, depends_on: Sequence[int] = ()) -> Episode:
    return Episode(
        id=int(row["id"]),
        project_id=int(row["project_id"]),
        session=str(row["session"]),
        turn=int(row["turn"]),
        seq=int(row["seq"]),
        role=str(row["role"]),
        kind=Kind(row["kind"]),
        tool_name=row["tool_name"],
        tool_call_id=row["tool_call_id"],
        content=row["content"],
        payload=row["payload"],
        content_hash=str(row["content_hash"]),
        tokens=int(row["tokens"]),
        tier=Tier.of(row["tier"]),
        droppable=bool(row["droppable"]),
        created_at=str(row["created_at"]),
        depends_on=tuple(depends_on),
        nature=Nature(row["nature"]) if row["nature"] else None,
        part=int(row["part"]),
    )


def _dependencies(conn_or_store: Store, ids: Iterable[int]) -> dict[int, list[int]]:
    ids = list(ids)
    deps: dict[int, list[int]] = {i: [] for i in ids}
    # Chunked: SQLite bounds the number of bound parameters.
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for r in conn_or_store.query(
            f"SELECT episode_id, depends_on FROM episode_dependency "
            f"WHERE episode_id IN ({marks}) ORDER BY depends_on",
            chunk,
        ):
            deps[int(r[0])].append(int(r[1]))
    return deps


def fetch_episodes(store: Store, project_id: int, ids: Sequence[int]) -> dict[int, Episode]:
    """The episodes of ``project_id`` among ``ids`` (others are simply absent)."""
    found: dict[int, Episode] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        # "+project_id": find the rows by id; the project index walks the whole project.
        rows = store.query(
            f"SELECT {_COLUMNS} FROM episodic_stream WHERE +project_id = ? AND id IN ({marks})",
            [project_id, *chunk],
        )
        deps = _dependencies(store, [int(r["id"]) for r in rows])
        found.update({int(r["id"]): _episode(r, deps[int(r["id"])]) for r in rows})
    return found


def refresh_episodes(
    store: Store, project_id: int, ids: Sequence[int], cached: Mapping[int, Episode]
) -> dict[int, Episode]:
    """:func:`fetch_episodes` for a caller holding ``cached`` from an earlier call: of a
    cached episode only the tier is read again (what changes an episode after it is
    stored: a tier, and with Dropped its content); the others are read whole."""
    tiers: dict[int, Tier] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for r in store.query(
            f"SELECT id, tier FROM episodic_stream WHERE +project_id = ? AND id IN ({marks})",
            [project_id, *chunk],
        ):
            tiers[int(r[0])] = Tier.of(r[1])
    stale = [i for i in tiers if i not in cached or cached[i].tier is not tiers[i]]
    found = {i: cached[i] for i in tiers if i not in stale}
    found.update(fetch_episodes(store, project_id, stale))
    return found


def _find_call(
    conn: sqlite3.Connection, project_id: int, session: str, call_id: str, before_seq: int
) -> int | None:
    row = conn.execute(
        "SELECT id FROM episodic_stream WHERE project_id = ? AND session = ? "
        "AND kind = 'tool_call' AND seq < ? AND content IS NOT NULL "
        "AND instr(',' || tool_call_id || ',', ',' || ? || ',') > 0 "
        "ORDER BY seq DESC, id DESC LIMIT 1",
        (project_id, session, before_seq, call_id),
    ).fetchone()
    return int(row[0]) if row else None


def record_episodes(
    store: Store,
    project_id: int,
    session: str,
    turn: int,
    messages: Sequence[Mapping[str, Any]],
    *,
    first_seq: int = 0,
    count_tokens: Callable[[str], int] = estimate_tokens,
    droppable_kinds: Collection[Kind] = (),
    known: Sequence[int | None] = (),
    natures: Sequence[Nature | None] = (),
    parts: Sequence[int] = (),
) -> list[int]:
    """Store a session's messages (``messages[i]`` is at position ``first_seq + i``)
    and return one episode id per message, reusing the ids of messages already seen.

    ``known[i]``: the id ``messages[i]`` was stored under by an earlier call, when the
    caller knows it is the same message at the same place (a gateway compares each
    turn with the last): it is not hashed or looked up again, so a turn costs its new
    messages only. A tool result is linked to the episode holding its call. All or
    nothing: one malformed message stores none of them.

    ``natures[i]``/``parts[i]``: what ``messages[i]`` is and, for a slice of a harness
    message split by nature, its place in it (:mod:`sakur4.episodes.natures`).
    """
    if not session:
        raise InputError("an episode needs a session")
    given = {i: k for i, k in enumerate(known[: len(messages)]) if k is not None}
    # Validate everything before writing.
    fields = {i: message_fields(m) for i, m in enumerate(messages) if i not in given}
    ids: list[int] = []
    with store.tx() as c:
        seen: dict[tuple[int, str], int] = {}
        seqs = [first_seq + i for i in fields]
        for start in range(0, len(seqs), 500):
            chunk = seqs[start : start + 500]
            for r in c.execute(
                "SELECT id, seq, content_hash FROM episodic_stream "
                f"WHERE project_id = ? AND session = ? AND seq IN ({','.join('?' * len(chunk))}) "
                "AND kind != 'note' ORDER BY id",
                (project_id, session, *chunk),
            ):
                seen[(int(r[1]), str(r[2]))] = int(r[0])
        for i in range(len(messages)):
            if i in given:
                ids.append(given[i])
                continue
            f = fields[i]
            seq = first_seq + i
            known_id = seen.get((seq, f.content_hash))
            if known_id is not None:
                ids.append(known_id)
                continue
            cur = c.execute(
                "INSERT INTO episodic_stream (project_id, session, turn, seq, role, kind, "
                "tool_name, tool_call_id, content, payload, content_hash, tokens, droppable, "
                "nature, part) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    project_id,
                    session,
                    turn,
                    seq,
                    f.role,
                    f.kind,
                    f.tool_name,
                    ",".join(f.tool_call_ids) or None,
                    f.content,
                    f.payload,
                    f.content_hash,
                    max(0, count_tokens(f.content)),
                    int(f.kind in droppable_kinds),
                    natures[i] if i < len(natures) else None,
                    parts[i] if i < len(parts) else 0,
                ),
            )
            new_id = int(cur.lastrowid or 0)
            seen[(seq, f.content_hash)] = new_id
            ids.append(new_id)
            if f.kind is Kind.TOOL_RESULT and f.tool_call_ids:
                call = _find_call(c, project_id, session, f.tool_call_ids[0], seq)
                if call is not None:
                    c.execute(
                        "INSERT OR IGNORE INTO episode_dependency (episode_id, depends_on) "
                        "VALUES (?, ?)",
                        (new_id, call),
                    )
    return ids


def forget_turn(store: Store, project_id: int, session: str, turn: int) -> int:
    """Delete what ``turn`` of ``session`` recorded (a request refused after recording
    stores nothing); returns how many episodes went. Messages seen in earlier turns
    keep their own turn and stay."""
    with store.tx() as c:
        ids = [
            int(r[0])
            for r in c.execute(
                "SELECT id FROM episodic_stream WHERE project_id = ? AND session = ? "
                "AND turn = ? AND kind != 'note'",
                (project_id, session, turn),
            )
        ]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            c.execute(
                f"DELETE FROM episode_dependency WHERE episode_id IN ({marks}) "
                f"OR depends_on IN ({marks})",
                [*chunk, *chunk],
            )
            c.execute(
                f"DELETE FROM embedding WHERE owner = 'episode' AND owner_id IN ({marks})", chunk
            )
            c.execute(f"DELETE FROM episodic_stream WHERE id IN ({marks})", chunk)
    return len(ids)


def last_turn(store: Store, project_id: int, session: str) -> int:
    """The highest turn number ``session`` has recorded (0: none)."""
    row = store.query(
        "SELECT max(turn) FROM episodic_stream WHERE project_id = ? AND session = ?",
        (project_id, session),
    )
    return int(row[0][0] or 0)


def remember(
    store: Store,
    project_id: int,
    text: str,
    session: str | None = None,
    *,
    turn: int = 0,
    count_tokens: Callable[[str], int] = estimate_tokens,
) -> int:
    """Store a note (written by the model through MCP, or by a person) and return its id."""
    if not text.strip():
        raise InputError("a note needs some text")
    where = session or NOTES_SESSION
    with store.tx() as c:
        seq = c.execute(
            "SELECT count(*) FROM episodic_stream WHERE project_id = ? AND session = ? "
            "AND kind = 'note'",
            (project_id, where),
        ).fetchone()[0]
        cur = c.execute(
            "INSERT INTO episodic_stream (project_id, session, turn, seq, role, kind, content, "
            "payload, content_hash, tokens) "
            "VALUES (?, ?, ?, ?, 'assistant', 'note', ?, NULL, ?, ?)",
            (project_id, where, turn, seq, text, text_hash(text), max(0, count_tokens(text))),
        )
        return int(cur.lastrowid or 0)


def session_episodes(store: Store, project_id: int, session: str) -> list[Episode]:
    """The session's transcript in order: the newest version of each message, notes excluded."""
    rows = store.query(
        f"SELECT {_COLUMNS} FROM episodic_stream WHERE project_id = ? AND session = ? "
        "AND kind != 'note' ORDER BY seq, id",
        (project_id, session),
    )
    newest: dict[int, sqlite3.Row] = {}
    for r in rows:
        newest[int(r["seq"])] = r  # later ids overwrite: the client's current version
    deps = _dependencies(store, [int(r["id"]) for r in newest.values()])
    return [_episode(r, deps[int(r["id"])]) for _, r in sorted(newest.items())]


def set_tiers(store: Store, project_id: int, changes: Mapping[int, Tier]) -> None:
    """Move episodes to new tiers in one transaction, or none of them.

    Dropped deletes the content, payload and vectors and keeps the row as a
    tombstone; it is refused unless the episode is droppable and no episode left
    Live (after these changes) depends on it. Nothing comes back from Dropped.
    Which rung an episode may take each turn is the context engine's rule.
    """
    bad = {repr(t) for t in changes.values() if not isinstance(t, Tier)}
    if bad:
        names = ", ".join(t.label for t in Tier)
        raise InputError(f"unknown tier(s) {', '.join(sorted(bad))}; tiers are {names}")
    if not changes:
        return
    ids = list(changes)
    with store.tx() as c:
        marks = ",".join("?" * len(ids))
        rows = {
            int(r[0]): (str(r[1]), bool(r[2]))
            for r in c.execute(
                f"SELECT id, tier, droppable FROM episodic_stream "
                f"WHERE +project_id = ? AND id IN ({marks})",
                [project_id, *ids],
            )
        }
        missing = [i for i in ids if i not in rows]
        if missing:
            raise NotFound(f"no episode(s) {missing} in this project")
        dropped = Tier.DROPPED.label
        for eid, tier in changes.items():
            if rows[eid][0] == dropped and tier is not Tier.DROPPED:
                raise InputError(f"episode {eid} was dropped: its content is gone")
            if tier is not Tier.DROPPED:
                c.execute("UPDATE episodic_stream SET tier = ? WHERE id = ?", (tier.label, eid))
        for eid, tier in changes.items():
            if tier is not Tier.DROPPED or rows[eid][0] == dropped:
                continue
            if not rows[eid][1]:
                raise InputError(f"episode {eid} is not droppable")
            live = c.execute(
                "SELECT d.episode_id FROM episode_dependency d JOIN episodic_stream e "
                "ON e.id = d.episode_id WHERE d.depends_on = ? AND e.tier = 'live'",
                (eid,),
            ).fetchall()
            if live:
                raise InputError(
                    f"episode {eid} cannot be dropped: Live episode(s) "
                    f"{[int(r[0]) for r in live]} depend on it"
                )
            c.execute(
                "UPDATE episodic_stream SET tier = 'dropped', content = NULL, payload = NULL "
                "WHERE id = ?",
                (eid,),
            )
            c.execute("DELETE FROM embedding WHERE owner = 'episode' AND owner_id = ?", (eid,))


def open_fold(store: Store, project_id: int, episode_id: int) -> Episode:
    """The full episode behind a stub or reference, if it is in this project and not dropped."""
    got = fetch_episodes(store, project_id, [episode_id]).get(episode_id)
    if got is None:
        raise NotFound(f"no episode {episode_id} in this project")
    if got.tier is Tier.DROPPED:
        raise NotFound(f"episode {episode_id} was dropped: only its tombstone remains")
    return got
