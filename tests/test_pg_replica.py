"""A streaming standby of the session's PostgreSQL (pg_basebackup -R), and reading one's own write from it only
once it has replayed the write's WAL position."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from postgres_server import TEST_SECRET  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from memcairn.models import NewItem  # noqa: E402
from memcairn.pgstore import db  # noqa: E402
from memcairn.pgstore.items import TeamStore  # noqa: E402
from memcairn.pgstore.replica import replayed, start_replica, wait_replayed, wal_position  # noqa: E402


def test_a_write_is_read_back_from_the_standby_once_its_wal_position_is_replayed(pg_cluster, pg_database):
    folder = Path(tempfile.mkdtemp(prefix="memcairn-standby-"))
    folder.chmod(0o755)
    port = int(conninfo_to_dict(pg_cluster.dsn)["port"])
    standby = start_replica(pg_cluster.server, port, folder / "standby")
    try:
        standby_db = make_conninfo(standby.dsn(), dbname=db.database_name(pg_database))
        with db.connect(pg_database) as owner:
            tenant = owner.execute("INSERT INTO tenants (name) VALUES ('acme') RETURNING id").fetchone()[0]
        primary_pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=2)
        standby_pool = db.Pool(db.app_conninfo(standby_db, TEST_SECRET), size=2)
        try:
            saved = TeamStore(primary_pool).add(tenant, NewItem(project="app", kind="manual", title="replicated",
                                                                narrative="read your own writes"))
            with db.connect(pg_database) as primary, db.connect(standby_db) as watcher:
                lsn = wal_position(primary)
                assert wait_replayed(watcher, lsn, budget_s=30)
                assert TeamStore(standby_pool).get(tenant, saved.id)["title"] == "replicated"
                assert watcher.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
                far = "FFFFFFFF/0"  # a position the primary has not reached: the read goes to the primary
                assert not replayed(watcher, far) and not wait_replayed(watcher, far, budget_s=0.05)
        finally:
            primary_pool.close()
            standby_pool.close()
    finally:
        standby.stop()
        shutil.rmtree(folder, ignore_errors=True)
