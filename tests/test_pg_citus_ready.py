"""The team schema is ready to be distributed by tenant (Citus: every table by ``tenant_id``, co-located), read
from the live catalog of a migrated database; and migration 8, which made it so, keeps every row."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from memcairn.pgstore import db, migrations  # noqa: E402
from memcairn.pgstore.schema import MIGRATIONS  # noqa: E402

# Tables without a tenant column, and why: Citus keeps them whole on every node (reference tables) or on the
# coordinator alone, and a distributed table may reference a reference table.
NOT_BY_TENANT = {
    "tenants": "the tenants themselves: small, a reference table; its id is the tenant id the others lead with",
    "schema_migrations": "the schema's version: the coordinator's own bookkeeping",
    "app_role": "the name of the database's application role (one row): the coordinator's own bookkeeping",
    "tenant_entries": "the tenant each backend's open transaction entered (unlogged): each node's own bookkeeping",
}
# Row ids handed out by one sequence for all tenants: bigint identity columns, which Citus hands out from a range
# per node. The API shows none of them (memories, changes and audit entries go by their number within the tenant,
# migrations 12 and 13, from sequences of the schema ``memcairn_numbers``; a queued event by its place in its
# batch): two of them would tell how many rows other tenants wrote in between.
SHARED_SEQUENCES = {("items", "id"), ("projects", "id"), ("sessions", "id"), ("audit_log", "id"),
                    ("changes", "seq"), ("ingest_queue", "id"), ("tenants", "id")}

CONSTRAINTS = """
SELECT c.conrelid::regclass::text, c.conname, c.contype, c.confrelid::regclass::text,
       ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i)::text[],
       ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i)::text[]
FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
WHERE t.relnamespace = 'public'::regnamespace AND c.contype IN ('p', 'u', 'f')
"""


def _tables(conn) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    rows = conn.execute("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
                        " AND table_name IN (SELECT table_name FROM information_schema.tables"
                        " WHERE table_schema = 'public' AND table_type = 'BASE TABLE')").fetchall()
    tables: dict[str, set[str]] = {}
    for table, column in rows:
        tables.setdefault(table, set()).add(column)
    return tables


def test_every_key_of_a_tenant_table_leads_with_the_tenant(pg_database: str) -> None:
    with db.connect(pg_database) as conn:
        tables = _tables(conn)
        constraints = conn.execute(CONSTRAINTS).fetchall()
        identities = {(t, c, dt) for t, c, dt in conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'public' AND is_identity = 'YES'")}
        owned = conn.execute("SELECT count(*) FROM pg_class s WHERE s.relkind = 'S' AND s.relnamespace ="
                             " 'public'::regnamespace AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = s.oid"
                             " AND d.deptype IN ('a', 'i'))").fetchone()
    by_tenant = {t for t in tables if t not in NOT_BY_TENANT}
    assert set(NOT_BY_TENANT) <= set(tables)
    assert [t for t in sorted(by_tenant) if "tenant_id" not in tables[t]] == []
    wrong = []
    for table, name, kind, target, columns, target_columns in constraints:
        if table not in by_tenant:
            continue
        if columns[0] != "tenant_id":
            wrong.append(f"{table}.{name} ({kind}) starts with {columns[0]}")
        if kind == "f" and target == "tenants":
            if columns != ["tenant_id"] or target_columns != ["id"]:
                wrong.append(f"{table}.{name} references tenants by {columns}")
        elif kind == "f" and dict(zip(columns, target_columns, strict=True)).get("tenant_id") != "tenant_id":
            wrong.append(f"{table}.{name} does not match tenant_id to {target}.tenant_id")  # another tenant's row
    assert wrong == []
    assert {(t, c) for t, c, _ in identities} == SHARED_SEQUENCES
    assert {dt for *_, dt in identities} == {"bigint"}
    assert owned == (0,)  # no sequence besides the identity columns' own


def test_a_row_cannot_name_another_tenants_project_or_session(pg_database: str) -> None:
    import psycopg

    with db.connect(pg_database) as conn:
        a, b = (conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING id", (n,)).fetchone()[0]  # type: ignore[index]
                for n in ("a", "b"))
        project_b = conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'web') RETURNING id",
                                 (b,)).fetchone()[0]  # type: ignore[index]
        for sql in ("INSERT INTO items (tenant_id, project_id, content_hash, created_at_epoch) VALUES (%s, %s, 'h', 0)",
                    "INSERT INTO forgotten (tenant_id, project_id, content_hash) VALUES (%s, %s, 'h')",
                    "INSERT INTO changes (tenant_id, project_id, item_id, op) VALUES (%s, %s, 1, 'stored')"):
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                conn.execute(sql, (a, project_b))


def _count_rows(conn, tables: list[str]) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}  # type: ignore[index]


def test_migration_8_keeps_every_row(pg_cluster, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    name = pg_cluster.create_database(template=None)
    owner = pg_cluster.owner_dsn(name)
    try:
        monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:7])
        monkeypatch.setattr(migrations, "LATEST", 7)
        with db.connect(owner) as conn:
            assert migrations.migrate(conn) == list(range(1, 8))
            conn.execute("""
                INSERT INTO tenants (name) VALUES ('a'), ('b');
                INSERT INTO projects (tenant_id, name) VALUES (1, 'api'), (2, 'web');
                INSERT INTO sessions (tenant_id, project_id, agent_session_id) VALUES (1, 1, 's1'), (2, 2, 's2');
                INSERT INTO items (tenant_id, project_id, session_id, content_hash, created_at_epoch, title)
                  VALUES (1, 1, 1, 'h1', 1, 'one'), (1, 1, NULL, 'h2', 2, 'two'), (2, 2, 2, 'h3', 3, 'three');
                INSERT INTO item_vectors (item_id, chunk, tenant_id, project_id, embedding)
                  VALUES (1, 0, 1, 1, array_fill(0.1, ARRAY[384])::vector);
                INSERT INTO embedding_backlog (item_id, tenant_id) VALUES (2, 1), (3, 2);
                INSERT INTO forgotten (tenant_id, project_id, content_hash) VALUES (1, 1, 'gone');
                INSERT INTO api_keys (id, tenant_id, project_id, digest, scopes) VALUES ('k1', 1, 1, 'd', '{x}'),
                  ('k2', 2, NULL, 'd', '{x}');
                INSERT INTO audit_log (tenant_id, actor, action) VALUES (1, 'cli', 'made');
                INSERT INTO changes (tenant_id, project_id, item_id, op) VALUES (1, 1, 1, 'stored');
                INSERT INTO idempotency (tenant_id, key, request_hash) VALUES (1, 'k', 'h');
                INSERT INTO ingest_queue (tenant_id, payload) VALUES (2, '{}');
                INSERT INTO ingest_jobs (queue_id, tenant_id) VALUES (1, 2);
            """)
            tables = sorted(t for t in _tables(conn) if t != "schema_migrations")
            before = _count_rows(conn, tables)
            monkeypatch.undo()
            assert migrations.migrate(conn)[0] == 8  # and any migration after it
            assert _count_rows(conn, tables) == before
            assert sum(before.values()) == 20
            # the cascades still hold: forgetting an item takes its vectors and backlog row with it
            conn.execute("DELETE FROM items")
            assert _count_rows(conn, ["item_vectors", "embedding_backlog"]) == {"item_vectors": 0,
                                                                                 "embedding_backlog": 0}
    finally:
        pg_cluster.drop_database(name)
