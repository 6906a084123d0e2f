"""The sqlite-vec sidecar's file: its tables, opening and set-up (schema 1 to 2 included), and following a file
another process replaced. Mixed into ``SqliteVecIndex`` (the ``sqlite_vec`` module doc describes the file)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
import sqlite_vec

from memcairn.core.errors import VectorIndexUnavailableError
from memcairn.vectors.base import model_mismatch

log = logging.getLogger("memcairn.vectors.sqlite_vec")  # the sidecar's one logger, whichever module speaks

SCHEMA_VERSION = 2
# Bytes of the file SQLite memory-maps. Every page a read touches then counts in the worker's resident
# memory (file-backed, shared with the OS page cache, reclaimable, yet that is what `top` and the worker
# bench show), and rowid seeks through the page cache are fast enough, so the default leaves mmap off.
MMAP_SIZE = 0

_SUFFIXES = ("", "-wal", "-shm", "-journal")

_TABLES_SQL = (
    """
    CREATE TABLE IF NOT EXISTS mc_docs(
        rowid INTEGER PRIMARY KEY,
        project TEXT NOT NULL,
        doc_id TEXT NOT NULL,
        kind TEXT,
        sqlite_id INTEGER,
        document TEXT NOT NULL,
        metadata TEXT NOT NULL,
        UNIQUE(doc_id, project)
    )
    """,
    "CREATE INDEX IF NOT EXISTS mc_docs_bootstrap ON mc_docs(project, kind, sqlite_id)",
    "CREATE INDEX IF NOT EXISTS mc_docs_sqlite_id ON mc_docs(sqlite_id)",
    "CREATE TABLE IF NOT EXISTS mc_embeddings(rowid INTEGER PRIMARY KEY, embedding BLOB NOT NULL)",
)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def remove_files(path: Path) -> None:
    """Delete the index file and its WAL/SHM companions (used by a rebuild of a broken mirror)."""
    for suffix in _SUFFIXES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class SidecarFileMixin:
    path: Path
    dimension: int
    model: str | None
    mmap_size: int
    _lock: threading.RLock
    _conn: apsw.Connection | None
    _file: tuple[int, int] | None
    _closed: bool
    _drop_scan: Callable[..., None]

    def _unavailable(self, exc: BaseException | str) -> VectorIndexUnavailableError:
        return VectorIndexUnavailableError(
            f"vector index {self.path} cannot be used ({exc}); "
            "`memcairn sync rebuild` recreates it from the SQLite store"
        )

    def _open(self) -> tuple[apsw.Connection, tuple[int, int] | None]:
        """A set-up connection to the file at ``path`` and that file's identity (device, inode).

        The identity is read before the open: read after it (and after the set-up, which can wait on another
        process's locks), it could be a newer file's that replaced the one opened, which would then never be
        let go. Read before, a file replaced in between costs one more reopen at the next call."""
        before = _identity(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = apsw.Connection(str(self.path))
        except (OSError, apsw.Error) as exc:
            raise self._unavailable(exc) from exc
        try:
            conn.enable_load_extension(True)
            conn.load_extension(sqlite_vec.loadable_path())
            conn.enable_load_extension(False)
            self._setup(conn)
        except apsw.Error as exc:
            conn.close()
            raise self._unavailable(exc) from exc
        except VectorIndexUnavailableError:
            conn.close()
            raise
        return conn, before if before is not None else _identity(self.path)  # None: created here, just now

    def _follow_replacement(self) -> None:
        """Reopen when another file now sits at ``path`` (``memcairn sync rebuild`` of a corrupt index, run by
        another process, deletes the file and writes a new one): without this a long-lived worker kept reading
        and writing the deleted file until it restarted. A missing file is left alone (a rebuild between
        its delete and its create, or a file removed by hand: the open one still answers). Under ``_lock``."""
        now = _identity(self.path)
        if self._conn is not None and (now is None or now == self._file):
            return
        if self._conn is not None:  # a new file: let go of the old one (a failed reopen is retried next call)
            log.info("vector index %s was replaced by another process: reopening it", self.path)
            self._drop_scan()
            old, self._conn = self._conn, None
            try:
                old.close()
            except apsw.Error:
                pass
        self._conn, self._file = self._open()

    @contextmanager
    def _db(self) -> Iterator[apsw.Connection]:
        with self._lock:
            if self._closed:
                raise VectorIndexUnavailableError(f"vector index {self.path} is closed")
            self._follow_replacement()
            try:
                yield self._conn
            except apsw.Error as exc:
                raise self._unavailable(exc) from exc

    def _setup(self, conn: apsw.Connection) -> None:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA mmap_size = {self.mmap_size}")
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS mc_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            meta = dict(conn.execute("SELECT key, value FROM mc_meta"))
            if "dimension" in meta:
                stored = int(meta["dimension"])
                if stored != self.dimension:
                    raise VectorIndexUnavailableError(
                        f"vector index {self.path} holds {stored}-d vectors but the embedder gives "
                        f"{self.dimension}-d ones; `memcairn sync rebuild` recreates it"
                    )
                if self.model and meta.get("model", self.model) != self.model:
                    raise model_mismatch(f"vector index {self.path}", meta["model"], self.model)
                if int(meta.get("schema", SCHEMA_VERSION)) > SCHEMA_VERSION:
                    raise VectorIndexUnavailableError(
                        f"vector index {self.path} was written by a newer memcairn (schema "
                        f"{meta['schema']}); `memcairn sync rebuild` recreates it"
                    )
            for sql in _TABLES_SQL:
                conn.execute(sql)
            moved = int(meta.get("schema", SCHEMA_VERSION)) < 2 and self._from_vec0(conn)
            if "dimension" not in meta or int(meta.get("schema", SCHEMA_VERSION)) < SCHEMA_VERSION:
                self._write_meta(conn)
            elif self.model and "model" not in meta:  # written before models were recorded: this one from now
                conn.execute("INSERT INTO mc_meta(key, value) VALUES ('model', ?)", (self.model,))
        if moved:  # the vec0 table's pages are free now: give them back to the disk (once)
            started = time.perf_counter()
            conn.execute("VACUUM")
            log.info("vector index %s compacted in %.1f s", self.path, time.perf_counter() - started)

    def _write_meta(self, conn: apsw.Connection) -> None:
        conn.executemany(
            "INSERT OR REPLACE INTO mc_meta(key, value) VALUES (?, ?)",
            [("schema", str(SCHEMA_VERSION)), ("dimension", str(self.dimension)), ("metric", "cosine"),
             *([("model", self.model)] if self.model else [])],
        )


    def _from_vec0(self, conn: apsw.Connection) -> bool:
        """Schema 1 -> 2 (``sqlite_vec`` module doc), inside the caller's transaction; True when vectors were
        moved."""
        has_vec0 = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'mc_vectors'").fetchone()
        if not has_vec0:
            return False
        started = time.perf_counter()
        conn.execute("INSERT OR REPLACE INTO mc_embeddings(rowid, embedding) SELECT rowid, embedding FROM mc_vectors")
        conn.execute("DROP TABLE mc_vectors")
        moved = conn.execute("SELECT count(*) FROM mc_embeddings").fetchone()[0]
        log.info("vector index %s: %d vectors moved from the vec0 table to mc_embeddings in %.1f s (schema 2)",
                 self.path, moved, time.perf_counter() - started)
        return True
