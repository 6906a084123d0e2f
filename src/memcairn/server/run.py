"""Where the server's database is, and running the server in the foreground.

``--embedded``: the bundled PostgreSQL in ``$MEMCAIRN_HOME/postgres`` (its superuser's password in
``$MEMCAIRN_HOME/server/postgres-password``), database ``memcairn``; started if it is not running (reused if
a server killed with SIGKILL left it running) and stopped when the server stops; a ``keys`` command stops it
again only if it started it. ``--database URL``: an existing PostgreSQL, the URL naming a role that owns (or
may create) the schema; the server itself then connects as ``memcairn_app``. Either way the migrations run
first and the server secret is ``$MEMCAIRN_HOME/server/secret``.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.conninfo import make_conninfo

from memcairn.pgstore import db
from memcairn.pgstore.embedded import EmbeddedPostgres
from memcairn.pgstore.items import TeamStore
from memcairn.pgstore.secret import load_or_create_password, load_or_create_secret

DATABASE = "memcairn"
log = logging.getLogger("memcairn.server")


@contextmanager
def owner_database(home: Path, database_url: str | None, *, owns_cluster: bool = False) -> Iterator[str]:
    """The owner's connection string of the server's database, migrated; the embedded cluster is started when
    needed and stopped on exit if this call started it, or always when ``owns_cluster`` (the server: a cluster
    it found running was left by a server killed before it could stop it)."""
    secret = load_or_create_secret(home)
    if database_url:
        db.prepare(database_url, secret)
        yield database_url
        return
    cluster = EmbeddedPostgres(home / "postgres", password=load_or_create_password(home, "postgres-password"))
    was_running = bool(cluster.info().get("running"))
    admin = cluster.start()
    try:
        with db.connect(admin) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        owner = make_conninfo(admin, dbname=DATABASE)
        db.prepare(owner, secret)
        yield owner
    finally:
        if owns_cluster or not was_running:
            cluster.stop()


def serve(home: Path, *, database_url: str | None, host: str, port: int, pool_size: int = 16) -> int:
    """Run the API in the foreground until SIGINT or SIGTERM."""
    import uvicorn

    from memcairn.server.app import ServerState, make_app
    from memcairn.vectors.embedder import load_embedder

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with owner_database(home, database_url, owns_cluster=True) as owner:
        secret = load_or_create_secret(home)
        pool = db.Pool(db.app_conninfo(owner, secret), size=pool_size)
        embedder: Any = load_embedder()
        embedder.embed_query("warm up")  # the model loads now, not on the first request
        app = make_app(ServerState(pool=pool, team=TeamStore(pool, embedder), secret=secret))
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off",
                                server_header=False, proxy_headers=False, timeout_graceful_shutdown=5)
        log.info("memcairn server on http://%s:%d/v1 (database %s)", host, port,
                 "embedded" if database_url is None else "given")
        # uvicorn raises the signal that stopped it again once it has shut down: as an exception here, so the
        # embedded PostgreSQL is stopped below instead of the process ending first.
        previous = signal.signal(signal.SIGTERM, _exit_on_signal)
        try:
            uvicorn.Server(config).run()
        except (SystemExit, KeyboardInterrupt):
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            pool.close()
    return 0


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)
