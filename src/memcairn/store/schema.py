"""DDL of the store, as SQL text. Migrations (``migrations.py``) decide when each piece runs."""

from __future__ import annotations

# Columns indexed by FTS5, in order. bm25 weights in fts.py follow this order.
FTS_COLUMNS: tuple[str, ...] = (
    "title", "subtitle", "text", "narrative", "facts", "concepts",
    "request", "investigated", "learned", "completed", "next_steps", "notes",
    "files_read", "files_modified",
)

CORE_TABLES = """
CREATE TABLE IF NOT EXISTS projects (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    merged_into_project TEXT,            -- name of the project this one was renamed or merged into
    created_at_epoch INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    agent_session_id TEXT NOT NULL,      -- the agent's own id (Claude Code session_id, ...)
    platform_source TEXT NOT NULL,       -- claude-code | codex | gemini-cli | import | ...
    started_at_epoch INTEGER NOT NULL,
    ended_at_epoch INTEGER,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'completed', 'failed')),
    UNIQUE (platform_source, agent_session_id)
);
CREATE INDEX IF NOT EXISTS ix_sessions_project ON sessions(project_id, started_at_epoch);

CREATE TABLE IF NOT EXISTS memory_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,   -- the key of the vector mirror and its watermark
    uuid TEXT NOT NULL UNIQUE,              -- global identity across databases
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    session_id INTEGER REFERENCES sessions(id) ON DELETE SET NULL,
    kind TEXT NOT NULL CHECK (kind IN ('observation', 'summary', 'prompt', 'manual')),
    type TEXT NOT NULL,
    title TEXT,
    subtitle TEXT,
    text TEXT,
    narrative TEXT,
    facts TEXT NOT NULL DEFAULT '[]',
    concepts TEXT NOT NULL DEFAULT '[]',
    files_read TEXT NOT NULL DEFAULT '[]',
    files_modified TEXT NOT NULL DEFAULT '[]',
    metadata TEXT NOT NULL DEFAULT '{}',
    request TEXT,
    investigated TEXT,
    learned TEXT,
    completed TEXT,
    next_steps TEXT,
    notes TEXT,
    prompt_number INTEGER,
    platform_source TEXT,
    content_hash TEXT NOT NULL,
    created_at_epoch INTEGER NOT NULL,      -- milliseconds
    updated_at_epoch INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_memory_items_project_time ON memory_items(project_id, created_at_epoch);
CREATE INDEX IF NOT EXISTS ix_memory_items_time ON memory_items(created_at_epoch);
CREATE INDEX IF NOT EXISTS ix_memory_items_session ON memory_items(session_id);
CREATE INDEX IF NOT EXISTS ix_memory_items_hash ON memory_items(project_id, content_hash);

CREATE TABLE IF NOT EXISTS memory_sources (
    id INTEGER PRIMARY KEY,
    memory_item_id INTEGER NOT NULL REFERENCES memory_items(id) ON DELETE CASCADE,
    source_type TEXT NOT NULL,           -- transcript | claude-mem | jsonl | ...
    source_table TEXT NOT NULL,          -- the table or file the row came from
    source_id TEXT NOT NULL,             -- its id there
    created_at_epoch INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS ux_memory_sources_source
    ON memory_sources(source_type, source_table, source_id);
CREATE INDEX IF NOT EXISTS ix_memory_sources_item ON memory_sources(memory_item_id);
"""

def _fts_ddl(columns: tuple[str, ...], content: str, values: dict[str, str]) -> tuple[str, str]:
    """The FTS5 table over ``columns`` (the first two UNINDEXED) and its three sync triggers; ``values`` maps
    a column to the SQL expression (over ``{row}``, the trigger's new/old row) that gives its value."""
    ddl = (
        "CREATE VIRTUAL TABLE IF NOT EXISTS memory_items_fts USING fts5(\n"
        "    project_id UNINDEXED,\n    kind UNINDEXED,\n"
        f"    {', '.join(columns[2:])},\n"
        f"    content='{content}',\n    content_rowid='id',\n    tokenize='porter unicode61'\n);\n"
    )
    cols = ", ".join(columns)

    def row(prefix: str) -> str:
        return ", ".join(values.get(c, "{row}." + c).format(row=prefix) for c in columns)

    triggers = f"""
CREATE TRIGGER IF NOT EXISTS memory_items_ai AFTER INSERT ON memory_items BEGIN
    INSERT INTO memory_items_fts(rowid, {cols}) VALUES (new.id, {row("new")});
END;

CREATE TRIGGER IF NOT EXISTS memory_items_ad AFTER DELETE ON memory_items BEGIN
    INSERT INTO memory_items_fts(memory_items_fts, rowid, {cols}) VALUES ('delete', old.id, {row("old")});
END;

CREATE TRIGGER IF NOT EXISTS memory_items_au AFTER UPDATE ON memory_items BEGIN
    INSERT INTO memory_items_fts(memory_items_fts, rowid, {cols}) VALUES ('delete', old.id, {row("old")});
    INSERT INTO memory_items_fts(rowid, {cols}) VALUES (new.id, {row("new")});
END;
"""
    return ddl, triggers


# m001 (kept as it was: migrations replay history): the text columns over the memory_items table.
FTS_TABLE_V1, FTS_TRIGGERS_V1 = _fts_ddl(("project_id", "kind", *FTS_COLUMNS), "memory_items", {})

# m006: a third indexed column, ``fts_scope``, holds one token per row naming its project
# (``SCOPE_PREFIX`` + project id, e.g. ``mcscope17``), so a search scoped to projects is one MATCH:
# ``(terms) AND fts_scope:("mcscope17")``. FTS5 intersects the posting lists and ranks only that project's
# rows, instead of ranking matches of every project and joining each to its item to drop the others (5x
# less time at 100k items in 20 projects). Its bm25 weight is 0. The table reads its content through a view
# that computes the token, so memory_items itself does not change.
SCOPE_PREFIX = "mcscope"
FTS_SOURCE_VIEW = f"""
CREATE VIEW IF NOT EXISTS memory_items_fts_source AS
SELECT id, project_id, kind, '{SCOPE_PREFIX}' || project_id AS fts_scope, {", ".join(FTS_COLUMNS)}
FROM memory_items;
"""
FTS_TABLE, FTS_TRIGGERS = _fts_ddl(
    ("project_id", "kind", "fts_scope", *FTS_COLUMNS), "memory_items_fts_source",
    {"fts_scope": f"'{SCOPE_PREFIX}' || {{row}}.project_id"},
)
DROP_FTS = """
DROP TRIGGER IF EXISTS memory_items_ai;
DROP TRIGGER IF EXISTS memory_items_ad;
DROP TRIGGER IF EXISTS memory_items_au;
DROP TABLE IF EXISTS memory_items_fts;
"""

INTEGRITY_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS memory_items_session_project_insert
BEFORE INSERT ON memory_items
WHEN new.session_id IS NOT NULL
 AND (SELECT project_id FROM sessions WHERE id = new.session_id) IS NOT new.project_id
BEGIN
    SELECT RAISE(ABORT, 'memory_items.session_id must belong to the item''s project_id');
END;

CREATE TRIGGER IF NOT EXISTS memory_items_session_project_update
BEFORE UPDATE OF session_id, project_id ON memory_items
WHEN new.session_id IS NOT NULL
 AND (SELECT project_id FROM sessions WHERE id = new.session_id) IS NOT new.project_id
BEGIN
    SELECT RAISE(ABORT, 'memory_items.session_id must belong to the item''s project_id');
END;

CREATE TRIGGER IF NOT EXISTS sessions_project_update
BEFORE UPDATE OF project_id ON sessions
WHEN new.project_id IS NOT old.project_id
 AND EXISTS (SELECT 1 FROM memory_items WHERE session_id = old.id)
BEGIN
    SELECT RAISE(ABORT, 'a session that has memory items cannot move to another project');
END;
"""

# m002: the uniqueness rule behind content-hash dedupe. Duplicates are removed first (oldest kept).
DEDUPE_AND_UNIQUE = """
DELETE FROM memory_items WHERE id IN (
    SELECT id FROM (
        SELECT id, ROW_NUMBER() OVER (PARTITION BY project_id, content_hash ORDER BY id) AS rank
        FROM memory_items
    ) WHERE rank > 1
);
DROP INDEX IF EXISTS ix_memory_items_hash;
CREATE UNIQUE INDEX IF NOT EXISTS ux_memory_items_project_hash ON memory_items(project_id, content_hash);
"""

# m003: bookkeeping of the semantic mirror. The watermark is a row committed only after the mirror
# accepted a whole batch; the outbox records edits and deletes (from any process) for the mirror to replay.
MIRROR_TABLES = """
CREATE TABLE IF NOT EXISTS vector_sync_state (
    index_key TEXT NOT NULL,             -- which mirror: backend and location
    project TEXT NOT NULL,
    kind TEXT NOT NULL,
    watermark INTEGER NOT NULL,          -- every item of (project, kind) with id <= watermark is mirrored
    updated_at_epoch INTEGER NOT NULL,
    PRIMARY KEY (index_key, project, kind)
);

CREATE TABLE IF NOT EXISTS mirror_outbox (
    id INTEGER PRIMARY KEY,
    item_id INTEGER NOT NULL,
    project TEXT NOT NULL,
    op TEXT NOT NULL CHECK (op IN ('update', 'delete')),
    created_at_epoch INTEGER NOT NULL
);
"""

MIRROR_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS memory_items_mirror_au
AFTER UPDATE OF type, title, subtitle, text, narrative, facts, request, investigated, learned, completed,
    next_steps, notes, project_id ON memory_items
BEGIN
    INSERT INTO mirror_outbox(item_id, project, op, created_at_epoch)
    VALUES (old.id, COALESCE((SELECT name FROM projects WHERE id = old.project_id), ''), 'update',
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
END;

CREATE TRIGGER IF NOT EXISTS memory_items_mirror_ad AFTER DELETE ON memory_items BEGIN
    INSERT INTO mirror_outbox(item_id, project, op, created_at_epoch)
    VALUES (old.id, COALESCE((SELECT name FROM projects WHERE id = old.project_id), ''), 'delete',
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
END;
"""

TRIGGER_NAMES: tuple[str, ...] = (
    "memory_items_ai", "memory_items_ad", "memory_items_au", "memory_items_session_project_insert",
    "memory_items_session_project_update", "sessions_project_update", "memory_items_mirror_au",
    "memory_items_mirror_ad",
)

# m004: hook events accepted by the worker, kept until processed. A tool event is unique per
# (session, event type, tool_use_id), so a retried hook cannot record the same tool call twice.
INGEST_TABLES = """
CREATE TABLE IF NOT EXISTS ingest_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,            -- the agent's own session id
    platform_source TEXT NOT NULL,
    event_type TEXT NOT NULL,            -- session_init | observation | summarize | ...
    tool_use_id TEXT,
    payload TEXT NOT NULL DEFAULT '{}',  -- the request body, as JSON
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at_epoch INTEGER NOT NULL,
    updated_at_epoch INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS ux_ingest_events_tool_use
    ON ingest_events(session_id, event_type, tool_use_id) WHERE tool_use_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_ingest_events_status ON ingest_events(status, id);
"""

# m005: capture bookkeeping. ``source_key`` makes a replayed event (an imported transcript line) a no-op;
# ``llm_usage`` records what each model call cost, for the per-session and per-day caps; ``capture_notices``
# holds warnings (a model that failed, a cap reached) until the next SessionStart has shown them.
# The newest rows of one kind in a project (the SessionStart context's summaries, a kind-filtered listing)
# are a seek here; through ix_memory_items_project_time a project without that kind walked all its rows
# (10 ms at 5,000 items).
KIND_TIME_INDEX = """
CREATE INDEX IF NOT EXISTS ix_memory_items_project_kind_time ON memory_items(project_id, kind, created_at_epoch);
"""

# m008: what the user deleted stays deleted. A deleted item's (project, content hash) is kept here, so
# replaying its event, importing its transcript or claude-mem row again, or an export taken before the
# delete does not bring it back. Only an explicit save of the same content (which removes the row
# here) or an edit can store it again.
FORGOTTEN_TABLE = """
CREATE TABLE IF NOT EXISTS forgotten_items (
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    content_hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    forgotten_at_epoch INTEGER NOT NULL,
    PRIMARY KEY (project_id, content_hash)
) WITHOUT ROWID;
"""

CAPTURE_TABLES = """
ALTER TABLE ingest_events ADD COLUMN source_key TEXT;
ALTER TABLE ingest_events ADD COLUMN error TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS ux_ingest_events_source_key ON ingest_events(source_key)
    WHERE source_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_ingest_events_session ON ingest_events(platform_source, session_id, id);
ALTER TABLE sessions ADD COLUMN prompt_count INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS llm_usage (
    id INTEGER PRIMARY KEY,
    session_id TEXT,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    created_at_epoch INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_llm_usage_time ON llm_usage(created_at_epoch);
CREATE INDEX IF NOT EXISTS ix_llm_usage_session ON llm_usage(session_id);

CREATE TABLE IF NOT EXISTS capture_notices (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,                  -- llm_failed | cap_reached | ...
    message TEXT NOT NULL,
    project TEXT,
    created_at_epoch INTEGER NOT NULL,
    shown_at_epoch INTEGER
);
"""

# m012: the key a live hook gives its event (``protocol.EVENT_KEY_FIELD``): an event that reached the worker and
# was also spooled (its answer came too late) is queued once, whatever its kind.
INGEST_EVENT_KEY = """
ALTER TABLE ingest_events ADD COLUMN event_key TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS ux_ingest_events_event_key ON ingest_events(event_key) WHERE event_key IS NOT NULL;
"""

# m011: deletion marks by content, so an insert asks "was this content deleted anywhere?" with one seek and
# follows the merge chain of its project only when it was (``Store._is_forgotten``).
FORGOTTEN_HASH_INDEX = """
CREATE INDEX IF NOT EXISTS ix_forgotten_items_hash ON forgotten_items(content_hash);
"""

# m010: the time an item was last written, for "stored since" (a resumed session's start): with the
# creation-time index, a seek to the rows written since instead of a walk over a project's rows.
UPDATED_TIME_INDEX = """
CREATE INDEX IF NOT EXISTS ix_memory_items_updated ON memory_items(updated_at_epoch);
"""

# m009: the ids of items written since a moment, for the worker's in-memory copy of the keyword index
# (``store/keyword_index.py``), which re-reads just those rows. Filled by triggers, so a write from any
# process is seen. A NULL id means "every row" (the FTS index was rebuilt). The log keeps the newest
# ``KEYWORD_CHANGES_KEPT`` entries: a reader further behind than that builds its copy again.
KEYWORD_CHANGES_KEPT = 100_000
KEYWORD_CHANGES = f"""
CREATE TABLE IF NOT EXISTS keyword_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id INTEGER
);

CREATE TRIGGER IF NOT EXISTS keyword_changes_prune AFTER INSERT ON keyword_changes BEGIN
    DELETE FROM keyword_changes WHERE seq <= new.seq - {KEYWORD_CHANGES_KEPT};
END;

CREATE TRIGGER IF NOT EXISTS memory_items_keyword_ai AFTER INSERT ON memory_items BEGIN
    INSERT INTO keyword_changes(item_id) VALUES (new.id);
END;

CREATE TRIGGER IF NOT EXISTS memory_items_keyword_au AFTER UPDATE ON memory_items BEGIN
    INSERT INTO keyword_changes(item_id) VALUES (new.id);
END;

CREATE TRIGGER IF NOT EXISTS memory_items_keyword_ad AFTER DELETE ON memory_items BEGIN
    INSERT INTO keyword_changes(item_id) VALUES (old.id);
END;
"""
KEYWORD_TRIGGER_NAMES: tuple[str, ...] = (
    "keyword_changes_prune", "memory_items_keyword_ai", "memory_items_keyword_au", "memory_items_keyword_ad",
)

# m013: how far each team server has acknowledged this store's items (``memcairn connect``): the forwarder sends
# the items above ``watermark`` in id order and moves it only after the server's answer.
REMOTE_SYNC_STATE = """
CREATE TABLE IF NOT EXISTS remote_sync_state (
    server TEXT PRIMARY KEY,                -- the team server's URL
    watermark INTEGER NOT NULL,             -- the highest memory_items.id the server acknowledged
    updated_at_epoch INTEGER NOT NULL
);
"""

# m014: what each team server was sent (``memcairn connect``), so that what goes here goes there too. The
# forwarder keeps the event it sent for every item the server acknowledged (``remote_sent``); deleting the item —
# a forget, a delete, the capture pipeline replacing a growing turn's memory with its new version — moves that
# event to ``remote_deletions`` by trigger, in the deleting transaction, whichever process or path deletes it,
# and the forwarder asks the server to forget that content (``POST /v1/events/forget``): the very event it sent,
# so the server finds what it stored even when the item was edited here since. A row goes once answered.
REMOTE_DELETIONS = """
CREATE TABLE IF NOT EXISTS remote_sent (
    server TEXT NOT NULL,                   -- the team server's URL
    item_id INTEGER NOT NULL,               -- memory_items.id
    event TEXT NOT NULL,                    -- the event the server acknowledged, as JSON
    PRIMARY KEY (server, item_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS remote_sent_item ON remote_sent(item_id);

CREATE TABLE IF NOT EXISTS remote_deletions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    server TEXT NOT NULL,
    item_id INTEGER NOT NULL,               -- the deleted memory_items.id
    event TEXT NOT NULL,                    -- the event the server had acknowledged for it, as JSON
    queued_at_epoch INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS remote_deletions_server ON remote_deletions(server, seq);

CREATE TRIGGER IF NOT EXISTS memory_items_remote_ad AFTER DELETE ON memory_items BEGIN
    INSERT INTO remote_deletions(server, item_id, event, queued_at_epoch)
        SELECT server, item_id, event, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
        FROM remote_sent WHERE item_id = old.id;
    DELETE FROM remote_sent WHERE item_id = old.id;
END;
"""

# m015: memories edited after they were sent (capture bringing a card's facts up to date, ``memcairn`` edits):
# any update of an item a server holds marks it here by trigger; the forwarder compares the event it would send
# now with the one it sent and, when they differ, has the server replace that version with this one.
REMOTE_EDITS = """
CREATE TABLE IF NOT EXISTS remote_edited (
    server TEXT NOT NULL,
    item_id INTEGER NOT NULL,
    PRIMARY KEY (server, item_id)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS memory_items_remote_au AFTER UPDATE ON memory_items BEGIN
    INSERT OR IGNORE INTO remote_edited(server, item_id) SELECT server, item_id FROM remote_sent
        WHERE item_id = new.id;
END;
"""
REMOTE_TRIGGER_NAMES: tuple[str, ...] = ("memory_items_remote_ad", "memory_items_remote_au")

# m016: the evidence behind the memories. Each step of a session (the agent's words before a tool call, the call
# and the head of its output; the agent's closing reply) kept as it arrived, already cleaned of secrets and private
# parts, so that what compression left out can still be found: never shown whole, never in the SessionStart
# context, only as the few lines that match a search (``search.evidence``). ``item_id`` is the memory the step
# fed: deleting that memory deletes its evidence (``Store.delete_items``), superseding it hands the evidence on
# (``complete_ingest``). Not a foreign key: a cascade from memory_items makes SQLite misname the keyword table
# when that table was dropped under a running store, and the store could no longer recreate it on a write.
# ``step_key`` makes a replayed step a no-op.
EVIDENCE_TABLES = """
CREATE TABLE IF NOT EXISTS evidence (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    item_id INTEGER,                        -- no foreign key: deleting a memory deletes its steps by hand
    step_key TEXT NOT NULL UNIQUE,          -- platform, agent session and step (tool_use_id or reply number)
    text TEXT NOT NULL,
    created_at_epoch INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_evidence_item ON evidence(item_id);
CREATE INDEX IF NOT EXISTS ix_evidence_project ON evidence(project_id, created_at_epoch);

CREATE VIRTUAL TABLE IF NOT EXISTS evidence_fts USING fts5(
    text, content='evidence', content_rowid='id', tokenize='porter unicode61'
);

CREATE TRIGGER IF NOT EXISTS evidence_ai AFTER INSERT ON evidence BEGIN
    INSERT INTO evidence_fts(rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER IF NOT EXISTS evidence_ad AFTER DELETE ON evidence BEGIN
    INSERT INTO evidence_fts(evidence_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TRIGGER IF NOT EXISTS evidence_au AFTER UPDATE OF text ON evidence BEGIN
    INSERT INTO evidence_fts(evidence_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO evidence_fts(rowid, text) VALUES (new.id, new.text);
END;
"""
