"""Where the server's database is, and running the server in the foreground.

``--embedded``: the bundled PostgreSQL in ``$MEMCAIRN_HOME/postgres`` (its superuser's password in
``$MEMCAIRN_HOME/server/postgres-password``), database ``memcairn``; started if it is not running (reused if
a server killed with SIGKILL left it running) and stopped when the server stops; a ``keys`` command stops it
again only if it started it; it migrates at start (it owns its cluster). ``--database URL``: an existing
PostgreSQL. The URL should name the database's application role (``memcairn server migrate`` made it, or an
administrator did): the server then only checks that the schema is current, and needs no DDL rights. A URL of
the schema's owner still migrates at start and connects as the application role with a password derived from
the server secret, with a deprecation warning (deployments that start that way keep working through an
upgrade; the next step is to refuse). The server secret is ``$MEMCAIRN_HOME/server/secret``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.conninfo import make_conninfo

from memcairn.pgstore import db
from memcairn.pgstore.embedded import EmbeddedPostgres
from memcairn.pgstore.secret import load_or_create_password, load_or_create_secret, server_dir
from memcairn.wire.config import memcairn_home

DATABASE = "memcairn"
log = logging.getLogger("memcairn.server")


@contextmanager
def owner_database(home: Path, database_url: str | None, *, owns_cluster: bool = False) -> Iterator[str]:
    """The owner's connection string of the server's database, migrated.

    The embedded cluster is shared through a lock file, ``server/postgres.lock``: the server takes it
    exclusively to start the cluster (or take over one a SIGKILLed server left running), then holds it shared
    until it stops the cluster on exit (``owns_cluster``). A ``keys`` command either gets it exclusively (no
    server: it starts the cluster if needed and stops again only what it started) or shared (a server runs: it
    uses that server's cluster). So a server starting while a ``keys`` command runs waits for it, and a
    ``keys`` command never stops the cluster under a running server.

    Only the server (``owns_cluster``) sets the application role's password of a given database (to the one
    derived from the secret): a ``keys`` command must not change the password ``memcairn server migrate`` gave
    a server running with the role's own URL."""
    secret = load_or_create_secret(home)
    if database_url:
        if owns_cluster:
            db.prepare(database_url, secret)
        else:
            db.setup(database_url)
        yield database_url
        return
    cluster = EmbeddedPostgres(home / "postgres", password=load_or_create_password(home, "postgres-password"))
    lock = os.open(server_dir(home) / "postgres.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        stop_after = _lock_cluster(lock, cluster, server=owns_cluster)
        try:
            admin = cluster.start()
            with db.connect(admin) as conn:
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
            owner = make_conninfo(admin, dbname=DATABASE)
            db.prepare(owner, secret)
            if owns_cluster:
                fcntl.flock(lock, fcntl.LOCK_SH)  # started: keys commands may share it now
            yield owner
        finally:
            if stop_after:
                cluster.stop()
    finally:
        os.close(lock)  # releases the lock


def _lock_cluster(lock: int, cluster: EmbeddedPostgres, *, server: bool) -> bool:
    """Take the cluster's lock as the server or a ``keys`` command; True when the caller stops the cluster at
    its end."""
    if server:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return True
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(lock, fcntl.LOCK_SH)  # a server holds it (or is starting): wait, then use its cluster
            if cluster.info().get("running"):
                return False
            fcntl.flock(lock, fcntl.LOCK_UN)  # that server has stopped meanwhile: try again
            continue
        return not cluster.info().get("running")


APP_DATABASE_ENV = "MEMCAIRN_SERVER_APP_DATABASE"  # the app role's conninfo (without a derived password)
APP_DERIVED_ENV = "MEMCAIRN_SERVER_APP_PASSWORD_DERIVED"  # "1": add the password derived from the server secret


APP_CONNECTIONS_ENV = "MEMCAIRN_SERVER_CONNECTIONS"  # a worker process's pool size, from its parent
SPARE_THREADS = 4  # request threads beyond the pool: routes that need no connection (health, OpenAPI, SSE waits)


def default_connections(workers: int = 1) -> int:
    """Connections a server process keeps to PostgreSQL: four per core over all ``workers`` processes, 8 to 32 for
    one process, at least 4 each for several. More only contend for the same cores (backends, and request threads
    handing the GIL to each other): on 2 cores, 8 connections and 12 request threads answered 50 clients' fused
    searches with a p95 of 122–159 ms in three runs, 16 connections and 40 threads (the previous default, anyio's)
    218–286 ms in three runs alternating with them."""
    share = 4 * (os.cpu_count() or 2) // max(1, workers)
    return min(32, max(8 if workers <= 1 else 4, share))


# How long a thread may hold the interpreter lock while another waits for it (Python's default: 5 ms). Reads run
# on the event loop (``server/http.py``) while a read that had to wait finishes on a thread; with the default the
# thread gets the lock back only every 5 ms. First searches of 100 projects from 50 clients (each project read
# whole on a thread) had a p95 of 249-271 ms with the default (2 runs) and 201-224 ms with 1 ms (3 runs).
SWITCH_INTERVAL = 0.001


def build_app(home: Path, app_conninfo: str, *, pool_size: int | None = None, derived: bool = True) -> Any:
    """The API over a pool of application role connections (the password derived from the server secret when
    ``derived``, else as ``app_conninfo`` or libpq's environment gives it) and
    the bundled model, loaded now rather than on the first request, and the task that embeds the backlog of
    new items (``server/embedding.py``) and the consumers of the ingest queue (``server/ingest.py``), started with
    the app and stopped with it. Request handlers run on the pool's size plus ``SPARE_THREADS`` threads: a read
    holds its connection throughout, so more threads would only wait for one."""
    from memcairn.pgstore.items import TeamStore
    from memcairn.server.app import ServerState, make_app
    from memcairn.server.embedding import EmbeddingTask
    from memcairn.server.ingest import IngestConsumers
    from memcairn.vectors.embedder import load_embedder

    secret = load_or_create_secret(home)
    sys.setswitchinterval(SWITCH_INTERVAL)
    pool_size = pool_size or default_connections()
    pool = db.Pool(make_conninfo(app_conninfo, password=db.app_password(secret)) if derived else app_conninfo,
                   size=pool_size)
    embedder: Any = load_embedder()
    embedder.embed_query("warm up")
    team = TeamStore(pool, embedder)
    # the backlog's own single-threaded model, so a long batch never holds up a query's embedding
    task = EmbeddingTask(team, load_embedder(threads=1))
    state = ServerState(pool=pool, team=team, secret=secret)
    consumers = IngestConsumers(team, state.queued)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = pool_size + SPARE_THREADS
        task.start()
        consumers.start()
        yield
        consumers.stop()
        task.stop()
        pool.close()

    return make_app(state, lifespan=lifespan)


def worker_app() -> Any:
    """The app of one of several uvicorn worker processes (``--workers``): the parent migrated the database
    and passes where it is in ``MEMCAIRN_SERVER_APP_DATABASE``."""
    return build_app(memcairn_home(), os.environ[APP_DATABASE_ENV], pool_size=int(os.environ[APP_CONNECTIONS_ENV]),
                     derived=os.environ.get(APP_DERIVED_ENV) == "1")


def default_workers() -> int:
    """Server processes: one per core, at most 4. One process's Python runs on one core at a time, and with the
    projects' copies in memory (``pgstore/project_copies.py``) a search's work is mostly the server's: on 2 cores,
    50 clients' fused searches of 100k memories answered 240-260 requests/s (p95 222-271 ms) from one process and
    436-448 (p95 143-155 ms) from two."""
    return max(1, min(4, os.cpu_count() or 1))


def http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol as ``http="auto"`` picks it (httptools when installed, else h11), with read
    deadlines: a request head or body trickled in holds no connection (answered 408 and closed)."""
    try:
        from memcairn.server.http_protocol import ServerProtocol
    except ImportError:
        from memcairn.worker.http_protocol import BoundedHeadProtocol

        return BoundedHeadProtocol
    return ServerProtocol


def serve(home: Path, *, database_url: str | None, host: str, port: int, workers: int | None = None,
          connections: int | None = None, tls: dict[str, str] | None = None) -> int:
    """Run the API in the foreground until SIGINT or SIGTERM, in one process or ``workers`` processes; with
    ``tls`` (``server/tls.py``: uvicorn's ssl options) over HTTPS, every process with the certificate."""
    workers = workers or default_workers()
    import uvicorn

    from memcairn.server.processes import run_processes

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with server_database(home, database_url) as (app_conninfo, derived):
        common: dict[str, Any] = dict(host=host, port=port, log_config=None, access_log=False, lifespan="on",
                                      server_header=False, proxy_headers=False, timeout_graceful_shutdown=5,
                                      http=http_protocol(), **(tls or {}))
        log.info("memcairn server on %s://%s:%d/v1 (database %s, %d worker%s)", "https" if tls else "http", host,
                 port,
                 "embedded" if database_url is None else "given", workers, "s" if workers > 1 else "")
        if workers > 1:  # processes of their own, each on a socket of its own (``server/processes.py``)
            os.environ[APP_DATABASE_ENV] = app_conninfo
            os.environ[APP_CONNECTIONS_ENV] = str(connections or default_connections(workers))
            os.environ[APP_DERIVED_ENV] = "1" if derived else "0"
            from memcairn.server.metrics import share_across_processes

            share_across_processes()  # /metrics then counts the requests of every process
            return run_processes(host, port, workers, common)
        config = uvicorn.Config(build_app(home, app_conninfo, pool_size=connections, derived=derived), **common)
        # uvicorn raises the signal that stopped it again once it has shut down: as an exception here, so the
        # embedded PostgreSQL is stopped below instead of the process ending first.
        previous = signal.signal(signal.SIGTERM, _exit_on_signal)
        try:
            uvicorn.Server(config).run()
        except (SystemExit, KeyboardInterrupt):
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
    return 0


@contextmanager
def server_database(home: Path, database_url: str | None) -> Iterator[tuple[str, bool]]:
    """The application role's conninfo the server connects with, and whether its password is the derived one:
    the given URL itself when it names a role that may not migrate (the schema must be current), else the
    database's application role after migrating as the owner (``--embedded``; an owner's URL, deprecated)."""
    if database_url and not db.may_migrate(database_url):
        db.check_current(database_url)
        yield database_url, False
        return
    if database_url:
        log.warning("deprecated: --database names the schema's owner, so the server migrates at start and needs DDL "
                    "rights; run `memcairn server migrate --database OWNER_URL` (once per upgrade) and start the "
                    "server with the application role's URL it prints")
    with owner_database(home, database_url, owns_cluster=True) as owner:
        yield make_conninfo(db.app_conninfo(owner, load_or_create_secret(home)), password=""), True


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)
