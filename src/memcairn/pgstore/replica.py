"""Read replicas: a streaming standby of an embedded cluster, and reading one's own writes from a standby.

``start_replica`` copies a running embedded cluster with ``pg_basebackup -R`` (the copy knows its primary and
starts as a hot standby) and starts it on its own port with the bundled ``pg_ctl``: a try-out of replication
on one machine, used by ``memcairn bench scaling``.

Read-your-writes: a standby replays the primary's write-ahead log a little behind it, so a client that reads
from it right after writing may not see its write. The primary answers a write with its WAL position after the
commit (``wal_position``); the client sends it back with its next read, and the read goes to the standby only
once the standby has replayed that far (``wait_replayed``, within a small budget), else to the primary. No
read then misses a write its client was told about, and reads of clients that wrote nothing lately (most)
never wait.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from memcairn.errors import ConfigError
from memcairn.pgstore.embedded import SUPERUSER, EmbeddedPostgres, _as_user, free_port


@dataclass
class Replica:
    """A running standby: its data folder, port and the primary's superuser password."""

    primary: EmbeddedPostgres
    data: Path
    port: int

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.primary.password}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        _pg_tool(self.primary, "pg_ctl", "-D", str(self.data), "stop", "-m", "fast", check=False)


def _bin_dir(primary: EmbeddedPostgres) -> Path:
    found = sorted((primary.root.resolve() / ".pg0" / "installation").glob("*/bin"))
    if not found:
        raise ConfigError(f"no PostgreSQL installation under {primary.root}: start the primary first")
    return found[-1]


def _pg_tool(primary: EmbeddedPostgres, tool: str, *args: str, check: bool = True) -> str:
    bin_dir = _bin_dir(primary)
    argv = ["env", f"LD_LIBRARY_PATH={bin_dir.parent / 'lib'}", f"PGPASSWORD={primary.password}",
            str(bin_dir / tool), *args]
    done = subprocess.run(_as_user(primary.user, argv), capture_output=True, text=True, cwd="/")
    if check and done.returncode != 0:
        raise ConfigError(f"{tool} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def start_replica(primary: EmbeddedPostgres, primary_port: int, folder: Path, *, port: int | None = None) -> Replica:
    """A hot standby of the running ``primary`` in ``folder`` (new; its parent must be reachable by the user
    PostgreSQL runs as), streaming from it over 127.0.0.1."""
    folder.mkdir(mode=0o700)
    if primary.user is not None:
        shutil.chown(folder, primary.user, primary.user)
    data = folder / "data"
    _pg_tool(primary, "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary_port), "-U", SUPERUSER,
             "-D", str(data), "-R", "-X", "stream", "-c", "fast")
    port = port or free_port()
    # the primary's settings (pg0 passes them on its command line, fsync off among them) and our own port
    _pg_tool(primary, "pg_ctl", "-D", str(data), "-o", f"-p {port} -F", "-l", str(folder / "standby.log"),
             "start", "-w")
    return Replica(primary, data, port)


def wal_position(conn: psycopg.Connection) -> str:
    """The primary's WAL insert position now: at or past every commit that has returned, also with
    ``synchronous_commit = off`` (where the commit record may not be written out yet, so the write position,
    ``pg_current_wal_lsn()``, can still be before it)."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def replayed(conn: psycopg.Connection, lsn: str) -> bool:
    """Whether the standby ``conn`` is connected to has replayed the primary's WAL up to ``lsn``."""
    row = conn.execute("SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)", (lsn,)).fetchone()
    return bool(row and row[0])


def wait_replayed(conn: psycopg.Connection, lsn: str, budget_s: float, poll_s: float = 0.001) -> bool:
    """Wait up to ``budget_s`` for the standby to replay ``lsn``; False when it did not (read the primary)."""
    deadline = time.monotonic() + budget_s
    while not replayed(conn, lsn):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
