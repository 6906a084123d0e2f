"""The PostgreSQL schema as numbered, forward-only migrations (applied by ``migrations.py``).

tenant -> project -> session -> item, with ``tenant_id`` on every row and composite foreign keys, so an item
cannot name a session of another project or tenant, nor a project of another tenant. Every tenant table has
``FORCE ROW LEVEL SECURITY`` with one policy: a row is visible and writable only in a transaction that entered
its tenant (``memcairn_tenant()``; migration 11 says how). The server connects as the database's application role
(``memcairn_app_<database>`` unless named; the migrations say ``memcairn_app`` and ``for_role`` names it), a role that
owns nothing, so the policies hold for it; the queries add explicit tenant filters too (the planner needs them
for the indexes).

A migration is never edited once released: a change is a new entry at the end.
"""

from __future__ import annotations

import re

from memcairn.pgstore.schema_anchors import M014
from memcairn.pgstore.schema_corrections import M015
from memcairn.pgstore.schema_numbers import M012, M013

APP_ROLE = "memcairn_app"
EMBEDDING_DIM = 384  # the bundled all-MiniLM-L6-v2

TENANT_TABLES = ("projects", "sessions", "items", "forgotten", "api_keys", "audit_log", "changes", "idempotency",
                 "ingest_queue", "item_vectors")

_M001 = f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS btree_gin;

DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
    CREATE ROLE {APP_ROLE} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
  END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$;

CREATE FUNCTION memcairn_tenant() RETURNS bigint LANGUAGE sql STABLE AS
  $$ SELECT NULLIF(current_setting('app.tenant_id', true), '')::bigint $$;

CREATE TABLE tenants (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id bigint NOT NULL REFERENCES tenants (id),
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, name),
  UNIQUE (id, tenant_id)
);

CREATE TABLE sessions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id bigint NOT NULL,
  project_id bigint NOT NULL,
  agent_session_id text NOT NULL,
  platform text NOT NULL DEFAULT 'unknown',
  status text NOT NULL DEFAULT 'active',
  started_at timestamptz NOT NULL DEFAULT now(),
  ended_at timestamptz,
  UNIQUE (project_id, platform, agent_session_id),
  UNIQUE (id, project_id, tenant_id),
  FOREIGN KEY (project_id, tenant_id) REFERENCES projects (id, tenant_id)
);

CREATE TABLE items (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id bigint NOT NULL,
  project_id bigint NOT NULL,
  session_id bigint,
  kind text NOT NULL DEFAULT 'manual' CHECK (kind IN ('observation', 'summary', 'prompt', 'manual')),
  type text,
  title text NOT NULL DEFAULT '',
  text text NOT NULL DEFAULT '',
  content_hash text NOT NULL,
  created_by text,
  created_at_epoch bigint NOT NULL,
  fts tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', text), 'B')) STORED,
  embedding vector({EMBEDDING_DIM}),
  UNIQUE (project_id, content_hash),
  FOREIGN KEY (project_id, tenant_id) REFERENCES projects (id, tenant_id),
  FOREIGN KEY (session_id, project_id, tenant_id) REFERENCES sessions (id, project_id, tenant_id)
);
CREATE INDEX items_fts ON items USING gin (project_id, fts);
CREATE INDEX items_recent ON items (tenant_id, project_id, created_at_epoch DESC, id DESC);
CREATE INDEX items_embedding ON items USING hnsw (embedding vector_cosine_ops);

-- What was forgotten stays forgotten: a capture of the same content under the project is refused.
CREATE TABLE forgotten (
  tenant_id bigint NOT NULL,
  project_id bigint NOT NULL,
  content_hash text NOT NULL,
  forgotten_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, content_hash),
  FOREIGN KEY (project_id, tenant_id) REFERENCES projects (id, tenant_id)
);

CREATE TABLE api_keys (
  id text PRIMARY KEY,
  tenant_id bigint NOT NULL REFERENCES tenants (id),
  project_id bigint,
  digest text NOT NULL,
  scopes text[] NOT NULL,
  label text,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz,
  revoked_at timestamptz,
  last_used_at timestamptz,
  replaced_by text,
  FOREIGN KEY (project_id, tenant_id) REFERENCES projects (id, tenant_id)
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE audit_log (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id bigint NOT NULL REFERENCES tenants (id),
  key_id text,
  actor text NOT NULL,
  action text NOT NULL,
  target text,
  request_id text,
  at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);

ALTER TABLE projects ENABLE ROW LEVEL SECURITY;
ALTER TABLE projects FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON projects USING (tenant_id = memcairn_tenant()) WITH CHECK (tenant_id = memcairn_tenant());
ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON sessions USING (tenant_id = memcairn_tenant()) WITH CHECK (tenant_id = memcairn_tenant());
ALTER TABLE items ENABLE ROW LEVEL SECURITY;
ALTER TABLE items FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON items USING (tenant_id = memcairn_tenant()) WITH CHECK (tenant_id = memcairn_tenant());
ALTER TABLE forgotten ENABLE ROW LEVEL SECURITY;
ALTER TABLE forgotten FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON forgotten USING (tenant_id = memcairn_tenant())
  WITH CHECK (tenant_id = memcairn_tenant());
ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON audit_log USING (tenant_id = memcairn_tenant())
  WITH CHECK (tenant_id = memcairn_tenant());
ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON api_keys
  USING (tenant_id = memcairn_tenant() OR id = NULLIF(current_setting('app.key_id', true), ''))
  WITH CHECK (tenant_id = memcairn_tenant() OR id = NULLIF(current_setting('app.key_id', true), ''));

GRANT SELECT, INSERT, UPDATE, DELETE ON projects, sessions, items, forgotten TO {APP_ROLE};
GRANT SELECT, INSERT, UPDATE ON api_keys TO {APP_ROLE};
GRANT SELECT, INSERT ON audit_log TO {APP_ROLE};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {APP_ROLE};
GRANT EXECUTE ON FUNCTION memcairn_tenant() TO {APP_ROLE};
"""

# The change sequence an SSE feed polls (one row per stored or forgotten memory, written in the write's own
# transaction): cheaper than a NOTIFY per write, whose commit takes a global lock.
_M002 = f"""
CREATE TABLE changes (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id bigint NOT NULL,
  project_id bigint NOT NULL,
  item_id bigint NOT NULL,
  op text NOT NULL CHECK (op IN ('stored', 'forgotten')),
  at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (project_id, tenant_id) REFERENCES projects (id, tenant_id)
);
CREATE INDEX changes_tenant ON changes (tenant_id, seq);
ALTER TABLE changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE changes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON changes USING (tenant_id = memcairn_tenant()) WITH CHECK (tenant_id = memcairn_tenant());
GRANT SELECT, INSERT ON changes TO {APP_ROLE};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {APP_ROLE};
"""

# The answer to a batch of events sent with an Idempotency-Key, kept so that a retry gets it again.
_M003 = f"""
CREATE TABLE idempotency (
  tenant_id bigint NOT NULL REFERENCES tenants (id),
  key text NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
  request_hash text NOT NULL,
  response jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, key)
);
ALTER TABLE idempotency ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotency FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON idempotency USING (tenant_id = memcairn_tenant())
  WITH CHECK (tenant_id = memcairn_tenant());
GRANT SELECT, INSERT, UPDATE ON idempotency TO {APP_ROLE};
"""

# Items still waiting for their vector. A write commits its item and a row here in one transaction; the
# server's embedding task embeds them in batches and writes each vector and deletes its row in one transaction
# (``pgstore/backlog.py``). The rows hold ids only, no content, so the table has no row-level security: the
# task must find the backlog of every tenant before it knows which tenant to act for, and reads and writes
# the items themselves in tenant transactions.
_M004 = f"""
CREATE TABLE embedding_backlog (
  item_id bigint PRIMARY KEY REFERENCES items (id) ON DELETE CASCADE,
  tenant_id bigint NOT NULL,
  queued_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO embedding_backlog (item_id, tenant_id) SELECT id, tenant_id FROM items WHERE embedding IS NULL;
GRANT SELECT, INSERT, DELETE ON embedding_backlog TO {APP_ROLE};
"""

# The ingest queue (``server/queue.py``). ``POST /v1/events`` validates and scrubs a batch and commits it here
# in one short transaction, then answers 202; consumer tasks turn the rows into items later. The content lives
# in ``ingest_queue`` under row-level security like every tenant table; ``ingest_jobs`` holds one row per queued
# event with ids only (no content, so no row-level security: a consumer must find every tenant's work before it
# knows whom it acts for). Consumers claim jobs with ``FOR UPDATE SKIP LOCKED`` and, in the same transaction,
# store the items and delete the queue rows (their jobs go with them); a job that cannot be stored is kept with
# ``failed_at`` and its error, never retried for ever.
_M005 = f"""
CREATE TABLE ingest_queue (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id bigint NOT NULL REFERENCES tenants (id),
  pin bigint,
  key_id text,
  request_id text,
  payload jsonb NOT NULL,
  queued_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (id, tenant_id)
);
ALTER TABLE ingest_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE ingest_queue FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON ingest_queue USING (tenant_id = memcairn_tenant())
  WITH CHECK (tenant_id = memcairn_tenant());

CREATE TABLE ingest_jobs (
  queue_id bigint PRIMARY KEY,
  tenant_id bigint NOT NULL,
  queued_at timestamptz NOT NULL DEFAULT now(),
  failed_at timestamptz,
  error text,
  FOREIGN KEY (queue_id, tenant_id) REFERENCES ingest_queue (id, tenant_id) ON DELETE CASCADE
);
CREATE INDEX ingest_jobs_waiting ON ingest_jobs (queue_id) WHERE failed_at IS NULL;

GRANT SELECT, INSERT, DELETE ON ingest_queue TO {APP_ROLE};
GRANT SELECT, INSERT, UPDATE, DELETE ON ingest_jobs TO {APP_ROLE};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {APP_ROLE};
"""

# Vectors per chunk, and keyword text split like the local store's tokenizer.
# - ``item_vectors``: an item's text is embedded in chunks as the local mirror embeds a long field
#   (``mirror.documents.chunk_text``), one row per chunk; the semantic leg ranks an item by its best chunk. The
#   one vector per item in ``items.embedding`` (the model read its first 256 tokens) becomes chunk 0 and the
#   items longer than one chunk go back on the backlog for the rest.
# - ``fts``: PostgreSQL's parser keeps ``src/launch_project_review.py`` or ``obj.retry_module`` as one token,
#   where SQLite's unicode61 splits at every character that is not a letter or digit; punctuation (``_ . / -``
#   ...) becomes a space first, so a word of an identifier or a path is found as it is in the local store.
# - ``doc_tokens``: the words of title and text, the document length BM25 re-scoring needs (``pgstore/keyword.py``).
_M006 = f"""
ALTER TABLE items ADD CONSTRAINT items_id_project_tenant UNIQUE (id, project_id, tenant_id);
CREATE TABLE item_vectors (
  item_id bigint NOT NULL,
  chunk smallint NOT NULL CHECK (chunk >= 0),
  tenant_id bigint NOT NULL,
  project_id bigint NOT NULL,
  embedding vector({EMBEDDING_DIM}) NOT NULL,
  PRIMARY KEY (item_id, chunk),
  FOREIGN KEY (item_id, project_id, tenant_id) REFERENCES items (id, project_id, tenant_id) ON DELETE CASCADE
);
CREATE INDEX item_vectors_scope ON item_vectors (tenant_id, project_id);
CREATE INDEX item_vectors_embedding ON item_vectors USING hnsw (embedding vector_cosine_ops);
ALTER TABLE item_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE item_vectors FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON item_vectors USING (tenant_id = memcairn_tenant())
  WITH CHECK (tenant_id = memcairn_tenant());
GRANT SELECT, INSERT, UPDATE, DELETE ON item_vectors TO {APP_ROLE};

INSERT INTO item_vectors (item_id, chunk, tenant_id, project_id, embedding)
  SELECT id, 0, tenant_id, project_id, embedding FROM items WHERE embedding IS NOT NULL;
INSERT INTO embedding_backlog (item_id, tenant_id)
  SELECT id, tenant_id FROM items WHERE embedding IS NOT NULL AND length(title) + length(text) > 1000
  ON CONFLICT DO NOTHING;
DROP INDEX items_embedding;
ALTER TABLE items DROP COLUMN embedding;

DROP INDEX items_fts;
ALTER TABLE items DROP COLUMN fts;
ALTER TABLE items ADD COLUMN fts tsvector GENERATED ALWAYS AS (
  setweight(to_tsvector('english', regexp_replace(title, '[[:punct:]]+', ' ', 'g')), 'A')
  || setweight(to_tsvector('english', regexp_replace(text, '[[:punct:]]+', ' ', 'g')), 'B')) STORED;
ALTER TABLE items ADD COLUMN doc_tokens integer GENERATED ALWAYS AS (
  regexp_count(title, '[^[:punct:][:space:]]+') + regexp_count(text, '[^[:punct:][:space:]]+')) STORED;
CREATE INDEX items_fts ON items USING gin (project_id, fts);
"""

# Changes a process's copies of its projects follow (``pgstore/project_copies.py``):
# - ``xid``: the transaction that wrote each change (64 bits: never wraps). A change of a transaction no longer
#   running when a snapshot is taken is visible in it, so a reader that remembers the oldest transaction still
#   running at its last read (``pg_snapshot_xmin``) finds every change it has not seen among those of that
#   transaction or later, although sequence numbers are not handed out in commit order.
# - ``embedded``: an item's vectors were written (whole); the SSE feed leaves these out.
_M007 = """
ALTER TABLE changes ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX changes_tenant_xid ON changes (tenant_id, xid);
ALTER TABLE changes DROP CONSTRAINT changes_op_check;
ALTER TABLE changes ADD CONSTRAINT changes_op_check CHECK (op IN ('stored', 'forgotten', 'embedded'));
"""

# Every key leads with the tenant (Citus-ready: each tenant table can be distributed by ``tenant_id``, co-located,
# since every primary key, unique constraint and foreign key then contains and starts with it, and no foreign key
# can reach another tenant's rows). Only constraints and indexes change: no row is rewritten or lost. Ids stay
# unique on their own (identity columns), and the lookups by id alone get plain indexes (a key is looked up before
# its tenant is known; the backlog is taken oldest first over all tenants).
_M008 = """
ALTER TABLE embedding_backlog DROP CONSTRAINT embedding_backlog_item_id_fkey;
ALTER TABLE item_vectors DROP CONSTRAINT item_vectors_item_id_project_id_tenant_id_fkey;
ALTER TABLE ingest_jobs DROP CONSTRAINT ingest_jobs_queue_id_tenant_id_fkey;
ALTER TABLE items DROP CONSTRAINT items_session_id_project_id_tenant_id_fkey,
  DROP CONSTRAINT items_project_id_tenant_id_fkey;
ALTER TABLE sessions DROP CONSTRAINT sessions_project_id_tenant_id_fkey;
ALTER TABLE forgotten DROP CONSTRAINT forgotten_project_id_tenant_id_fkey;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_project_id_tenant_id_fkey;
ALTER TABLE changes DROP CONSTRAINT changes_project_id_tenant_id_fkey;

ALTER TABLE projects DROP CONSTRAINT projects_pkey, DROP CONSTRAINT projects_id_tenant_id_key,
  ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE sessions DROP CONSTRAINT sessions_pkey, DROP CONSTRAINT sessions_id_project_id_tenant_id_key,
  DROP CONSTRAINT sessions_project_id_platform_agent_session_id_key,
  ADD PRIMARY KEY (tenant_id, id), ADD UNIQUE (tenant_id, project_id, id),
  ADD UNIQUE (tenant_id, project_id, platform, agent_session_id),
  ADD FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id);
ALTER TABLE items DROP CONSTRAINT items_pkey, DROP CONSTRAINT items_id_project_tenant,
  DROP CONSTRAINT items_project_id_content_hash_key,
  ADD PRIMARY KEY (tenant_id, id), ADD UNIQUE (tenant_id, project_id, id),
  ADD UNIQUE (tenant_id, project_id, content_hash),
  ADD FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id),
  ADD FOREIGN KEY (tenant_id, project_id, session_id) REFERENCES sessions (tenant_id, project_id, id);
ALTER TABLE forgotten DROP CONSTRAINT forgotten_pkey, ADD PRIMARY KEY (tenant_id, project_id, content_hash),
  ADD FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id);
ALTER TABLE api_keys DROP CONSTRAINT api_keys_pkey, ADD PRIMARY KEY (tenant_id, id),
  ADD FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id);
CREATE INDEX api_keys_id ON api_keys (id);
DROP INDEX api_keys_tenant;
ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey, ADD PRIMARY KEY (tenant_id, id);
DROP INDEX audit_log_tenant;
ALTER TABLE changes DROP CONSTRAINT changes_pkey, ADD PRIMARY KEY (tenant_id, seq),
  ADD FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id);
DROP INDEX changes_tenant;
ALTER TABLE ingest_queue DROP CONSTRAINT ingest_queue_pkey, DROP CONSTRAINT ingest_queue_id_tenant_id_key,
  ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE ingest_jobs DROP CONSTRAINT ingest_jobs_pkey, ADD PRIMARY KEY (tenant_id, queue_id),
  ADD FOREIGN KEY (tenant_id, queue_id) REFERENCES ingest_queue (tenant_id, id) ON DELETE CASCADE;
ALTER TABLE item_vectors DROP CONSTRAINT item_vectors_pkey, ADD PRIMARY KEY (tenant_id, item_id, chunk),
  ADD FOREIGN KEY (tenant_id, project_id, item_id) REFERENCES items (tenant_id, project_id, id) ON DELETE CASCADE;
ALTER TABLE embedding_backlog DROP CONSTRAINT embedding_backlog_pkey, ADD PRIMARY KEY (tenant_id, item_id),
  ADD FOREIGN KEY (tenant_id, item_id) REFERENCES items (tenant_id, id) ON DELETE CASCADE;
CREATE INDEX embedding_backlog_order ON embedding_backlog (item_id);
"""

# The application role of this database, recorded where every process finds it (``db.app_role``): one role per
# database, so a server of another database on the same cluster never touches it.
_M009 = """
CREATE TABLE app_role (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  name text NOT NULL CHECK (name ~ '^[a-z_][a-z0-9_]{0,62}$')
);
"""

# Row-level security on the queues too (``ingest_jobs``, ``embedding_backlog``): a request or a tenant's task sees
# and writes only its tenant's rows, so the application role can no longer read which tenants are waiting, queue an
# event or a vector for another tenant, or drop another tenant's work. What needs every tenant's rows gets it
# through one narrow function each, run as the owner (``SECURITY DEFINER``) and returning ids, counts and ages only,
# never content: claiming the oldest jobs (``FOR UPDATE SKIP LOCKED``: the locks are the caller's transaction's),
# claiming one job, marking a job failed, the fair pick of the backlog, the lag of each. The owner reaches every
# queue row through a policy of its own (those functions, and the queue commands run with the owner's URL, which
# ``FORCE ROW LEVEL SECURITY`` binds as well: whoever owns the table then); the application role is no member of
# the owner.


def _owner_rows(table: str) -> str:
    """A policy that lets the table's owner (and its members) reach every row: one uncorrelated subquery,
    evaluated once per statement."""
    owns = (f"(SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_catalog.pg_class c"
            f" WHERE c.oid = 'public.{table}'::regclass)")
    return f"CREATE POLICY owner_rows ON {table} USING ({owns}) WITH CHECK ({owns});"


_QUEUE_SCAN = "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"
_QUEUE_WRITE = "LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"
_M010 = f"""
ALTER TABLE ingest_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE ingest_jobs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON ingest_jobs USING (tenant_id = memcairn_tenant())
  WITH CHECK (tenant_id = memcairn_tenant());
{_owner_rows('ingest_jobs')}
ALTER TABLE embedding_backlog ENABLE ROW LEVEL SECURITY;
ALTER TABLE embedding_backlog FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON embedding_backlog USING (tenant_id = memcairn_tenant())
  WITH CHECK (tenant_id = memcairn_tenant());
{_owner_rows('embedding_backlog')}

CREATE FUNCTION memcairn_claim_ingest_jobs(max_jobs integer) RETURNS TABLE (queue_id bigint, tenant_id bigint)
  {_QUEUE_WRITE} AS $$
  SELECT j.queue_id, j.tenant_id FROM public.ingest_jobs j WHERE j.failed_at IS NULL
  ORDER BY j.queue_id LIMIT max_jobs FOR UPDATE SKIP LOCKED $$;
CREATE FUNCTION memcairn_claim_ingest_job(job bigint) RETURNS TABLE (queue_id bigint, tenant_id bigint)
  {_QUEUE_WRITE} AS $$
  SELECT j.queue_id, j.tenant_id FROM public.ingest_jobs j WHERE j.queue_id = job AND j.failed_at IS NULL
  FOR UPDATE SKIP LOCKED $$;
CREATE FUNCTION memcairn_fail_ingest_job(job bigint, reason text) RETURNS void {_QUEUE_WRITE} AS $$
  UPDATE public.ingest_jobs SET failed_at = now(), error = reason
  WHERE queue_id = job AND failed_at IS NULL $$;
CREATE FUNCTION memcairn_ingest_lag()
  RETURNS TABLE (tenant_id bigint, pending bigint, oldest_seconds numeric, failed bigint) {_QUEUE_SCAN} AS $$
  SELECT j.tenant_id, count(*) FILTER (WHERE j.failed_at IS NULL),
    coalesce(extract(epoch FROM now() - min(j.queued_at) FILTER (WHERE j.failed_at IS NULL)), 0),
    count(*) FILTER (WHERE j.failed_at IS NOT NULL)
  FROM public.ingest_jobs j GROUP BY j.tenant_id ORDER BY j.tenant_id $$;

CREATE FUNCTION memcairn_backlog_pick(max_items integer, busy bigint[])
  RETURNS TABLE (item_id bigint, tenant_id bigint) {_QUEUE_SCAN} AS $$
  WITH RECURSIVE waiting(tenant_id) AS (
    (SELECT b.tenant_id FROM public.embedding_backlog b ORDER BY b.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT b.tenant_id FROM public.embedding_backlog b WHERE b.tenant_id > w.tenant_id
            ORDER BY b.tenant_id LIMIT 1)
    FROM waiting w WHERE w.tenant_id IS NOT NULL
  )
  SELECT o.item_id, o.tenant_id FROM waiting w, LATERAL (
    SELECT b.item_id, b.tenant_id, row_number() OVER (ORDER BY b.item_id) AS turn FROM public.embedding_backlog b
    WHERE b.tenant_id = w.tenant_id AND b.item_id <> ALL(busy) ORDER BY b.item_id LIMIT max_items) o
  WHERE w.tenant_id IS NOT NULL
  ORDER BY o.turn, o.item_id LIMIT max_items $$;
CREATE FUNCTION memcairn_backlog_lag() RETURNS TABLE (tenant_id bigint, pending bigint, oldest_seconds numeric)
  {_QUEUE_SCAN} AS $$
  SELECT b.tenant_id, count(*), coalesce(extract(epoch FROM now() - min(b.queued_at)), 0)
  FROM public.embedding_backlog b GROUP BY b.tenant_id ORDER BY b.tenant_id $$;

REVOKE EXECUTE ON FUNCTION memcairn_claim_ingest_jobs(integer), memcairn_claim_ingest_job(bigint),
  memcairn_fail_ingest_job(bigint, text), memcairn_ingest_lag(), memcairn_backlog_pick(integer, bigint[]),
  memcairn_backlog_lag() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memcairn_claim_ingest_jobs(integer), memcairn_claim_ingest_job(bigint),
  memcairn_fail_ingest_job(bigint, text), memcairn_ingest_lag(), memcairn_backlog_pick(integer, bigint[]),
  memcairn_backlog_lag() TO {APP_ROLE};
"""

# The tenant of a transaction is no longer a setting any role may choose (``app.tenant_id``): it is the row of
# ``tenant_entries`` keyed by the backend and the transaction (a 64-bit id, never reused, so a row left by an
# earlier transaction grants nothing), which only the owner writes. The application role enters a tenant through
# an owner's function given the HMAC digest of a key it was sent (``memcairn_enter_tenant``: the key's row, not
# revoked, not expired), or, for the work across tenants, given a job its transaction claims
# (``memcairn_enter_job_tenant``) or a backlog row (``memcairn_enter_backlog_tenant``); the owner (the command
# line) writes its row itself. The table is unlogged (a crash empties it, and no transaction survives one) and
# the application role reads its own backend's rows only. ``api_keys`` loses ``app.key_id`` (the key is found by
# its digest inside the function) and the application role may no longer read the digests.
_ENTER = "SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"
_KEY_COLUMNS = "id, tenant_id, project_id, scopes, label, created_at, expires_at, revoked_at, last_used_at, replaced_by"
_M011 = f"""
CREATE UNLOGGED TABLE tenant_entries (
  pid integer NOT NULL,
  xid xid8 NOT NULL,
  tenant bigint NOT NULL,
  pin bigint,
  key_id text,
  PRIMARY KEY (pid, xid)
);
ALTER TABLE tenant_entries ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_backend ON tenant_entries FOR SELECT USING (pid = pg_catalog.pg_backend_pid());
GRANT SELECT ON tenant_entries TO {APP_ROLE};

-- parsed now (a body, not a string) and inlined into each policy as one subquery per statement
CREATE OR REPLACE FUNCTION memcairn_tenant() RETURNS bigint LANGUAGE sql STABLE
  RETURN (SELECT e.tenant FROM public.tenant_entries e
          WHERE e.pid = pg_catalog.pg_backend_pid() AND e.xid = pg_catalog.pg_current_xact_id_if_assigned());

-- records (or replaces) the transaction's tenant; the backend's rows of earlier transactions go
CREATE FUNCTION memcairn_record_entry(entered bigint, entered_pin bigint, entered_key text) RETURNS void
  LANGUAGE sql {_ENTER} AS $$
  DELETE FROM public.tenant_entries WHERE pid = pg_backend_pid() AND xid <> pg_current_xact_id();
  INSERT INTO public.tenant_entries (pid, xid, tenant, pin, key_id)
  VALUES (pg_backend_pid(), pg_current_xact_id(), entered, entered_pin, entered_key)
  ON CONFLICT (pid, xid) DO UPDATE SET tenant = EXCLUDED.tenant, pin = EXCLUDED.pin, key_id = EXCLUDED.key_id $$;
REVOKE EXECUTE ON FUNCTION memcairn_record_entry(bigint, bigint, text) FROM PUBLIC;

{_owner_rows('api_keys')}
DROP POLICY tenant_rows ON api_keys;
CREATE POLICY tenant_rows ON api_keys USING (tenant_id = memcairn_tenant()) WITH CHECK (tenant_id = memcairn_tenant());
CREATE INDEX api_keys_digest ON api_keys (digest);
REVOKE SELECT ON api_keys FROM {APP_ROLE};
GRANT SELECT ({_KEY_COLUMNS}) ON api_keys TO {APP_ROLE};

-- the key of this digest, whatever its state (the caller says why it refuses one); its tenant is entered only
-- when it is neither revoked nor expired
CREATE FUNCTION memcairn_enter_tenant(key_digest text) RETURNS TABLE (key_id text, tenant_id bigint,
  project_id bigint, scopes text[], expires_at timestamptz, revoked_at timestamptz, last_used_at timestamptz,
  entered boolean) LANGUAGE plpgsql {_ENTER} AS $$
DECLARE k record;
BEGIN
  SELECT a.id, a.tenant_id, a.project_id, a.scopes, a.expires_at, a.revoked_at, a.last_used_at INTO k
  FROM public.api_keys a WHERE a.digest = key_digest AND key_digest IS NOT NULL LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  entered := k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now());
  IF entered THEN
    PERFORM public.memcairn_record_entry(k.tenant_id, k.project_id, k.id);
  END IF;
  key_id := k.id; tenant_id := k.tenant_id; project_id := k.project_id; scopes := k.scopes;
  expires_at := k.expires_at; revoked_at := k.revoked_at; last_used_at := k.last_used_at;
  RETURN NEXT;
END $$;

-- the ingest consumer: the tenant of a waiting job, which the caller's transaction then holds locked
CREATE FUNCTION memcairn_enter_job_tenant(job bigint) RETURNS bigint LANGUAGE plpgsql {_ENTER} AS $$
DECLARE t bigint;
BEGIN
  SELECT j.tenant_id INTO t FROM public.ingest_jobs j WHERE j.queue_id = job AND j.failed_at IS NULL
  FOR UPDATE SKIP LOCKED;
  IF t IS NOT NULL THEN
    PERFORM public.memcairn_record_entry(t, NULL, NULL);
  END IF;
  RETURN t;
END $$;

-- the embedding task: the tenant of a backlog row still waiting
CREATE FUNCTION memcairn_enter_backlog_tenant(backlog_tenant bigint, backlog_items bigint[]) RETURNS bigint
  LANGUAGE plpgsql {_ENTER} AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM public.embedding_backlog b
             WHERE b.tenant_id = backlog_tenant AND b.item_id = ANY(backlog_items)) THEN
    PERFORM public.memcairn_record_entry(backlog_tenant, NULL, NULL);
    RETURN backlog_tenant;
  END IF;
  RETURN NULL;
END $$;

REVOKE EXECUTE ON FUNCTION memcairn_enter_tenant(text), memcairn_enter_job_tenant(bigint),
  memcairn_enter_backlog_tenant(bigint, bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memcairn_enter_tenant(text), memcairn_enter_job_tenant(bigint),
  memcairn_enter_backlog_tenant(bigint, bigint[]) TO {APP_ROLE};
"""

# What the application role may do, as the migrations grant it: given again to the database's role by every
# ``migrate`` (a role named later, or a database made from another as its template).
APP_GRANTS = f"""
GRANT SELECT, INSERT, UPDATE, DELETE ON projects, sessions, items, forgotten, item_vectors TO {APP_ROLE};
GRANT SELECT, INSERT, UPDATE ON idempotency TO {APP_ROLE};
GRANT INSERT, UPDATE ON api_keys TO {APP_ROLE};
GRANT SELECT ({_KEY_COLUMNS}) ON api_keys TO {APP_ROLE};
GRANT SELECT ON tenant_entries TO {APP_ROLE};
GRANT SELECT, INSERT ON audit_log, changes TO {APP_ROLE};
GRANT SELECT, INSERT, DELETE ON embedding_backlog, ingest_queue TO {APP_ROLE};
GRANT SELECT, INSERT, UPDATE, DELETE ON ingest_jobs TO {APP_ROLE};
GRANT SELECT ON schema_migrations TO {APP_ROLE};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {APP_ROLE};
GRANT EXECUTE ON FUNCTION memcairn_tenant(), memcairn_claim_ingest_jobs(integer),
  memcairn_claim_ingest_job(bigint), memcairn_fail_ingest_job(bigint, text), memcairn_ingest_lag(),
  memcairn_backlog_pick(integer, bigint[]), memcairn_backlog_lag(), memcairn_enter_tenant(text),
  memcairn_enter_job_tenant(bigint), memcairn_enter_backlog_tenant(bigint, bigint[]) TO {APP_ROLE};
"""
_ROLE_WORD = re.compile(rf"\b{APP_ROLE}\b")


def for_role(sql: str, role: str) -> str:
    """``sql`` with ``memcairn_app`` (the name the migrations were written with) made ``role``, a checked name."""
    return _ROLE_WORD.sub(role, sql)


# (version, name, sql): applied in order, each in its own transaction with its record.
MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "tenants, projects, sessions, items, forgotten marks, keys, audit log; row-level security", _M001),
    (2, "the change sequence of stored and forgotten memories, for the SSE feed", _M002),
    (3, "answers kept by Idempotency-Key for batches of events", _M003),
    (4, "the backlog of items whose vector is still to be computed", _M004),
    (5, "the ingest queue of events and its jobs, claimed with FOR UPDATE SKIP LOCKED", _M005),
    (6, "vectors per chunk of an item; keyword text split at punctuation; words per item", _M006),
    (7, "the transaction of each change (a reader misses none committed out of order); vectors written", _M007),
    (8, "every primary key, unique constraint and foreign key leads with tenant_id (Citus-ready)", _M008),
    (9, "the application role of this database, by name", _M009),
    (10, "row-level security on the ingest jobs and the embedding backlog; narrow owner's functions for the"
         " work across tenants (ids and counts only)", _M010),
    (11, "the tenant of a transaction is entered through the owner's functions (a key's digest, a claimed job, a"
         " backlog row), no longer a setting any role may choose; key digests hidden from the application role",
     _M011),
    (12, "per-tenant numbers of memories and changes, the API's ids (one sequence told a tenant the others' volume)",
     M012),
    (13, "per-tenant numbers of audit entries, the ids of GET /v1/audit (every read writes one)", M013),
    (14, "a memory's anchors kept with its row (files, identifiers, commit), for freshness where the code is", M014),
    (15, "whether a memory still holds: superseded, wrong or reverted, kept with its row as an audit trail", M015),
)
LATEST = MIGRATIONS[-1][0]
