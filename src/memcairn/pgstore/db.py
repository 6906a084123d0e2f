"""Connections: the owner's (migrations, the app role's password, administration) and the application's
(``memcairn_app``, bound by row-level security), a small pool of the latter, and tenant transactions.

Every tenant-scoped piece of work runs in ``tenant_transaction``: it sets ``app.tenant_id`` with
``set_config(..., true)``, which lasts only for the transaction, so a pooled connection never carries one
request's tenant into the next. Connections are in autocommit mode, so each ``transaction()`` block is a real
transaction (never a savepoint inside one that an earlier statement opened implicitly, which would keep the
setting alive after the block).

The application role's sessions carry time limits (``Timeouts``, set per role in the server's database at every
``prepare``): a statement, a wait for a lock and a transaction left idle each end with an error instead of
holding a connection (and a request) indefinitely; the request is answered 503. A read on the event loop waits
for a lock only ``LOOP_LOCK_TIMEOUT`` (``keys.authenticate_in`` sets it for its transaction), then runs again on a
thread with the role's limit: a table locked for minutes must not hold up every other request of the process.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import queue
import select
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memcairn.errors import ConfigError, WouldWait
from memcairn.pgstore.migrations import migrate
from memcairn.pgstore.schema import APP_ROLE
from memcairn.pgstore.waits import before_waiting, may_wait

T = TypeVar("T")
LOOP_LOCK_TIMEOUT = "50ms"  # a read's lock wait on the event loop before it goes to a thread (see above)


@dataclass(frozen=True)
class Timeouts:
    """The application role's limits, in PostgreSQL's units (``2s``, ``500ms``, ``1min``): each default fits one
    request; the environment variable of each (``MEMCAIRN_PG_<NAME>``) overrides it."""

    statement_timeout: str = "15s"
    lock_timeout: str = "2s"
    idle_in_transaction_session_timeout: str = "60s"

    @classmethod
    def from_env(cls) -> Timeouts:
        given = {f.name: os.environ.get(env_name(f.name), "").strip() for f in fields(cls)}
        return cls(**{name: value for name, value in given.items() if value})


def env_name(setting: str) -> str:
    return f"MEMCAIRN_PG_{setting.upper()}"


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


def prepare(owner_dsn: str, secret: bytes, timeouts: Timeouts | None = None) -> list[int]:
    """Migrate the database and let the application role log in with its derived password and its time limits
    (``Timeouts.from_env()`` unless given) in this database; returns the migrations applied."""
    timeouts = timeouts or Timeouts.from_env()
    Ident, Literal, SQL = psycopg.sql.Identifier, psycopg.sql.Literal, psycopg.sql.SQL  # noqa: N806
    with connect(owner_dsn, autocommit=True) as conn:
        applied = migrate(conn)
        conn.execute(SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(Ident(APP_ROLE),
                                                                      Literal(app_password(secret))))
        database = Ident(database_name(owner_dsn))
        conn.execute(SQL("GRANT CONNECT ON DATABASE {} TO {}").format(database, Ident(APP_ROLE)))
        for setting in fields(timeouts):
            value = getattr(timeouts, setting.name)
            try:
                conn.execute(SQL("ALTER ROLE {} IN DATABASE {} SET {} = {}").format(
                    Ident(APP_ROLE), database, Ident(setting.name), Literal(value)))
            except psycopg.errors.DataError as exc:
                raise ConfigError(f"{env_name(setting.name)}={value!r} is not a duration PostgreSQL reads "
                                  f"({str(exc).strip().splitlines()[0]}); give one such as 2s, 500ms or 1min"
                                  ) from None
    return applied


class Pool:
    """At most ``size`` connections of one DSN, handed out one per caller; a broken one is replaced.

    PostgreSQL ends connections under us (``pg_terminate_backend``, a restart or failover, an idle timeout): an
    idle connection it ended is not lent (``_ended``; on a thread also ``_answers``), and a read on the event loop
    whose connection died under it raises ``WouldWait``, so it is run again, once, on a thread with another
    connection (it wrote nothing). ``read_as`` runs a read on a thread once more the same way."""

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
            conn = self._idle_connection()
            if conn is None:
                before_waiting("opening a connection")
                conn = connect(self.dsn)
            yield conn
        except psycopg.errors.LockNotAvailable as exc:
            self._rollback(conn)
            if not may_wait():  # ``LOOP_LOCK_TIMEOUT`` ran out: run the read again where it may wait
                raise WouldWait("a table is locked") from exc
            raise
        except psycopg.OperationalError as exc:
            if conn is None or not connection_lost(exc, conn):
                self._rollback(conn)
                raise
            conn.close()  # never lent again (its pipeline may be half-read, though libpq has not noticed)
            if not may_wait():
                raise WouldWait("the connection to PostgreSQL was lost") from exc
            raise
        except BaseException:
            self._rollback(conn)
            raise
        finally:
            if conn is not None:
                if conn.broken or conn.closed or self._closed:
                    conn.close()
                elif conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE or self._rollback(conn):
                    self._idle.put(conn)
            self._slots.release()

    def _idle_connection(self) -> psycopg.Connection | None:
        """The most recently returned idle connection PostgreSQL has not ended, or None; ended ones are closed."""
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return None
            if not _ended(conn) and (not may_wait() or _answers(conn)):
                return conn
            conn.close()

    @staticmethod
    def _rollback(conn: psycopg.Connection | None) -> bool:
        """Roll back what the block left open; False (and the connection closed) when that fails."""
        if conn is None or conn.closed or conn.broken:
            return False
        try:
            conn.rollback()
        except psycopg.Error:
            conn.close()
            return False
        return True

    def stats(self) -> dict[str, int]:
        """The most connections the pool lends, those lent now and those idle (the server's metrics)."""
        size = self._slots._initial_value  # type: ignore[attr-defined]
        return {"size": size, "in_use": size - self._slots._value, "idle": self._idle.qsize()}  # type: ignore

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def _ended(conn: psycopg.Connection) -> bool:
    """Whether an idle connection can no longer be used. Between transactions the server sends nothing we ask
    for (no ``LISTEN`` on these connections), so anything to read means it ended the session (its FATAL message,
    then end of file) or at least that the connection is in a state not worth trusting: one ``select``, no round
    trip."""
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def connection_lost(exc: psycopg.OperationalError, conn: psycopg.Connection) -> bool:
    """Whether ``exc`` says the connection is gone (not a timeout or a lock the server reported): libpq's own
    failures have no SQLSTATE; the server's are class 08 (connection) or 57P (shut down, terminated)."""
    return conn.broken or conn.closed or exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))


def _answers(conn: psycopg.Connection) -> bool:
    """One round trip (an empty query), where a request may wait: a backend ``pg_terminate_backend`` has just
    signalled may not have written its goodbye yet (``_ended`` sees nothing), but it answers no query."""
    try:
        conn.execute("")
    except psycopg.Error:
        return False
    return True


@contextmanager
def tenant_transaction(conn: psycopg.Connection, tenant_id: int) -> Iterator[psycopg.Cursor]:
    """One transaction in which ``app.tenant_id`` is ``tenant_id`` (and nothing else is visible)."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("tenant_transaction must start a transaction of its own, not run inside another")
    with conn.transaction(), conn.cursor() as cur:
        act_as(cur, tenant_id)
        yield cur


def read_as(pool: Pool, tenant_id: int, read: Callable[[psycopg.Cursor], T]) -> T:
    """``read`` in a ``tenant_transaction`` of a pooled connection, run once more on another connection when
    PostgreSQL ended the first under it (a read: it may run twice). Where waiting is not allowed the pool raises
    ``WouldWait`` instead, and the caller runs it again on a thread."""
    for again in (False, True):
        lent: psycopg.Connection | None = None
        try:
            with pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
                lent = conn
                return read(cur)
        except psycopg.OperationalError as exc:
            if again or lent is None or not connection_lost(exc, lent):
                raise
    raise AssertionError("unreachable")


def act_as(cur: psycopg.Cursor, tenant_id: int) -> None:
    """Make ``tenant_id`` the tenant of the open transaction (until it ends or the next call): the ingest
    consumer acts for several tenants in one transaction, holding its claim on their jobs throughout."""
    cur.execute("SELECT set_config('app.tenant_id', %s, true)", (str(int(tenant_id)),))
