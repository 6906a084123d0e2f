"""docs/OPERATIONS.md's backup and restore, run for real with the bundled PostgreSQL's pg_dump and pg_restore: all
tenants dumped and restored into a new database, and one tenant cut out of that dump and put back into the live
database after its rows were lost, the other tenant untouched and no sequence set back."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from postgres_server import TEST_SECRET, hold
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from memcairn.core.models import NewItem
from memcairn.pgstore import db, keys
from memcairn.pgstore.items import TeamStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# The tables holding tenants' rows, children first: the order docs/OPERATIONS.md deletes them in.
TENANT_TABLES = ("item_vectors", "embedding_backlog", "ingest_jobs", "ingest_queue", "idempotency", "changes",
                 "audit_log", "api_keys", "forgotten", "items", "sessions", "projects")


def tool(cluster, name: str) -> str:
    found = sorted(cluster.server._cluster_dir().glob(f".pg0/installation/*/bin/{name}"))
    if not found:
        pytest.skip(f"{name} is not in the bundled PostgreSQL")
    return str(found[-1])


def run(argv: list[str], dsn: str, **env: str) -> str:
    parts = conninfo_to_dict(dsn)
    environ = {**os.environ, "PGPASSWORD": str(parts.get("password", "")), **env}
    where = ["-h", str(parts.get("host", "127.0.0.1")), "-p", str(parts.get("port", 5432)),
             "-U", str(parts.get("user"))]
    done = subprocess.run([argv[0], *where, *argv[1:]], capture_output=True, text=True, env=environ, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def counts(dsn: str) -> dict[str, dict[int, int]]:
    """Rows per tenant of every tenant table (as the owner, a superuser here: no row-level security)."""
    with db.connect(dsn) as conn:
        return {table: dict(conn.execute(sql.SQL("SELECT tenant_id, count(*) FROM {} GROUP BY 1").format(
            sql.Identifier(table))).fetchall()) for table in TENANT_TABLES}


def delete_tenant(dsn: str, tenant_id: int, *, keep: bool = False) -> None:
    """Every row of ``tenant_id`` (``keep``: every row of the other tenants), children first."""
    test = "<>" if keep else "="
    with db.connect(dsn) as conn, conn.transaction():
        for table in (*TENANT_TABLES, "tenants"):
            column = "id" if table == "tenants" else "tenant_id"
            conn.execute(sql.SQL("DELETE FROM {} WHERE {} " + test + " %s").format(
                sql.Identifier(table), sql.Identifier(column)), (tenant_id,))


@pytest.fixture
def seeded(pg_cluster, pg_database: str):
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=2)
    team = TeamStore(pool, None)
    with db.connect(pg_database) as conn:
        made = {tenant: keys.create_key(conn, TEST_SECRET, tenant, scopes=["memories:read", "memories:write"])
                for tenant in ("acme", "other")}
        tenants = dict(conn.execute("SELECT name, id FROM tenants").fetchall())
    for tenant, tenant_id in tenants.items():
        hold(tenant_id, made[tenant]["key"])
    for tenant, tenant_id in tenants.items():
        for n in range(5):
            team.add(tenant_id, NewItem(project=f"{tenant}-api", kind="manual", title=f"{tenant} note {n}",
                                        text=f"how {tenant} deploys, step {n}", session=f"{tenant}-s1"))
    pool.close()
    return tenants


def test_tenant_tables_named_in_the_procedure_are_every_table_with_tenant_rows(pg_database: str) -> None:
    with db.connect(pg_database) as conn:
        live = {row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public'"
            " AND column_name = 'tenant_id'")}
    assert live == set(TENANT_TABLES)


def test_all_tenants_dump_and_restore_into_a_new_database(pg_cluster, pg_database: str, seeded, tmp_path) -> None:
    dump = tmp_path / "memcairn.dump"
    run([tool(pg_cluster, "pg_dump"), "--format=custom", f"--file={dump}", "--dbname",
         conninfo_to_dict(pg_database)["dbname"]], pg_database)
    restored = pg_cluster.owner_dsn(pg_cluster.create_database(template=None))
    run([tool(pg_cluster, "pg_restore"), "--exit-on-error", "--single-transaction", "--dbname",
         conninfo_to_dict(restored)["dbname"], str(dump)], restored)
    assert counts(restored) == counts(pg_database)
    assert counts(restored)["items"] == {seeded["acme"]: 5, seeded["other"]: 5}
    pool = db.Pool(db.app_conninfo(restored, TEST_SECRET), size=2)  # the server's role reads it as before
    try:
        team = TeamStore(pool, None)
        names = [p["name"] for p in team.projects(seeded["acme"])]
        assert names == ["acme-api"]
    finally:
        pool.close()


def test_one_tenant_cut_from_the_dump_is_restored_into_the_live_database(pg_cluster, pg_database: str, seeded,
                                                                         tmp_path: Path) -> None:
    acme = seeded["acme"]
    dump, one = tmp_path / "memcairn.dump", tmp_path / "acme.dump"
    run([tool(pg_cluster, "pg_dump"), "--format=custom", f"--file={dump}", "--dbname",
         conninfo_to_dict(pg_database)["dbname"]], pg_database)
    before = counts(pg_database)
    # 1. the whole dump into a scratch database; 2. every other tenant's rows removed there; 3. its data dumped
    scratch = pg_cluster.owner_dsn(pg_cluster.create_database(template=None))
    run([tool(pg_cluster, "pg_restore"), "--exit-on-error", "--dbname", conninfo_to_dict(scratch)["dbname"],
         str(dump)], scratch)
    delete_tenant(scratch, acme, keep=True)
    tables = [f"--table=public.{table}" for table in ("tenants", *TENANT_TABLES)]
    run([tool(pg_cluster, "pg_dump"), "--format=custom", "--data-only", "--inserts", *tables, f"--file={one}",
         "--dbname", conninfo_to_dict(scratch)["dbname"]], scratch)
    # the loss: acme's rows gone from the live database; the other tenant writes on meanwhile
    delete_tenant(pg_database, acme)
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=2)
    TeamStore(pool, None).add(seeded["other"], NewItem(project="other-api", kind="manual", title="after the dump",
                                                        text="written after the backup"))
    pool.close()
    with db.connect(pg_database) as conn:
        next_item = conn.execute("SELECT last_value FROM items_id_seq").fetchone()[0]
    # 4. into the live database, without the dump's sequence positions, acting as that tenant (row-level security)
    listing = run([tool(pg_cluster, "pg_restore"), "--list", str(one)], pg_database)
    kept = tmp_path / "acme.list"
    kept.write_text("".join(line + "\n" for line in listing.splitlines() if "SEQUENCE SET" not in line))
    run([tool(pg_cluster, "pg_restore"), "--data-only", "--single-transaction", "--exit-on-error",
         f"--use-list={kept}", "--dbname", conninfo_to_dict(pg_database)["dbname"], str(one)], pg_database,
        PGOPTIONS=f"-c app.tenant_id={acme}")
    after = counts(pg_database)
    for table in TENANT_TABLES:
        assert after[table].get(acme) == before[table].get(acme), table
    assert after["items"][seeded["other"]] == before["items"][seeded["other"]] + 1  # its new row kept
    with db.connect(pg_database) as conn:
        assert conn.execute("SELECT last_value FROM items_id_seq").fetchone()[0] == next_item
