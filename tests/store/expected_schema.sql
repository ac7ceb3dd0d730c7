-- index anchor_project
CREATE INDEX anchor_project ON anchor (project_id, session);
-- index backend_probe_url
CREATE INDEX backend_probe_url ON backend_probe (url, id);
-- index embedding_scope
CREATE INDEX embedding_scope ON embedding (project_id, owner, model);
-- index episodic_stream_project
CREATE INDEX episodic_stream_project ON episodic_stream (project_id, session, seq);
-- index episodic_stream_session
CREATE INDEX episodic_stream_session ON episodic_stream (session, seq);
-- index receipt_session
CREATE INDEX receipt_session ON receipt (project_id, session, turn);
-- index semantic_atlas_anchor
CREATE INDEX semantic_atlas_anchor ON semantic_atlas (project_id, path, qualified_name);
-- index symbol_ref_file
CREATE INDEX symbol_ref_file ON symbol_ref (project_id, path);
-- index symbol_ref_to
CREATE INDEX symbol_ref_to ON symbol_ref (project_id, to_name);
-- index symbolic_fact_bare_name
CREATE INDEX symbolic_fact_bare_name ON symbolic_fact (project_id, name);
-- index symbolic_fact_key
CREATE INDEX symbolic_fact_key ON symbolic_fact (project_id, path, qualified_name, id);
-- index symbolic_fact_name
CREATE INDEX symbolic_fact_name ON symbolic_fact (project_id, qualified_name);
-- table anchor
CREATE TABLE anchor ( id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES project(id), session TEXT, text TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0, pinned_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), unpinned_at TEXT );
-- table backend_probe
CREATE TABLE backend_probe ( id INTEGER PRIMARY KEY, url TEXT NOT NULL, probed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), result TEXT NOT NULL );
-- table embedding
CREATE TABLE embedding ( id INTEGER PRIMARY KEY, project_id INTEGER REFERENCES project(id), owner TEXT NOT NULL, owner_id INTEGER NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL CHECK (dim > 0), vector BLOB NOT NULL, UNIQUE (owner, owner_id, model) );
-- table embedding_change
CREATE TABLE embedding_change ( seq INTEGER PRIMARY KEY AUTOINCREMENT, project_id INTEGER, owner TEXT NOT NULL, owner_id INTEGER NOT NULL, model TEXT NOT NULL );
-- table episode_dependency
CREATE TABLE episode_dependency ( episode_id INTEGER NOT NULL REFERENCES episodic_stream(id), depends_on INTEGER NOT NULL REFERENCES episodic_stream(id), PRIMARY KEY (episode_id, depends_on) ) WITHOUT ROWID;
-- table episode_fts
CREATE VIRTUAL TABLE episode_fts USING fts5( content, content='episodic_stream', content_rowid='id', tokenize='porter unicode61' );
-- table episode_fts_config
CREATE TABLE 'episode_fts_config'(k PRIMARY KEY, v) WITHOUT ROWID;
-- table episode_fts_data
CREATE TABLE 'episode_fts_data'(id INTEGER PRIMARY KEY, block BLOB);
-- table episode_fts_docsize
CREATE TABLE 'episode_fts_docsize'(id INTEGER PRIMARY KEY, sz BLOB);
-- table episode_fts_epoch
CREATE TABLE episode_fts_epoch ( id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL );
-- table episode_fts_idx
CREATE TABLE 'episode_fts_idx'(segid, term, pgno, PRIMARY KEY(segid, term)) WITHOUT ROWID;
-- table episodic_stream
CREATE TABLE episodic_stream ( id INTEGER PRIMARY KEY, session TEXT NOT NULL, turn INTEGER NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL, kind TEXT NOT NULL, tool_name TEXT, tool_call_id TEXT, content TEXT, payload TEXT, content_hash TEXT NOT NULL, tokens INTEGER NOT NULL CHECK (tokens >= 0), tier TEXT NOT NULL DEFAULT 'live' CHECK (tier IN ('live', 'masked', 'referenced', 'archived', 'dropped')), droppable INTEGER NOT NULL DEFAULT 0 CHECK (droppable IN (0, 1)), created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) , project_id INTEGER REFERENCES project(id), nature TEXT, part INTEGER NOT NULL DEFAULT 0);
-- table project
CREATE TABLE project ( id INTEGER PRIMARY KEY, root TEXT NOT NULL UNIQUE, name TEXT NOT NULL, created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) );
-- table receipt
CREATE TABLE receipt ( id INTEGER PRIMARY KEY, project_id INTEGER REFERENCES project(id), session TEXT NOT NULL, turn INTEGER NOT NULL, created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), backend TEXT, context_window INTEGER NOT NULL CHECK (context_window > 0), prompt_tokens INTEGER NOT NULL CHECK (prompt_tokens >= 0), pressure REAL NOT NULL, profile TEXT NOT NULL, profile_reason TEXT NOT NULL, verdict TEXT NOT NULL CHECK (verdict IN ('fits', 'reclaimed', 'stepping', 'refused')), steps TEXT NOT NULL DEFAULT '[]', requested_cut INTEGER, chosen_cut INTEGER, predicted_reuse INTEGER, server_cached INTEGER, server_processed INTEGER, prefill_ms REAL, cache_verdict TEXT NOT NULL CHECK (cache_verdict IN ('reused', 'full-re-prefill', 'unverifiable')), divergence INTEGER, detail TEXT NOT NULL DEFAULT '{}' , completed_at TEXT);
-- table repo_file
CREATE TABLE repo_file ( id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES project(id), path TEXT NOT NULL, content_hash TEXT NOT NULL, language TEXT, size INTEGER NOT NULL, last_indexed TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)), mtime_ns INTEGER, UNIQUE (project_id, path) );
-- table schema_migrations
CREATE TABLE schema_migrations ( id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) );
-- table semantic_atlas
CREATE TABLE semantic_atlas ( id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES project(id), path TEXT NOT NULL, qualified_name TEXT NOT NULL, fact_id INTEGER NOT NULL REFERENCES symbolic_fact(id), anchor_hash TEXT NOT NULL, summary TEXT NOT NULL, author TEXT, created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) );
-- table session_harness
CREATE TABLE session_harness ( project_id INTEGER NOT NULL REFERENCES project(id), session TEXT NOT NULL, harness TEXT NOT NULL, seen_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), PRIMARY KEY (project_id, session) );
-- table session_state
CREATE TABLE session_state ( project_id INTEGER NOT NULL REFERENCES project(id), session TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 0, state TEXT, holder TEXT, held_until REAL, updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), PRIMARY KEY (project_id, session) );
-- table symbol_ref
CREATE TABLE symbol_ref ( id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES project(id), path TEXT NOT NULL, from_name TEXT NOT NULL, to_name TEXT NOT NULL, kind TEXT NOT NULL, line INTEGER , uses INTEGER NOT NULL DEFAULT 1);
-- table symbolic_fact
CREATE TABLE symbolic_fact ( id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES project(id), path TEXT NOT NULL, qualified_name TEXT NOT NULL, kind TEXT NOT NULL, language TEXT NOT NULL, signature TEXT NOT NULL DEFAULT '', start_line INTEGER, end_line INTEGER, symbol_hash TEXT NOT NULL DEFAULT '', file_hash TEXT NOT NULL DEFAULT '', tombstone INTEGER NOT NULL DEFAULT 0 CHECK (tombstone IN (0, 1)), indexed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) , name TEXT GENERATED ALWAYS AS (substr(substr(qualified_name, length(rtrim(qualified_name, replace(qualified_name, '.', ''))) + 1), 1, instr(substr(qualified_name, length(rtrim(qualified_name, replace(qualified_name, '.', ''))) + 1) || '~', '~') - 1)) VIRTUAL);
-- trigger embedding_change_delete
CREATE TRIGGER embedding_change_delete AFTER DELETE ON embedding BEGIN INSERT INTO embedding_change (project_id, owner, owner_id, model) VALUES (old.project_id, old.owner, old.owner_id, old.model); END;
-- trigger embedding_change_insert
CREATE TRIGGER embedding_change_insert AFTER INSERT ON embedding BEGIN INSERT INTO embedding_change (project_id, owner, owner_id, model) VALUES (new.project_id, new.owner, new.owner_id, new.model); END;
-- trigger embedding_change_update
CREATE TRIGGER embedding_change_update AFTER UPDATE ON embedding BEGIN INSERT INTO embedding_change (project_id, owner, owner_id, model) VALUES (old.project_id, old.owner, old.owner_id, old.model); INSERT INTO embedding_change (project_id, owner, owner_id, model) SELECT new.project_id, new.owner, new.owner_id, new.model WHERE (new.project_id, new.owner, new.owner_id, new.model) IS NOT (old.project_id, old.owner, old.owner_id, old.model); END;
-- trigger episode_fts_delete
CREATE TRIGGER episode_fts_delete AFTER DELETE ON episodic_stream BEGIN INSERT INTO episode_fts (episode_fts, rowid, content) VALUES ('delete', old.id, coalesce(old.content, '')); END;
-- trigger episode_fts_epoch_delete
CREATE TRIGGER episode_fts_epoch_delete AFTER DELETE ON episodic_stream BEGIN UPDATE episode_fts_epoch SET n = n + 1 WHERE id = 1; END;
-- trigger episode_fts_epoch_insert
CREATE TRIGGER episode_fts_epoch_insert AFTER INSERT ON episodic_stream WHEN new.id < (SELECT max(id) FROM episodic_stream) BEGIN UPDATE episode_fts_epoch SET n = n + 1 WHERE id = 1; END;
-- trigger episode_fts_epoch_update
CREATE TRIGGER episode_fts_epoch_update AFTER UPDATE OF content ON episodic_stream BEGIN UPDATE episode_fts_epoch SET n = n + 1 WHERE id = 1; END;
-- trigger episode_fts_insert
CREATE TRIGGER episode_fts_insert AFTER INSERT ON episodic_stream BEGIN INSERT INTO episode_fts (rowid, content) VALUES (new.id, coalesce(new.content, '')); END;
-- trigger episode_fts_update
CREATE TRIGGER episode_fts_update AFTER UPDATE OF content ON episodic_stream BEGIN INSERT INTO episode_fts (episode_fts, rowid, content) VALUES ('delete', old.id, coalesce(old.content, '')); INSERT INTO episode_fts (rowid, content) VALUES (new.id, coalesce(new.content, '')); END;
-- trigger symbolic_fact_no_delete
CREATE TRIGGER symbolic_fact_no_delete BEFORE DELETE ON symbolic_fact BEGIN SELECT RAISE(ABORT, 'symbolic_fact is append-only: DELETE refused'); END;
-- trigger symbolic_fact_no_update
CREATE TRIGGER symbolic_fact_no_update BEFORE UPDATE ON symbolic_fact BEGIN SELECT RAISE(ABORT, 'symbolic_fact is append-only: UPDATE refused'); END;
