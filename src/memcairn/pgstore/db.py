"""Connections: the owner's (migrations, the app role's password, administration) and the application's
(the database's own role, ``memcairn_app_<database>`` unless named, bound by row-level security), a small pool
of the latter, and tenant transactions.

Every tenant-scoped piece of work runs in ``tenant_transaction``: it enters the tenant through the owner's
functions (``act_as``, migration 11), which record it for that transaction alone, so a pooled connection never
carries one request's tenant into the next. Connections are in autocommit mode, so each ``transaction()`` block is
a real transaction (never a savepoint inside one that an earlier statement opened implicitly, which would keep the
entry alive after the block).

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
import re
import secrets
import select
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from dataclasses import field as dc_field
from types import MappingProxyType
from typing import TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from memcairn.core.errors import ConfigError, MemcairnError, SchemaTooNewError, WouldWait
from memcairn.pgstore.migrations import LOCK_KEY, applied_versions, migrate
from memcairn.pgstore.schema import APP_GRANTS, APP_ROLE, LATEST, for_role
from memcairn.pgstore.waits import may_wait

T = TypeVar("T")
ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
LOOP_LOCK_TIMEOUT = "50ms"  # a read's lock wait on the event loop before it goes to a thread (see above)
CONNECT_SECONDS = 10  # libpq's connect_timeout, for every connection
WAIT_SECONDS = 30.0  # the longest a request on a thread waits for a pooled connection (then 503)
LOOP_GETCONN_SECONDS = 0.001  # on the event loop: an idle connection another thread took just before (then a thread)


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
    """The application role's password when an owner's URL starts the server (``--embedded``, or ``--database``
    of an owner), derived from the server secret (every process of a server agrees)."""
    return hmac.new(secret, b"memcairn postgres application role", hashlib.sha256).hexdigest()


def default_app_role(database: str) -> str:
    """``memcairn_app_<database>``: other characters than lowercase letters, digits and ``_`` become ``_``, and a
    name so changed, or longer than PostgreSQL's 63 bytes, ends with a digest of the database's own name (two
    databases never share a role)."""
    tail = re.sub(r"[^a-z0-9_]", "_", database.lower())
    name = f"{APP_ROLE}_{tail}"
    if tail != database or len(name) > 63:
        name = f"{name[:54]}_{hashlib.sha256(database.encode()).hexdigest()[:8]}"
    return name


def checked_role(name: str) -> str:
    if not ROLE_NAME.fullmatch(name):
        raise ConfigError(f"{name!r} is not a role name memcairn uses: lowercase letters, digits and _, at most 63, "
                          "not starting with a digit")
    return name


def recorded_role(conn: psycopg.Connection) -> str | None:
    """The application role ``migrate`` recorded in this database (migration 9), if any."""
    if not conn.execute("SELECT to_regclass('app_role') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
        return None
    row = conn.execute("SELECT name FROM app_role").fetchone()
    return str(row[0]) if row else None


def app_conninfo(owner_dsn: str, secret: bytes) -> str:
    """The application role's connection string, with the password an owner's URL gives it (``app_password``)."""
    with connect(owner_dsn) as conn:
        role = recorded_role(conn) or default_app_role(database_name(owner_dsn))
    return make_conninfo(owner_dsn, user=role, password=app_password(secret))


def database_name(dsn: str) -> str:
    return str(conninfo_to_dict(dsn).get("dbname") or "postgres")


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=CONNECT_SECONDS)
    except psycopg.OperationalError as exc:
        where = conninfo_to_dict(dsn)
        raise ConfigError(f"cannot connect to PostgreSQL at {where.get('host', 'localhost')}:{where.get('port', 5432)}"
                          f" database {where.get('dbname', '?')!r} as {where.get('user', '?')!r}: "
                          f"{str(exc).strip().splitlines()[-1]}") from None


@dataclass
class Prepared:
    """What ``setup`` did: the migrations applied, the application role, the password it made for a role it
    created (``migrate`` shows it once; None otherwise), and what the owner may not do and an administrator must."""

    applied: list[int]
    role: str
    password: str | None = None
    notes: list[str] = dc_field(default_factory=list)


def prepare(owner_dsn: str, secret: bytes, timeouts: Timeouts | None = None) -> list[int]:
    """Migrate the database and let its application role log in with the password derived from ``secret``
    (an owner's URL starting the server) and its time limits; returns the migrations applied."""
    return setup(owner_dsn, password=app_password(secret), timeouts=timeouts).applied


def setup(owner_dsn: str, *, app_role: str | None = None, password: str | None = None,
          timeouts: Timeouts | None = None) -> Prepared:
    """Migrate the database of ``owner_dsn`` (DDL, row-level security) and set up its application role: created
    when missing (with ``password``, else a new random one returned), its password set to ``password`` when given,
    granted what the server needs, its time limits (``Timeouts.from_env()`` unless given) set in this database.

    The owner needs no superuser rights: without CREATEROLE an administrator creates the role beforehand (the
    error says how) and this only grants; time limits it may not set are returned as notes."""
    timeouts = timeouts or Timeouts.from_env()
    database = database_name(owner_dsn)
    with connect(owner_dsn, autocommit=True) as conn:
        # one setup of a database at a time (the role is made once); ends with the connection
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (LOCK_KEY,))
        user = conn.info.user
        role = checked_role(app_role or recorded_role(conn) or default_app_role(database))
        made = _ensure_role(conn, role, password, user)
        try:
            applied = migrate(conn, role)
            conn.execute("INSERT INTO app_role (name) VALUES (%s) ON CONFLICT (only_row) DO UPDATE SET name = "
                         "EXCLUDED.name", (role,))
            conn.execute(for_role(APP_GRANTS, role))  # type: ignore[arg-type] - our own constant
            forget_dead_entries(conn)
        except psycopg.errors.InsufficientPrivilege as exc:
            if "extension" in str(exc):  # pgvector is no trusted extension: a superuser (or the console) adds it
                raise ConfigError(f"{user!r} may not add the extensions memcairn needs ({_first_line(exc)}): have "
                                  f"an administrator run  CREATE EXTENSION IF NOT EXISTS vector; CREATE EXTENSION "
                                  f"IF NOT EXISTS btree_gin;  in database {database!r} (on a managed service: "
                                  "allow them there), then run memcairn server migrate again") from None
            raise ConfigError(f"{user!r} may not create memcairn's schema in database {database!r} "
                              f"({_first_line(exc)}): migrate as the role that owns the database or its schema "
                              "public (memcairn server migrate --database postgresql://OWNER@HOST/DB)") from None
        notes = []
        Ident, Literal, SQL = psycopg.sql.Identifier, psycopg.sql.Literal, psycopg.sql.SQL  # noqa: N806
        try:
            conn.execute(SQL("GRANT CONNECT ON DATABASE {} TO {}").format(Ident(database), Ident(role)))
        except psycopg.errors.InsufficientPrivilege:
            notes.append(f"GRANT CONNECT ON DATABASE {database} TO {role};")
        for setting in fields(timeouts):
            value = getattr(timeouts, setting.name)
            statement = SQL("ALTER ROLE {} IN DATABASE {} SET {} = {}").format(
                Ident(role), Ident(database), Ident(setting.name), Literal(value))
            try:
                conn.execute(statement)
            except psycopg.errors.DataError as exc:
                raise ConfigError(f"{env_name(setting.name)}={value!r} is not a duration PostgreSQL reads "
                                  f"({_first_line(exc)}); give one such as 2s, 500ms or 1min") from None
            except psycopg.errors.InsufficientPrivilege:
                notes.append(statement.as_string(conn) + ";")
    return Prepared(applied, role, made, notes)


def forget_dead_entries(conn: psycopg.Connection) -> int:
    """Delete the tenant entries (migration 11) of backends that are gone, as the owner; how many went. Such a row
    grants nothing (no transaction has its backend and id again), and a backend's next entry replaces its own, so
    this only keeps the table as small as the backends alive: every ``setup`` (each server start) runs it."""
    return conn.execute("DELETE FROM tenant_entries WHERE pid NOT IN (SELECT pid FROM pg_catalog.pg_stat_activity"
                        " WHERE pid IS NOT NULL)").rowcount


def _ensure_role(conn: psycopg.Connection, role: str, password: str | None, user: str) -> str | None:
    """Create ``role`` when missing (returning the password it made when none was given), else set ``password``
    when given; a clear error when ``user`` may do neither."""
    Ident, Literal, SQL = psycopg.sql.Identifier, psycopg.sql.Literal, psycopg.sql.SQL  # noqa: N806
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if exists and password is None:
        return None
    made = None if password else secrets.token_urlsafe(24)
    verb = "ALTER ROLE {} WITH LOGIN PASSWORD {}" if exists else \
        "CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"
    try:
        conn.execute(SQL(verb).format(Ident(role), Literal(password or made)))
    except psycopg.errors.InsufficientPrivilege as exc:
        if exists:
            raise ConfigError(f"{user!r} may not set the password of the application role {role!r} "
                              f"({_first_line(exc)}): start the server with that role's own URL instead, "
                              f"memcairn server --database postgresql://{role}:PASSWORD@HOST/DB (run "
                              "memcairn server migrate --database OWNER_URL after each upgrade)") from None
        raise ConfigError(f"the application role {role!r} does not exist and {user!r} may not create roles "
                          f"({_first_line(exc)}): have an administrator run  CREATE ROLE {role} LOGIN PASSWORD "
                          "'...';  then run memcairn server migrate again") from None
    return made


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def may_migrate(dsn: str) -> bool:
    """Whether ``dsn``'s role may migrate its database: it owns the schema (or is a member of its owner, or a
    superuser), or there is no schema yet."""
    with connect(dsn) as conn:
        row = conn.execute("SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class "
                           "WHERE oid = to_regclass('schema_migrations')").fetchone()
    return row is None or bool(row[0])


def check_current(app_dsn: str) -> None:
    """Refuse to serve a schema older or newer than this code from the application role's URL (which cannot
    migrate), naming the command that can."""
    with connect(app_dsn) as conn:
        try:
            newest = max(applied_versions(conn), default=0)
        except psycopg.errors.InsufficientPrivilege:  # migrated by a memcairn that did not grant this
            newest = 0
    if newest > LATEST:
        raise SchemaTooNewError(f"the database's schema is version {newest}, newer than this memcairn knows "
                                f"({LATEST}): upgrade memcairn")
    if newest < LATEST:
        raise ConfigError(f"the database's schema is version {newest} and this memcairn needs {LATEST}: run "
                          "memcairn server migrate --database postgresql://OWNER@HOST/DB first (the application "
                          "role may not change the schema)")


class Pool:
    """``size`` connections of one DSN (psycopg_pool's ``ConnectionPool``, opened now and kept open), handed out
    one per caller; a broken one is replaced in the background (psycopg_pool's reconnect, with back-off while
    PostgreSQL cannot be reached). A caller on a thread waits at most ``timeout`` seconds for one (then
    ``PoolTimeout``, an ``OperationalError``: the request is answered 503).

    PostgreSQL ends connections under us (``pg_terminate_backend``, a restart or failover, an idle timeout): a
    connection is checked before it is lent (``_usable``: no goodbye waiting to be read, and on a thread an empty
    query answered, ``ConnectionPool.check_connection``) and a dead one is closed and replaced. The check is ours
    rather than the pool's ``check=`` callback, which sleeps a second or more after each failed check: on the event
    loop that would stall every request of the process. A read on the event loop whose connection died under it
    raises ``WouldWait``, so it is run again, once, on a thread with another connection (it wrote nothing);
    ``reading`` runs a read on a thread once more the same way."""

    def __init__(self, dsn: str, size: int = 8, *, timeout: float = WAIT_SECONDS) -> None:
        self.dsn = dsn
        self.size = size
        self._pool: ConnectionPool[psycopg.Connection] = ConnectionPool(
            dsn, min_size=size, max_size=size, timeout=timeout, open=True, name="memcairn",
            kwargs={"autocommit": True, "connect_timeout": CONNECT_SECONDS})
        self._lent = 0
        self._counting = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection for the block; where waiting is not allowed (``waits.no_waiting``), only one that is
        open and idle now (else ``WouldWait``)."""
        conn = self._lend()
        try:
            yield conn
        except psycopg.errors.LockNotAvailable as exc:
            _rollback(conn)
            if not may_wait():  # ``LOOP_LOCK_TIMEOUT`` ran out: run the read again where it may wait
                raise WouldWait("a table is locked") from exc
            raise
        except psycopg.OperationalError as exc:
            if not connection_lost(exc, conn):
                _rollback(conn)
                raise
            conn.close()  # never lent again (its pipeline may be half-read, though libpq has not noticed)
            if not may_wait():
                raise WouldWait("the connection to PostgreSQL was lost") from exc
            raise
        except BaseException:
            _rollback(conn)
            raise
        finally:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                _rollback(conn)  # what the block left open (psycopg_pool would too, with a warning)
            self._give_back(conn)

    def _lend(self) -> psycopg.Connection:
        """A pooled connection that passed ``_usable``; dead ones are closed and given back (the pool replaces
        them). Where waiting is not allowed, ``WouldWait`` unless one is idle now."""
        waits = may_wait()
        while True:
            if not waits and not self._pool.get_stats().get("pool_available"):
                raise self._would_wait()
            try:
                conn = self._pool.getconn(None if waits else LOOP_GETCONN_SECONDS)
            except PoolTimeout:
                if waits:
                    raise
                raise self._would_wait() from None
            with self._counting:
                self._lent += 1
            if _usable(conn, round_trip=waits):
                return conn
            conn.close()
            self._give_back(conn)

    def _would_wait(self) -> WouldWait:
        if self._lent < self.size:  # a connection is being opened (at the start, or replacing a dead one)
            return WouldWait("opening a connection")
        return WouldWait("every connection of the pool is in use")

    def _give_back(self, conn: psycopg.Connection) -> None:
        with self._counting:
            self._lent -= 1
        self._pool.putconn(conn)  # a closed or broken one is replaced; after ``close`` it is closed

    def stats(self) -> dict[str, int]:
        """The most connections the pool lends, those lent now, those idle, and the callers waiting for one (the
        server's metrics)."""
        stats = self._pool.get_stats()
        return {"size": self.size, "in_use": self._lent, "idle": stats.get("pool_available", 0),
                "waiting": stats.get("requests_waiting", 0)}

    def close(self) -> None:
        self._pool.close()


def _rollback(conn: psycopg.Connection) -> bool:
    """Roll back what the block left open; False (and the connection closed) when that fails."""
    if conn.closed or conn.broken:
        return False
    try:
        conn.rollback()
    except psycopg.Error:
        conn.close()
        return False
    return True


def _usable(conn: psycopg.Connection, *, round_trip: bool) -> bool:
    """Whether a connection about to be lent still works: PostgreSQL has not said goodbye on it (``_ended``) and,
    with ``round_trip`` (where a request may wait), it answers an empty query, since a backend
    ``pg_terminate_backend`` has just signalled may not have written its goodbye yet."""
    if _ended(conn):
        return False
    if not round_trip:
        return True
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True


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


def reading(pool: Pool, read: Callable[[psycopg.Connection], T]) -> T:
    """``read`` on a pooled connection, run once more on another when PostgreSQL ended the first under it. Only
    for work that writes nothing: a write whose connection died may have committed. Where waiting is not allowed
    the pool raises ``WouldWait`` instead, and the caller runs it again on a thread."""
    for again in (False, True):
        lent: psycopg.Connection | None = None
        try:
            with pool.connection() as conn:
                lent = conn
                return read(conn)
        except psycopg.OperationalError as exc:
            if again or lent is None or not connection_lost(exc, lent):
                raise
    raise AssertionError("unreachable")


class Unauthorized(MemcairnError):
    """No key, an unknown, revoked or expired key (HTTP 401)."""


# The keys this context was sent, as tenant id -> the key's HMAC digest: set when a request's key is checked
# (``keys.authenticate_in``), so every tenant transaction of the request enters its tenant with that key.
_KEYS: ContextVar[Mapping[int, str]] = ContextVar("memcairn_tenant_keys", default=MappingProxyType({}))


def hold_key(tenant_id: int, key_digest: str, *, alone: bool = True) -> None:
    """Act for ``tenant_id`` with the key of ``key_digest`` in this context from now on; ``alone``: forget the
    keys it held before (a request holds one)."""
    held = {} if alone else dict(_KEYS.get())
    _KEYS.set({**held, int(tenant_id): key_digest})


@contextmanager
def holding_key(tenant_id: int, key_digest: str) -> Iterator[None]:
    """``hold_key`` for the block alone (work of a request that runs outside its context: a stream's polls)."""
    token = _KEYS.set({int(tenant_id): key_digest})
    try:
        yield
    finally:
        _KEYS.reset(token)


def forget_keys() -> None:
    _KEYS.set({})


@contextmanager
def tenant_transaction(conn: psycopg.Connection, tenant_id: int) -> Iterator[psycopg.Cursor]:
    """One transaction that acts for ``tenant_id`` (``act_as``; nothing else is visible)."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("tenant_transaction must start a transaction of its own, not run inside another")
    with conn.transaction(), conn.cursor() as cur:
        act_as(cur, tenant_id)
        yield cur


def read_as(pool: Pool, tenant_id: int, read: Callable[[psycopg.Cursor], T]) -> T:
    """``read`` in a ``tenant_transaction`` of a pooled connection, run once more on another connection when
    PostgreSQL ended the first under it (``reading``: a read may run twice)."""

    def in_tenant(conn: psycopg.Connection) -> T:
        with tenant_transaction(conn, tenant_id) as cur:
            return read(cur)

    return reading(pool, in_tenant)


def act_as(cur: psycopg.Cursor, tenant_id: int) -> None:
    """Make ``tenant_id`` the tenant of the open transaction (until it ends or the next call). With a key of that
    tenant held in this context (``hold_key``) the owner's ``memcairn_enter_tenant`` enters it (Unauthorized when
    the key is no longer valid); without one only the owner may (the command line): the application role is
    refused. The ingest consumer and the embedding task enter through what they hold instead (``enter_by``)."""
    key_digest = _KEYS.get().get(int(tenant_id))
    if key_digest is not None:
        row = cur.execute("SELECT tenant_id, entered FROM memcairn_enter_tenant(%s)", (key_digest,)).fetchone()
        if row is None or not row[1] or row[0] != tenant_id:
            raise Unauthorized("the API key is no longer valid")
        return
    cur.execute("SELECT memcairn_record_entry(%s, NULL, NULL)", (int(tenant_id),))


def enter_by(cur: psycopg.Cursor, tenant_id: int, query: str, params: Sequence[object]) -> bool:
    """Enter ``tenant_id`` through one of the owner's functions for the work across tenants (``query`` selects the
    tenant it entered, NULL for none); whether it did. Refuses a function that entered another tenant."""
    row = cur.execute(query, params).fetchone()  # type: ignore[arg-type] - the callers' constants
    entered = None if row is None or row[0] is None else int(row[0])
    if entered is not None and entered != tenant_id:
        raise RuntimeError(f"entered tenant {entered} where {tenant_id} was meant")
    return entered is not None
