"""The default mirror: a sidecar SQLite file (WAL) with a sqlite-vec ``vec0`` table.

Schema (one file, ``<home>/vectors.sqlite``)::

    mc_meta(key TEXT PRIMARY KEY, value TEXT)          -- schema, dimension, metric
    mc_docs(rowid INTEGER PRIMARY KEY,                 -- same rowid as in mc_vectors
            project, doc_id, kind, sqlite_id, document, metadata JSON,
            UNIQUE(doc_id, project))
      index mc_docs_bootstrap(project, kind, sqlite_id) -- max_sqlite_id is one index seek
      index mc_docs_sqlite_id(sqlite_id)                -- delete_where_sqlite_ids
    mc_vectors USING vec0(project TEXT PARTITION KEY,
                          embedding FLOAT[d] distance_metric=cosine, chunk_size=256)

The vec0 table holds only what the KNN scan needs: the partition key makes a query for one project
read only that project's chunks, so no metadata filter runs on the hot path. Everything else lives in
the plain ``mc_docs`` table, joined by rowid after the scan. A query over several projects runs one
KNN per project (``k`` each) and merges; a query over every project runs one unpartitioned KNN.

The stdlib ``sqlite3`` of some Pythons cannot load extensions, so this uses apsw. One connection,
guarded by a lock, serves every thread of the worker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import sqlite_vec

from memcairn.errors import VectorIndexUnavailableError
from memcairn.vectors.base import VectorMatch, VectorRecord
from memcairn.vectors.memory import as_vector, check_dimension, check_record, last_wins, merge_matches

SCHEMA_VERSION = 1
MAX_K = 4096  # sqlite-vec refuses larger k in a KNN query
_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit
# vec0 allocates vectors per partition in chunks of this many slots: the default (1024) costs every
# project 1.5 MB at 384-d however few documents it has; 256 does not slow the KNN scan measurably.
CHUNK_SIZE = 256

_SUFFIXES = ("", "-wal", "-shm", "-journal")


def _vec_table_sql(dimension: int) -> str:
    return (
        "CREATE VIRTUAL TABLE IF NOT EXISTS mc_vectors USING vec0("
        "project TEXT PARTITION KEY, "
        f"embedding FLOAT[{int(dimension)}] distance_metric=cosine, "
        f"chunk_size={CHUNK_SIZE})"
    )


_DOCS_SQL = (
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
)

_KNN_ONE = """
    WITH knn AS MATERIALIZED (
        SELECT rowid, distance FROM mc_vectors WHERE embedding MATCH ? AND k = ? AND project = ?
    )
    SELECT d.doc_id, knn.distance, d.metadata FROM knn JOIN mc_docs AS d ON d.rowid = knn.rowid
"""

_KNN_ALL = """
    WITH knn AS MATERIALIZED (
        SELECT rowid, distance FROM mc_vectors WHERE embedding MATCH ? AND k = ?
    )
    SELECT d.doc_id, knn.distance, d.metadata FROM knn JOIN mc_docs AS d ON d.rowid = knn.rowid
"""


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def remove_files(path: Path) -> None:
    """Delete the index file and its WAL/SHM companions (used by a rebuild of a broken mirror)."""
    for suffix in _SUFFIXES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class SqliteVecIndex:
    """A `VectorIndex` in a sqlite-vec sidecar file."""

    name = "sqlite-vec"

    def __init__(self, path: Path, dimension: int) -> None:
        self.path = Path(path)
        self.dimension = check_dimension(dimension)
        self._lock = threading.RLock()
        self._conn: apsw.Connection | None = None
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
        self._conn = conn

    # -- protocol

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        rows = []
        for record in last_wins(records):
            vec, meta = check_record(record, self.dimension)
            rows.append(
                (
                    record.project,
                    record.id,
                    meta.get("kind") if isinstance(meta.get("kind"), str) else None,
                    meta.get("sqlite_id"),
                    str(record.document),
                    json.dumps(meta, sort_keys=True),
                    vec.astype("<f4").tobytes(),
                )
            )
        if not rows:
            return
        with self._db() as conn, conn:
            for project, doc_id, kind, sqlite_id, document, meta_json, blob in rows:
                old = conn.execute(
                    "SELECT rowid FROM mc_docs WHERE doc_id = ? AND project = ?", (doc_id, project)
                ).fetchone()
                rowid = old[0] if old else None
                if rowid is not None:
                    conn.execute("DELETE FROM mc_vectors WHERE rowid = ?", (rowid,))
                    conn.execute("DELETE FROM mc_docs WHERE rowid = ?", (rowid,))
                conn.execute(
                    "INSERT INTO mc_docs(rowid, project, doc_id, kind, sqlite_id, document, metadata) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rowid, project, doc_id, kind, sqlite_id, document, meta_json),
                )
                if rowid is None:
                    rowid = conn.last_insert_rowid()
                conn.execute(
                    "INSERT INTO mc_vectors(rowid, project, embedding) VALUES (?, ?, ?)",
                    (rowid, project, blob),
                )

    def delete(self, ids: Sequence[str], *, project: str | None = None) -> None:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return
        with self._db() as conn, conn:
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT rowid FROM mc_docs WHERE doc_id IN ({marks})"
                args: list[Any] = list(chunk)
                if project is not None:
                    sql += " AND project = ?"
                    args.append(project)
                self._delete_rowids(conn, [r[0] for r in conn.execute(sql, args)])

    def delete_where_sqlite_ids(self, sqlite_ids: Sequence[int], *, project: str | None = None) -> None:
        wanted = sorted({int(s) for s in sqlite_ids})
        if not wanted:
            return
        with self._db() as conn, conn:
            for chunk in _chunks(wanted):
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT rowid FROM mc_docs WHERE sqlite_id IN ({marks})"
                args: list[Any] = list(chunk)
                if project is not None:
                    sql += " AND project = ?"
                    args.append(project)
                self._delete_rowids(conn, [r[0] for r in conn.execute(sql, args)])

    def query(self, vector: Sequence[float], *, projects: Sequence[str] | None, limit: int) -> list[VectorMatch]:
        blob = as_vector(vector, self.dimension, what="query vector").astype("<f4").tobytes()
        if limit <= 0:
            return []
        k = min(int(limit), MAX_K)
        found: list[VectorMatch] = []
        with self._db() as conn:
            if projects is None:
                found.extend(self._matches(conn.execute(_KNN_ALL, (blob, k))))
            else:
                for project in dict.fromkeys(projects):
                    found.extend(self._matches(conn.execute(_KNN_ONE, (blob, k, project))))
        return merge_matches(found, k)

    def max_sqlite_id(self, project: str, kind: str) -> int:
        with self._db() as conn:
            row = conn.execute(
                "SELECT max(sqlite_id) FROM mc_docs WHERE project = ? AND kind = ?", (project, kind)
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def count(self, project: str | None = None) -> int:
        with self._db() as conn:
            if project is None:
                row = conn.execute("SELECT count(*) FROM mc_docs").fetchone()
            else:
                row = conn.execute("SELECT count(*) FROM mc_docs WHERE project = ?", (project,)).fetchone()
        return int(row[0])

    def projects(self) -> list[str]:
        with self._db() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT project FROM mc_docs ORDER BY project")]

    def reset(self) -> None:
        with self._db() as conn:
            with conn:
                conn.execute("DROP TABLE IF EXISTS mc_vectors")
                conn.execute("DELETE FROM mc_docs")
                conn.execute(_vec_table_sql(self.dimension))
                self._write_meta(conn)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except apsw.Error:
                    pass

    # -- internals

    def _unavailable(self, exc: BaseException | str) -> VectorIndexUnavailableError:
        return VectorIndexUnavailableError(
            f"vector index {self.path} cannot be used ({exc}); "
            "`memcairn sync rebuild` recreates it from the SQLite store"
        )

    @contextmanager
    def _db(self) -> Iterator[apsw.Connection]:
        with self._lock:
            if self._conn is None:
                raise VectorIndexUnavailableError(f"vector index {self.path} is closed")
            try:
                yield self._conn
            except apsw.Error as exc:
                raise self._unavailable(exc) from exc

    def _setup(self, conn: apsw.Connection) -> None:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
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
                if int(meta.get("schema", SCHEMA_VERSION)) > SCHEMA_VERSION:
                    raise VectorIndexUnavailableError(
                        f"vector index {self.path} was written by a newer memcairn (schema "
                        f"{meta['schema']}); `memcairn sync rebuild` recreates it"
                    )
            for sql in _DOCS_SQL:
                conn.execute(sql)
            conn.execute(_vec_table_sql(self.dimension))
            if "dimension" not in meta:
                self._write_meta(conn)

    def _write_meta(self, conn: apsw.Connection) -> None:
        conn.executemany(
            "INSERT OR REPLACE INTO mc_meta(key, value) VALUES (?, ?)",
            [("schema", str(SCHEMA_VERSION)), ("dimension", str(self.dimension)), ("metric", "cosine")],
        )

    @staticmethod
    def _delete_rowids(conn: apsw.Connection, rowids: list[int]) -> None:
        if not rowids:
            return
        conn.executemany("DELETE FROM mc_vectors WHERE rowid = ?", [(r,) for r in rowids])
        conn.executemany("DELETE FROM mc_docs WHERE rowid = ?", [(r,) for r in rowids])

    @staticmethod
    def _matches(rows: Any) -> Iterator[VectorMatch]:
        for doc_id, distance, meta_json in rows:
            yield VectorMatch(id=doc_id, distance=max(0.0, float(distance)), metadata=json.loads(meta_json))
