"""Connections: the owner's (migrations, the app role's password, administration) and the application's
(``memcairn_app``, bound by row-level security), a small pool of the latter, and tenant transactions.

Every tenant-scoped piece of work runs in ``tenant_transaction``: it sets ``app.tenant_id`` with
``set_config(..., true)``, which lasts only for the transaction, so a pooled connection never carries one
request's tenant into the next. Connections are in autocommit mode, so each ``transaction()`` block is a real
transaction (never a savepoint inside one that an earlier statement opened implicitly, which would keep the
setting alive after the block).
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memcairn.errors import ConfigError, WouldWait
from memcairn.pgstore.migrations import migrate
from memcairn.pgstore.schema import APP_ROLE
from memcairn.pgstore.waits import before_waiting, may_wait


def app_password(secret: bytes) -> str:
    """The application role's password, derived from the server secret (every process of a server agrees)."""
    return hmac.new(secret, b"memcairn postgres application role", hashlib.sha256).hexdigest()


def app_conninfo(owner_dsn: str, secret: bytes) -> str:
    return make_conninfo(owner_dsn, user=APP_ROLE, password=app_password(secret))


def database_name(dsn: str) -> str:
    return str(conninfo_to_dict(dsn).get("dbname") or "postgres")


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as exc:
        where = conninfo_to_dict(dsn)
        raise ConfigError(f"cannot connect to PostgreSQL at {where.get('host', 'localhost')}:{where.get('port', 5432)}"
                          f" database {where.get('dbname', '?')!r} as {where.get('user', '?')!r}: "
                          f"{str(exc).strip().splitlines()[-1]}") from None


def prepare(owner_dsn: str, secret: bytes) -> list[int]:
    """Migrate the database and let the application role log in with its derived password; returns the
    migrations applied."""
    with connect(owner_dsn, autocommit=True) as conn:
        applied = migrate(conn)
        conn.execute(psycopg.sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(
            psycopg.sql.Identifier(APP_ROLE), psycopg.sql.Literal(app_password(secret))))
        conn.execute(psycopg.sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            psycopg.sql.Identifier(database_name(owner_dsn)), psycopg.sql.Identifier(APP_ROLE)))
    return applied


class Pool:
    """At most ``size`` connections of one DSN, handed out one per caller; a broken one is replaced."""

    def __init__(self, dsn: str, size: int = 8) -> None:
        self.dsn = dsn
        self._idle: queue.LifoQueue[psycopg.Connection] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection for the block; where waiting is not allowed (``waits.no_waiting``), only one that is
        open and idle now (else ``WouldWait``)."""
        if not self._slots.acquire(blocking=may_wait()):
            raise WouldWait("every connection of the pool is in use")
        conn: psycopg.Connection | None = None
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                before_waiting("opening a connection")
                conn = connect(self.dsn)
            yield conn
        except BaseException:
            if conn is not None and not conn.closed:
                conn.rollback() if not conn.broken else None
            raise
        finally:
            if conn is not None:
                if conn.broken or conn.closed or self._closed:
                    conn.close()
                else:
                    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                        conn.rollback()
                    self._idle.put(conn)
            self._slots.release()

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


@contextmanager
def tenant_transaction(conn: psycopg.Connection, tenant_id: int) -> Iterator[psycopg.Cursor]:
    """One transaction in which ``app.tenant_id`` is ``tenant_id`` (and nothing else is visible)."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("tenant_transaction must start a transaction of its own, not run inside another")
    with conn.transaction(), conn.cursor() as cur:
        act_as(cur, tenant_id)
        yield cur


def act_as(cur: psycopg.Cursor, tenant_id: int) -> None:
    """Make ``tenant_id`` the tenant of the open transaction (until it ends or the next call): the ingest
    consumer acts for several tenants in one transaction, holding its claim on their jobs throughout."""
    cur.execute("SELECT set_config('app.tenant_id', %s, true)", (str(int(tenant_id)),))
