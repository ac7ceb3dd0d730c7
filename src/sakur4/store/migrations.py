"""The schema's history: an ordered list of migrations, applied when the store opens.

Each migration is a function recorded by name in ``schema_migrations`` and runs
in its own transaction. An applied migration is never edited: change the schema
by appending a new one. A store that records a migration this list does not
know was written by a newer Sakur4 and is refused, not guessed at.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from sakur4.errors import StoreCorrupt, StoreError, StoreNewerSchema, StoreUnavailable
from sakur4.store.db import DriverError, DriverFailure, Store, convert, driver
from sakur4.store.dialect import table_exists_sql
from sakur4.store.postgresql import Connection as PgConnection
from sakur4.store.postgresql import engine_of
from sakur4.store.postgresql_schema import POSTGRESQL
from sakur4.store.postgresql_schema import SCHEMA_TABLE as PG_SCHEMA_TABLE


@dataclass(frozen=True)
class Migration:
    name: str
    apply: Callable[[sqlite3.Connection], None]


MIGRATIONS: list[Migration] = []


def migration(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
    MIGRATIONS.append(Migration(fn.__name__, fn))
    return fn


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run ``script`` statement by statement inside the caller's transaction.

    ``executescript`` would COMMIT the open transaction first (Python 3.11), so a
    failed migration could leave half a schema behind.
    """
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if driver.complete_statement(buf):
            conn.execute(buf)
            buf = ""
    if buf.strip():
        raise ValueError(f"incomplete SQL statement in migration: {buf.strip()[:80]}")


NOW = "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    """The first schema. The episodic stream had no project then (see m002)."""
    run_script(
        conn,
        f"""
        CREATE TABLE project (
            id INTEGER PRIMARY KEY,
            root TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            created_at TEXT NOT NULL DEFAULT {NOW}
        );

        -- The current state of each indexed file (mutable); facts are below.
        CREATE TABLE repo_file (
            id INTEGER PRIMARY KEY,
            project_id INTEGER NOT NULL REFERENCES project(id),
            path TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            language TEXT,
            size INTEGER NOT NULL,
            last_indexed TEXT NOT NULL,
            deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
            UNIQUE (project_id, path)
        );

        -- The Symbolic Ledger: parser-written, append-only. The key of a fact is
        -- (project_id, path, qualified_name); "current" is the newest id per key.
        CREATE TABLE symbolic_fact (
            id INTEGER PRIMARY KEY,
            project_id INTEGER NOT NULL REFERENCES project(id),
            path TEXT NOT NULL,
            qualified_name TEXT NOT NULL,
            kind TEXT NOT NULL,
            language TEXT NOT NULL,
            signature TEXT NOT NULL DEFAULT '',
            start_line INTEGER,
            end_line INTEGER,
            symbol_hash TEXT NOT NULL DEFAULT '',
            file_hash TEXT NOT NULL DEFAULT '',
            tombstone INTEGER NOT NULL DEFAULT 0 CHECK (tombstone IN (0, 1)),
            indexed_at TEXT NOT NULL DEFAULT {NOW}
        );
        CREATE INDEX symbolic_fact_key ON symbolic_fact (project_id, path, qualified_name, id);
        CREATE INDEX symbolic_fact_name ON symbolic_fact (project_id, qualified_name);
        CREATE TRIGGER symbolic_fact_no_update BEFORE UPDATE ON symbolic_fact
        BEGIN
            SELECT RAISE(ABORT, 'symbolic_fact is append-only: UPDATE refused');
        END;
        CREATE TRIGGER symbolic_fact_no_delete BEFORE DELETE ON symbolic_fact
        BEGIN
            SELECT RAISE(ABORT, 'symbolic_fact is append-only: DELETE refused');
        END;

        -- References found in each file's current version (derived, replaced per file).
        CREATE TABLE symbol_ref (
            id INTEGER PRIMARY KEY,
            project_id INTEGER NOT NULL REFERENCES project(id),
            path TEXT NOT NULL,
            from_name TEXT NOT NULL,
            to_name TEXT NOT NULL,
            kind TEXT NOT NULL,
            line INTEGER
        );
        CREATE INDEX symbol_ref_file ON symbol_ref (project_id, path);
        CREATE INDEX symbol_ref_to ON symbol_ref (project_id, to_name);

        -- The Semantic Atlas: model-written, each entry anchored to a Ledger fact.
        CREATE TABLE semantic_atlas (
            id INTEGER PRIMARY KEY,
            project_id INTEGER NOT NULL REFERENCES project(id),
            path TEXT NOT NULL,
            qualified_name TEXT NOT NULL,
            fact_id INTEGER NOT NULL REFERENCES symbolic_fact(id),
            anchor_hash TEXT NOT NULL,
            summary TEXT NOT NULL,
            author TEXT,
            created_at TEXT NOT NULL DEFAULT {NOW}
        );
        CREATE INDEX semantic_atlas_anchor ON semantic_atlas (project_id, path, qualified_name);

        CREATE TABLE episodic_stream (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            turn INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            kind TEXT NOT NULL,
            tool_name TEXT,
            tool_call_id TEXT,
            content TEXT,
            payload TEXT,
            content_hash TEXT NOT NULL,
            tokens INTEGER NOT NULL CHECK (tokens >= 0),
            tier TEXT NOT NULL DEFAULT 'live'
                CHECK (tier IN ('live', 'masked', 'referenced', 'archived', 'dropped')),
            droppable INTEGER NOT NULL DEFAULT 0 CHECK (droppable IN (0, 1)),
            created_at TEXT NOT NULL DEFAULT {NOW}
        );
        CREATE INDEX episodic_stream_session ON episodic_stream (session, seq);

        CREATE TABLE episode_dependency (
            episode_id INTEGER NOT NULL REFERENCES episodic_stream(id),
            depends_on INTEGER NOT NULL REFERENCES episodic_stream(id),
            PRIMARY KEY (episode_id, depends_on)
        ) WITHOUT ROWID;

        CREATE VIRTUAL TABLE episode_fts USING fts5(
            content, content='episodic_stream', content_rowid='id',
            tokenize='porter unicode61'
        );
        CREATE TRIGGER episode_fts_insert AFTER INSERT ON episodic_stream BEGIN
            INSERT INTO episode_fts (rowid, content) VALUES (new.id, coalesce(new.content, ''));
        END;
        CREATE TRIGGER episode_fts_delete AFTER DELETE ON episodic_stream BEGIN
            INSERT INTO episode_fts (episode_fts, rowid, content)
                VALUES ('delete', old.id, coalesce(old.content, ''));
        END;
        CREATE TRIGGER episode_fts_update AFTER UPDATE OF content ON episodic_stream BEGIN
            INSERT INTO episode_fts (episode_fts, rowid, content)
                VALUES ('delete', old.id, coalesce(old.content, ''));
            INSERT INTO episode_fts (rowid, content) VALUES (new.id, coalesce(new.content, ''));
        END;

        CREATE TABLE anchor (
            id INTEGER PRIMARY KEY,
            project_id INTEGER NOT NULL REFERENCES project(id),
            session TEXT,
            text TEXT NOT NULL,
            priority INTEGER NOT NULL DEFAULT 0,
            pinned_at TEXT NOT NULL DEFAULT {NOW},
            unpinned_at TEXT
        );
        CREATE INDEX anchor_project ON anchor (project_id, session);

        CREATE TABLE receipt (
            id INTEGER PRIMARY KEY,
            project_id INTEGER REFERENCES project(id),
            session TEXT NOT NULL,
            turn INTEGER NOT NULL,
            created_at TEXT NOT NULL DEFAULT {NOW},
            backend TEXT,
            context_window INTEGER NOT NULL CHECK (context_window > 0),
            prompt_tokens INTEGER NOT NULL CHECK (prompt_tokens >= 0),
            pressure REAL NOT NULL,
            profile TEXT NOT NULL,
            profile_reason TEXT NOT NULL,
            verdict TEXT NOT NULL CHECK (verdict IN ('fits', 'reclaimed', 'stepping', 'refused')),
            steps TEXT NOT NULL DEFAULT '[]',
            requested_cut INTEGER,
            chosen_cut INTEGER,
            predicted_reuse INTEGER,
            server_cached INTEGER,
            server_processed INTEGER,
            prefill_ms REAL,
            cache_verdict TEXT NOT NULL
                CHECK (cache_verdict IN ('reused', 'full-re-prefill', 'unverifiable')),
            divergence INTEGER,
            detail TEXT NOT NULL DEFAULT '{{}}'
        );
        CREATE INDEX receipt_session ON receipt (project_id, session, turn);

        -- Vectors are plain rows (float32 blobs) so the schema does not depend on
        -- an extension; sqlite-vec, where it loads, searches them in the database.
        CREATE TABLE embedding (
            id INTEGER PRIMARY KEY,
            project_id INTEGER REFERENCES project(id),
            owner TEXT NOT NULL,
            owner_id INTEGER NOT NULL,
            model TEXT NOT NULL,
            dim INTEGER NOT NULL CHECK (dim > 0),
            vector BLOB NOT NULL,
            UNIQUE (owner, owner_id, model)
        );
        CREATE INDEX embedding_scope ON embedding (project_id, owner, model);

        -- What the capability probe found, per backend URL.
        CREATE TABLE backend_probe (
            id INTEGER PRIMARY KEY,
            url TEXT NOT NULL,
            probed_at TEXT NOT NULL DEFAULT {NOW},
            result TEXT NOT NULL
        );
        CREATE INDEX backend_probe_url ON backend_probe (url, id);
        """,
    )


@migration
def m002_episode_project(conn: sqlite3.Connection) -> None:
    """Episodes gain a project. Old rows stay NULL: their project is not recoverable,
    and attributing them to whatever project is open now would be a guess."""
    run_script(
        conn,
        """
        ALTER TABLE episodic_stream ADD COLUMN project_id INTEGER REFERENCES project(id);
        CREATE INDEX episodic_stream_project ON episodic_stream (project_id, session, seq);
        """,
    )


@migration
def m003_ledger_lookup(conn: sqlite3.Connection) -> None:
    """What incremental indexing and name lookup need.

    ``repo_file.mtime_ns``: with the size, tells an unchanged file without reading
    it (NULL means "read and hash it"). ``symbolic_fact.name`` is generated from
    the qualified name, so no fact row is ever updated to fill it, and indexed so a
    reference (which names a bare identifier) finds its definitions."""
    # The bare name: the text after the last '.', cut at the '~' that numbers a
    # second definition of one qualified name in one file ("mod.f~2" -> "f").
    last = (
        "substr(qualified_name, "
        "length(rtrim(qualified_name, replace(qualified_name, '.', ''))) + 1)"
    )
    bare = f"substr({last}, 1, instr({last} || '~', '~') - 1)"
    run_script(
        conn,
        f"""
        ALTER TABLE repo_file ADD COLUMN mtime_ns INTEGER;
        ALTER TABLE symbolic_fact ADD COLUMN name TEXT GENERATED ALWAYS AS ({bare}) VIRTUAL;
        CREATE INDEX symbolic_fact_bare_name ON symbolic_fact (project_id, name);
        """,
    )


@migration
def m004_embedding_change(conn: sqlite3.Connection) -> None:
    """A log of which embedding rows changed, written by triggers.

    A process holding a project's vectors in memory (``store.vectors``) reads the
    rows once, then only what the log says changed since: every writer, in any
    process or connection, goes through the triggers, and ``seq`` (AUTOINCREMENT)
    is never reused, so a deleted row's id coming back cannot look unchanged.
    ``PRAGMA data_version`` would not do: it ignores the reader's own connection's
    writes and says nothing about which scope changed. Rows written before this
    migration are not in the log; a matrix is loaded from the table, not the log."""
    change = "INSERT INTO embedding_change (project_id, owner, owner_id, model) VALUES"
    run_script(
        conn,
        f"""
        CREATE TABLE embedding_change (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            project_id INTEGER,
            owner TEXT NOT NULL,
            owner_id INTEGER NOT NULL,
            model TEXT NOT NULL
        );
        CREATE TRIGGER embedding_change_insert AFTER INSERT ON embedding BEGIN
            {change} (new.project_id, new.owner, new.owner_id, new.model);
        END;
        CREATE TRIGGER embedding_change_update AFTER UPDATE ON embedding BEGIN
            {change} (old.project_id, old.owner, old.owner_id, old.model);
            INSERT INTO embedding_change (project_id, owner, owner_id, model)
                SELECT new.project_id, new.owner, new.owner_id, new.model
                WHERE (new.project_id, new.owner, new.owner_id, new.model)
                    IS NOT (old.project_id, old.owner, old.owner_id, old.model);
        END;
        CREATE TRIGGER embedding_change_delete AFTER DELETE ON embedding BEGIN
            {change} (old.project_id, old.owner, old.owner_id, old.model);
        END;
        """,
    )


@migration
def m005_symbol_ref_uses(conn: sqlite3.Connection) -> None:
    """One reference row per (file, from, to, kind), counting its uses.

    Every reader groups by those four and asks only the first line (impact) or how
    many (the repo map): one row per use was 347k rows for CPython's ``Lib/``
    where 218k say the same. ``line`` is now the first use's line. Rows written
    before stay one per use (``uses`` 1), which every reader sums the same way."""
    run_script(conn, "ALTER TABLE symbol_ref ADD COLUMN uses INTEGER NOT NULL DEFAULT 1;")


@migration
def m006_episode_fts_epoch(conn: sqlite3.Connection) -> None:
    """A counter the store's triggers bump whenever an indexed episode row changes other
    than by a new row appended after every other (``episodes.recall``).

    Recall counts in how many rows each query word is found, the walk of that word's
    whole posting list. With the counter unchanged since a count, the rows that
    count covered are as they were, and every row since has a higher id: a count
    is brought up to date by counting only the new rows. An update of the content,
    a delete, or an insert below the highest id (an id reused or given explicitly)
    bumps it, and every count is redone. Existing rows need nothing: a count is
    taken from the index the first time it is needed."""
    bump = "UPDATE episode_fts_epoch SET n = n + 1 WHERE id = 1;"
    run_script(
        conn,
        f"""
        CREATE TABLE episode_fts_epoch (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            n INTEGER NOT NULL
        );
        INSERT INTO episode_fts_epoch (id, n) VALUES (1, 0);
        CREATE TRIGGER episode_fts_epoch_insert AFTER INSERT ON episodic_stream
        WHEN new.id < (SELECT max(id) FROM episodic_stream) BEGIN
            {bump}
        END;
        CREATE TRIGGER episode_fts_epoch_update AFTER UPDATE OF content ON episodic_stream
        BEGIN
            {bump}
        END;
        CREATE TRIGGER episode_fts_epoch_delete AFTER DELETE ON episodic_stream BEGIN
            {bump}
        END;
        """,
    )


@migration
def m007_receipt_completed_and_session_harness(conn: sqlite3.Connection) -> None:
    """When a receipt was closed, and which harness each session came from.

    ``completed_at`` is NULL while a turn is in flight (its receipt is written before
    the request leaves, completed when the answer ends or fails): the screens show such
    a turn apart, never counted as a full re-prefill. Rows written before were all
    closed, at a time not recorded: their creation time stands in. ``session_harness``
    names the client a session's requests came from (User-Agent, request shape), so a
    session is listed by more than its hash."""
    run_script(
        conn,
        f"""
        ALTER TABLE receipt ADD COLUMN completed_at TEXT;
        UPDATE receipt SET completed_at = created_at;
        CREATE TABLE session_harness (
            project_id INTEGER NOT NULL REFERENCES project(id),
            session TEXT NOT NULL,
            harness TEXT NOT NULL,
            seen_at TEXT NOT NULL DEFAULT {NOW},
            PRIMARY KEY (project_id, session)
        );
        """,
    )


@migration
def m008_episode_nature(conn: sqlite3.Connection) -> None:
    """Episodes gain what they are (``vocabulary.Nature``: the harness's instruction,
    the user's request, tool output, the answer) and, for a slice of a harness message
    split by nature, its place in that message (0: a message's first or only part).
    Old rows stay NULL: they are classified by their role when read."""
    run_script(
        conn,
        """
        ALTER TABLE episodic_stream ADD COLUMN nature TEXT;
        ALTER TABLE episodic_stream ADD COLUMN part INTEGER NOT NULL DEFAULT 0;
        """,
    )


@migration
def m009_project_access(conn: sqlite3.Connection) -> None:
    """Which database roles may reach which project's rows: PostgreSQL's row-level
    security (``postgresql_schema._M009``, issue 39 item 3). Nothing on SQLite: a file
    has one user, and its permissions are its access control."""


@migration
def m010_session_state(conn: sqlite3.Connection) -> None:
    """Each session's planning state, shared by gateway replicas (issue 39 item 4).

    ``state`` is the JSON of what a gateway cannot recompute (the layout and
    prediction of what the server holds, the last request, the recorded messages'
    ids; ``turns.shared``), ``version`` counts the turns that wrote it, and ``holder``
    is the gateway serving the session's turn now, until ``held_until`` (Unix
    seconds): the lease that keeps two replicas from planning one session at once."""
    run_script(
        conn,
        f"""
        CREATE TABLE session_state (
            project_id INTEGER NOT NULL REFERENCES project(id),
            session TEXT NOT NULL,
            version INTEGER NOT NULL DEFAULT 0,
            state TEXT,
            holder TEXT,
            held_until REAL,
            updated_at TEXT NOT NULL DEFAULT {NOW},
            PRIMARY KEY (project_id, session)
        );
        """,
    )


@migration
def m011_episode_words_stored(conn: sqlite3.Connection) -> None:
    """PostgreSQL keeps each episode's words (its ``tsvector``) in a stored column that
    its full-text index and recall's ranking read (``postgresql_schema._M011``): the
    index over the expression found matches, but ranking them parsed every match's text
    again. Nothing on SQLite: FTS5 keeps its own index (``episode_fts``)."""


SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)
"""


def applied_names(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations recorded in the store, in the order applied."""
    exists = conn.execute(table_exists_sql(engine_of(conn)), ("schema_migrations",)).fetchone()
    if not exists:
        return []
    names = [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY id")]
    odd = [n for n in names if not isinstance(n, str)]
    if odd:
        # Found by fuzzing: a damaged row (NULL or a blob) was joined into a message as
        # a name and failed with a TypeError in open_store and doctor.
        raise StoreCorrupt(
            f"schema_migrations holds {odd[0]!r} where a migration name belongs: "
            "the store is damaged"
        )
    return names


def check_current(store: Store) -> None:
    """For a read-only open: the schema must be exactly this version's (it cannot be
    migrated, and an older or newer one may lack what the queries read)."""
    try:
        done = applied_names(store.conn)
    except DriverFailure as e:
        raise convert(e, store.label) from e
    known = [m.name for m in MIGRATIONS]
    unknown = [n for n in done if n not in known]
    if unknown:
        raise StoreNewerSchema(
            f"store {store.label} has migrations this Sakur4 does not know "
            f"({', '.join(unknown)}): it was written by a newer version"
        )
    if len(done) < len(known):
        raise StoreUnavailable(
            f"store {store.label} is at schema version {len(done)} of {len(known)}; "
            "a read-only command cannot migrate it: run any command that writes "
            "(e.g. `sakur4 index`) once"
        )


def _apply_one(store: Store, m: Migration, version: int) -> bool:
    """Apply ``m`` in one transaction unless it is recorded; True when this call applied
    it. Checked again inside the write transaction: another process opening the same
    store at the same moment may have applied it since this one looked."""
    conn = store.conn
    with store.tx():
        if m.name in applied_names(conn):
            return False
        if store.engine == "postgresql":
            script = POSTGRESQL.get(m.name)
            if script is None:
                raise StoreError(f"migration {m.name} has no PostgreSQL form")
            cast(PgConnection, conn).run_script(script)
        else:
            m.apply(conn)
        conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (m.name,))
        if store.engine == "sqlite":
            conn.execute(f"PRAGMA user_version = {version}")
    return True


def apply_migrations(store: Store, upto: int | None = None) -> list[str]:
    """Apply every migration not yet recorded (or the first ``upto``); return their names."""
    conn = store.conn
    known = [m.name for m in MIGRATIONS]
    try:
        with store.tx():
            # Looked for first: CREATE ... IF NOT EXISTS needs the right to create, which
            # a PostgreSQL role granted projects has not (store.roles).
            if not conn.execute(table_exists_sql(store.engine), ("schema_migrations",)).fetchone():
                conn.execute(PG_SCHEMA_TABLE if store.engine == "postgresql" else SCHEMA_TABLE)
        done = applied_names(conn)
    except DriverError as e:
        raise convert(e, store.label) from e
    unknown = [n for n in done if n not in known]
    if unknown:
        raise StoreNewerSchema(
            f"store {store.label} has migrations this Sakur4 does not know "
            f"({', '.join(unknown)}): it was written by a newer version"
        )
    applied = []
    for m in MIGRATIONS[:upto]:
        if m.name in done:
            continue
        try:
            if _apply_one(store, m, known.index(m.name) + 1):
                applied.append(m.name)
        except DriverError as e:
            raise convert(e, store.label) from e
    return applied
