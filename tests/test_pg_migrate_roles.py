"""`memcairn server migrate` and the per-database application role: the schema made by a database owner that is no
superuser (with CREATEROLE, or without it after an administrator made the role), the server started with the
application role's URL alone (no DDL rights), two databases of one cluster never resetting each other's role,
a clear error instead of "permission denied to alter role", and migration 9 keeping every seeded row."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import psycopg
import pytest

pytest.importorskip("pg0")

from pg_server_process import MEMCAIRN, home_with_test_secret, running_server  # noqa: E402
from postgres_server import TEST_SECRET  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from memcairn.core.errors import ConfigError  # noqa: E402
from memcairn.pgstore import db, keys, migrations, schema  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def owned_database(pg_cluster, request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A new, empty database owned by a login role that is no superuser (CREATEROLE when the test's parameter
    says so); yields (database, the owner's URL). pgvector is made by the administrator beforehand, as a
    managed service's console does."""
    createrole = getattr(request, "param", True)
    name = pg_cluster.create_database(template=None)
    owner = f"owner_{name}"
    with db.connect(pg_cluster.dsn) as conn:
        conn.execute(f"CREATE ROLE {owner} LOGIN PASSWORD 'owner-pw' {'CREATEROLE' if createrole else ''}")
        conn.execute(f"ALTER DATABASE {name} OWNER TO {owner}")
    with db.connect(pg_cluster.owner_dsn(name)) as conn:
        conn.execute(f"ALTER SCHEMA public OWNER TO {owner}")
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    yield name, make_conninfo(pg_cluster.dsn, dbname=name, user=owner, password="owner-pw")
    pg_cluster.drop_database(name)


def _memcairn(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MEMCAIRN, *args], env={"PATH": "/usr/bin:/bin", "MEMCAIRN_HOME": str(home)},
                          capture_output=True, text=True, timeout=180)


def _can_login(dsn: str) -> bool:
    try:
        with db.connect(dsn) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except ConfigError:
        return False


def test_two_databases_of_one_cluster_keep_their_own_app_role(pg_cluster) -> None:
    first, second = pg_cluster.create_database(template=None), pg_cluster.create_database(template=None)
    try:
        db.prepare(pg_cluster.owner_dsn(first), TEST_SECRET)
        app_first = db.app_conninfo(pg_cluster.owner_dsn(first), TEST_SECRET)
        assert _can_login(app_first)
        db.prepare(pg_cluster.owner_dsn(second), bytes(reversed(TEST_SECRET)))  # another install, its own secret
        app_second = db.app_conninfo(pg_cluster.owner_dsn(second), bytes(reversed(TEST_SECRET)))
        assert conninfo_to_dict(app_first)["user"] == f"memcairn_app_{first}"
        assert conninfo_to_dict(app_second)["user"] == f"memcairn_app_{second}"
        assert _can_login(app_first) and _can_login(app_second)  # the second did not reset the first's password
        with db.connect(make_conninfo(app_second, dbname=first)) as conn:  # one database's role reads no other's
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM items")
    finally:
        pg_cluster.drop_database(first)
        pg_cluster.drop_database(second)


def test_servers_starting_at_once_on_a_new_database_make_its_role_once(pg_cluster) -> None:
    name = pg_cluster.create_database(template=None)
    try:
        errors: list[BaseException] = []

        def start() -> None:
            try:
                db.prepare(pg_cluster.owner_dsn(name), TEST_SECRET)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=start) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert _can_login(db.app_conninfo(pg_cluster.owner_dsn(name), TEST_SECRET))
    finally:
        pg_cluster.drop_database(name)


def test_role_names_are_per_database_and_safe() -> None:
    assert db.default_app_role("memcairn") == "memcairn_app_memcairn"
    odd = db.default_app_role("Team-Memory")
    assert odd.startswith("memcairn_app_team_memory_") and odd != db.default_app_role("team_memory")
    assert len(db.default_app_role("x" * 63)) <= 63
    with pytest.raises(ConfigError, match="not a role name"):
        db.checked_role('bad"; DROP TABLE items; --')


def test_migrate_as_a_non_superuser_owner_then_serve_with_the_app_role_alone(
        tmp_path: Path, owned_database: tuple[str, str]) -> None:
    name, owner = owned_database
    home = home_with_test_secret(tmp_path / "admin")
    done = _memcairn(home, "server", "migrate", "--database", owner, "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made["applied"] == list(range(1, schema.LATEST + 1)) and made["role"] == f"memcairn_app_{name}"
    assert made["password"] and made["notes"] == []
    app = make_conninfo(owner, user=made["role"], password=made["password"])
    again = _memcairn(home, "server", "migrate", "--database", owner, "--json")
    assert json.loads(again.stdout)["applied"] == [] and json.loads(again.stdout)["password"] is None
    assert _can_login(app)  # a second migrate leaves the password alone

    with db.connect(app) as conn:  # the server's role may not change the schema, nor pick a role with rights
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE intruder (x int)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("ALTER TABLE items DISABLE ROW LEVEL SECURITY")
        assert conn.execute("SHOW lock_timeout").fetchone() == ("2s",)

    with running_server(tmp_path, app, "--workers", "2") as server:  # the app URL reaches every process
        key = replace(server, database=owner).make_key()  # keys are made with the owner's URL
        assert _can_login(app)  # which leaves the application role's password alone
        headers = {"Authorization": f"Bearer {key}"}
        saved = httpx.post(f"{server.url}/v1/memories", headers=headers,
                           json={"project": "api", "title": "Retry budget", "text": "three retries then give up"})
        assert saved.status_code == 201, saved.text
        found = httpx.get(f"{server.url}/v1/search", headers=headers,
                          params={"query": "retry budget", "project": "api", "mode": "keyword"})
        assert found.status_code == 200 and "Retry budget" in found.text
    assert "deprecated" not in (tmp_path / "server.log").read_text()


@pytest.mark.parametrize("owned_database", [False], indirect=True)
def test_an_owner_without_createrole_gets_clear_errors_and_migrate_only_grants(
        tmp_path: Path, owned_database: tuple[str, str], pg_cluster) -> None:
    name, owner = owned_database
    home = home_with_test_secret(tmp_path / "admin")
    role = f"memcairn_app_{name}"
    missing = _memcairn(home, "server", "migrate", "--database", owner)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert f"CREATE ROLE {role} LOGIN PASSWORD" in missing.stderr, missing.stderr

    with db.connect(pg_cluster.dsn) as conn:  # the administrator makes the role, as the error says
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'app-pw'")
    done = _memcairn(home, "server", "migrate", "--database", owner, "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made["applied"] == list(range(1, schema.LATEST + 1)) and made["password"] is None
    assert any("lock_timeout" in note for note in made["notes"])  # left to the administrator, by statement
    app = make_conninfo(owner, user=role, password="app-pw")
    with db.connect(app) as conn:
        assert conn.execute("SELECT count(*) FROM items").fetchone() == (0,)

    # the owner's URL on `memcairn server` would reset the role's password: refused in words, not a traceback
    started = _memcairn(home, "server", "--database", owner, "--port", "1")
    assert started.returncode != 0 and "Traceback" not in started.stderr
    assert f"may not set the password of the application role '{role}'" in started.stderr, started.stderr
    assert _can_login(app)


def test_an_owner_that_may_not_add_pgvector_is_told_what_to_ask_for(tmp_path: Path, owned_database: tuple[str, str],
                                                                     pg_cluster) -> None:
    name, owner = owned_database
    with db.connect(pg_cluster.owner_dsn(name)) as conn:  # pgvector is no trusted extension: only a superuser adds it
        conn.execute("DROP EXTENSION vector")
    done = _memcairn(home_with_test_secret(tmp_path / "admin"), "server", "migrate", "--database", owner)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "CREATE EXTENSION IF NOT EXISTS vector" in done.stderr and name in done.stderr, done.stderr
    with db.connect(pg_cluster.owner_dsn(name)) as conn:  # nothing half-made: migration 1 rolled back whole
        assert conn.execute("SELECT to_regclass('schema_migrations'), to_regclass('items')").fetchone() == (
            "schema_migrations", None)
        conn.execute("CREATE EXTENSION vector")
    assert _memcairn(home_with_test_secret(tmp_path / "again"), "server", "migrate", "--database",
                     owner).returncode == 0


def test_the_app_role_url_refuses_a_schema_behind_and_names_migrate(tmp_path: Path, pg_cluster) -> None:
    name = pg_cluster.create_database(template=None)
    try:
        db.prepare(pg_cluster.owner_dsn(name), TEST_SECRET)
        with db.connect(pg_cluster.owner_dsn(name)) as conn:  # as if this memcairn were newer than the schema
            conn.execute("DELETE FROM schema_migrations WHERE version = %s", (schema.LATEST,))
        role = f"memcairn_app_{name}"
        app = make_conninfo(pg_cluster.owner_dsn(name), user=role, password=db.app_password(TEST_SECRET))
        behind = rf"version {schema.LATEST - 1} and this memcairn needs {schema.LATEST}: run memcairn server migrate"
        with pytest.raises(ConfigError, match=behind):
            db.check_current(app)
        home = home_with_test_secret(tmp_path / "admin")
        started = _memcairn(home, "server", "--database", app, "--port", "1")
        assert started.returncode != 0 and "memcairn server migrate" in started.stderr, started.stderr
    finally:
        pg_cluster.drop_database(name)


def test_migration_9_keeps_every_row_of_a_version_8_database(pg_cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    name = pg_cluster.create_database(template=None)
    owner = pg_cluster.owner_dsn(name)
    try:
        with monkeypatch.context() as patched, db.connect(owner) as conn:
            patched.setattr(migrations, "MIGRATIONS", schema.MIGRATIONS[:8])
            assert migrations.migrate(conn) == list(range(1, 9))  # as a release of migration 8 left it
            tenant = conn.execute("INSERT INTO tenants (name) VALUES ('acme') RETURNING id").fetchone()[0]
            project = conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'api') RETURNING id",
                                   (tenant,)).fetchone()[0]
            for n in range(50):
                conn.execute("INSERT INTO items (tenant_id, project_id, title, text, content_hash, created_at_epoch)"
                             " VALUES (%s, %s, %s, 'body', %s, 1)", (tenant, project, f"note {n}", f"h{n}"))
            before = conn.execute("SELECT id, title FROM items ORDER BY id").fetchall()
        assert db.prepare(owner, TEST_SECRET) == list(range(9, schema.LATEST + 1))
        with db.connect(owner) as conn:  # the application role enters a tenant with one of its keys
            made = keys.create_tenant_key(conn, TEST_SECRET, tenant)
        db.hold_key(tenant, keys.digest(TEST_SECRET, made["key"]))
        with db.connect(db.app_conninfo(owner, TEST_SECRET)) as conn, db.tenant_transaction(conn, tenant) as cur:
            assert cur.execute("SELECT id, title FROM items ORDER BY id").fetchall() == before
        with db.connect(owner) as conn:
            assert conn.execute("SELECT name FROM app_role").fetchone() == (f"memcairn_app_{name}",)
    finally:
        pg_cluster.drop_database(name)
