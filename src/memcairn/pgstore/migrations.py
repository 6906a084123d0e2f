"""Applies ``schema.MIGRATIONS`` in order, under an advisory lock, each in its own transaction with its record.

Several servers starting on one database at once are serialised by ``pg_advisory_lock``: the first applies
what is missing, the others then find nothing to do. A database whose schema is newer than this code is
refused (an older server must not write to it).
"""

from __future__ import annotations

import psycopg

from memcairn.core.errors import SchemaTooNewError
from memcairn.pgstore.schema import APP_ROLE, LATEST, MIGRATIONS, for_role

LOCK_KEY = "memcairn:migrations"


def applied_versions(conn: psycopg.Connection) -> list[int]:
    found = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return []
    return [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def migrate(conn: psycopg.Connection, app_role: str = APP_ROLE) -> list[int]:
    """Apply the missing migrations on ``conn`` (an autocommit connection of the database's owner), their grants
    given to ``app_role``; returns the versions it applied (empty when the schema was current)."""
    if not conn.autocommit:
        raise ValueError("migrate needs an autocommit connection (each migration is its own transaction)")
    conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (LOCK_KEY,))
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        done = set(applied_versions(conn))
        newest = max(done, default=0)
        if newest > LATEST:
            raise SchemaTooNewError(f"the database's schema is version {newest}, newer than this memcairn knows "
                                    f"({LATEST}): upgrade memcairn")
        applied = []
        for version, name, sql in MIGRATIONS:
            if version in done:
                continue
            with conn.transaction():
                conn.execute(for_role(sql, app_role))  # type: ignore[arg-type] - our own constant, several statements
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
            applied.append(version)
        return applied
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (LOCK_KEY,))
