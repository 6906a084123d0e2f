"""The default mirror: a sidecar SQLite file (WAL), the embedded choice (named after the sqlite-vec
extension whose distance function its exact path uses).

Schema 2 (one file, ``<home>/vectors.sqlite``)::

    mc_meta(key TEXT PRIMARY KEY, value TEXT)          -- schema, dimension, metric, model
    mc_docs(rowid INTEGER PRIMARY KEY,                 -- same rowid as in mc_embeddings
            project, doc_id, kind, sqlite_id, document, metadata JSON,
            UNIQUE(doc_id, project))
      index mc_docs_bootstrap(project, kind, sqlite_id) -- max_sqlite_id is one index seek; a project's rows
      index mc_docs_sqlite_id(sqlite_id)                -- delete_where_sqlite_ids
    mc_embeddings(rowid INTEGER PRIMARY KEY, embedding BLOB)   -- float32, little-endian

A query runs in three steps. A `BinaryScan` (``vectors/binary_scan.py``) keeps in memory, partitioned by
project, the sign bits of every vector (48 bytes a 384-d document) and its int8 components (384 bytes).
It picks the ``clamp(8 k, 2000, 8192)`` documents of the searched projects nearest by Hamming distance (a
few ms for 300,000 documents; a partition smaller than that is taken whole), then orders those by the
int8 cosine (within ~1e-3 of the true one) and keeps the best ``k + max(k / 4, 32)``. Only their float
vectors are read by rowid (one B-tree seek each, ~4 us: a 1.5 KB row sits in one page) and ranked by
exact cosine in numpy; the best ``k`` are joined to ``mc_docs``. A query *per row* (the mirror's: one hit
per item, whose narrative and facts are separate documents) keeps each row's best candidate before the
shortlist, so ``k`` items cost ``k + margin`` float reads, not the ~4 ``k`` documents they would fill.
The scan runs outside the connection's lock (it has its own): two queries scan side by side. At 300,000
MiniLM documents (15,000 a project) a one-project query for 200 documents takes ~4 ms with recall 0.998
against the exact answer, and every distance returned is exact. The scan costs 452 bytes a 384-d document
in memory (452 MB per million documents).

A background thread reads the scan from the file when the index opens with enough documents (`warm`) or
the first time a query could use it. Until it is ready, or if reading it fails, queries take the *exact
path*: sqlite-vec's ``vec_distance_cosine`` over every row of the searched projects picks the best ``k``,
which are ranked by the same numpy code (so both paths report identical distances). Upserts, deletes and
reset update the scan in step with the tables, under the same lock; a commit by another connection
(``PRAGMA data_version``) discards it, to be read again later.

Schema 1 kept the vectors in a sqlite-vec ``vec0`` table partitioned by project. Its brute-force KNN cost
grows with ``k`` (25-35 ms for 15,000 documents at ``k = 400``), and re-ranking candidates through it
walked the overflow pages of 393 KB chunks (40-70 us a vector). Opening a schema-1 file copies its vectors
into ``mc_embeddings`` and drops the ``vec0`` table, in one transaction: nothing is re-embedded.

The stdlib ``sqlite3`` of some Pythons cannot load extensions, so this uses apsw. One connection,
guarded by a lock, serves every thread of the worker.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from memcairn.core.errors import VectorIndexUnavailableError
from memcairn.vectors.base import VectorMatch, VectorRecord, model_mismatch
from memcairn.vectors.binary_scan import BinaryScan
from memcairn.vectors.memory import as_vector, check_dimension, check_record, last_wins, merge_matches

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
MAX_K = 4096  # most documents one query returns
_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit
# Bytes of the file SQLite memory-maps. Every page a read touches then counts in the worker's resident
# memory (file-backed, shared with the OS page cache, reclaimable, yet that is what `top` and the worker
# bench show), and rowid seeks through the page cache are fast enough, so the default leaves mmap off.
MMAP_SIZE = 0

# The binary scan (module doc) serves queries whose partitions hold at least SCAN_THRESHOLD documents:
# below that the exact path costs no more than a re-ranking.
SCAN_THRESHOLD = 1000
CANDIDATES_PER_K = 8  # the scan keeps clamp(CANDIDATES_PER_K * k, MIN_CANDIDATES, MAX_CANDIDATES) candidates
MIN_CANDIDATES = 2000
MAX_CANDIDATES = 8192
# Of the candidates, the best k + max(k / SHORTLIST_MARGIN, MIN_MARGIN) by int8 cosine are read and ranked exactly:
# the int8 estimate is within ~1e-3, so the margin holds any document near the k-th.
SHORTLIST_MARGIN = 4
MIN_MARGIN = 32
# A query per row looks PER_ROW_DEPTH times deeper (a row has several documents: narrative, facts, ...).
PER_ROW_DEPTH = 4
SCAN_REBUILD_SECONDS = 60.0  # a new scan is read at most this often (another process keeps writing)
SCAN_RETRY_SECONDS = 600.0  # after a failed read

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

# The exact path's choice of rowids (ranked afterwards like the scan's candidates).
_EXACT_ONE = """
    SELECT d.rowid FROM mc_docs AS d JOIN mc_embeddings AS e ON e.rowid = d.rowid
    WHERE d.project = ? ORDER BY vec_distance_cosine(e.embedding, ?) LIMIT ?
"""
_EXACT_ALL = """
    SELECT e.rowid FROM mc_embeddings AS e ORDER BY vec_distance_cosine(e.embedding, ?) LIMIT ?
"""
# json_each drives one rowid seek per candidate.
_VECTORS_OF = "SELECT e.rowid, e.embedding FROM json_each(?) AS c JOIN mc_embeddings AS e ON e.rowid = c.value"
_IDS_OF = "SELECT d.rowid, d.doc_id, d.sqlite_id FROM json_each(?) AS c JOIN mc_docs AS d ON d.rowid = c.value"
_DOCS_OF = ("SELECT d.rowid, d.doc_id, d.sqlite_id, d.metadata FROM json_each(?) AS c "
            "JOIN mc_docs AS d ON d.rowid = c.value")


def _one_per_row(rows: Sequence[tuple[Any, VectorMatch]]) -> list[VectorMatch]:
    """The matches nearest first (ties by id), each row's (``sqlite_id``) best only; a document without a row
    stands for itself."""
    seen: set[Any] = set()
    kept: list[VectorMatch] = []
    for sqlite_id, match in sorted(rows, key=lambda row: (row[1].distance, row[1].id)):
        if sqlite_id is None or sqlite_id not in seen:
            seen.add(sqlite_id)
            kept.append(match)
    return kept


def cosine_distances(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``1 - cos`` between each row of ``matrix`` and ``query``, clipped to [0, 2] (float32 arithmetic:
    about 1e-7 from the float64 value, and a quarter of the time)."""
    m = np.asarray(matrix, dtype=np.float32)
    q = np.asarray(query, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m)) * float(np.linalg.norm(q))
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(norms > 0, (m @ q) / norms, 0.0)
    return np.clip(1.0 - cos, 0.0, 2.0)


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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


class SqliteVecIndex:
    """A `VectorIndex` in a sqlite-vec sidecar file.

    ``scan_threshold``: the binary scan serves queries whose partitions hold at least this many
    documents (module doc); a huge value turns it off. ``mmap_size``: bytes of the file SQLite
    memory-maps (see `MMAP_SIZE`).
    """

    name = "sqlite-vec"

    def __init__(
        self, path: Path, dimension: int, *, scan_threshold: int = SCAN_THRESHOLD, mmap_size: int = MMAP_SIZE,
        model: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.dimension = check_dimension(dimension)
        self.model = model  # the embedding model of the vectors: recorded, and checked at open (factory doc)
        self.scan_threshold = int(scan_threshold)
        self.mmap_size = max(0, int(mmap_size))
        self._lock = threading.RLock()
        self._conn: apsw.Connection | None = None
        # The binary scan, its reader thread and the data_version of the main connection when it was
        # created; all guarded by _lock.
        self._scan: BinaryScan | None = None
        self._scan_thread: threading.Thread | None = None
        self._scan_version = 0
        self._scan_not_before = 0.0
        self._closed = False
        self._conn, self._file = self._open()

    # -- protocol

    queries_per_row = True  # `query(per_row=True)`: the nearest document of each SQLite row

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
        written: list[tuple[int, str, bytes, int | None]] = []  # (rowid, project, vector, owner): the scan's
        with self._db() as conn:
            with conn:
                for project, doc_id, kind, sqlite_id, document, meta_json, blob in rows:
                    old = conn.execute(
                        "SELECT rowid FROM mc_docs WHERE doc_id = ? AND project = ?", (doc_id, project)
                    ).fetchone()
                    rowid = old[0] if old else None
                    if rowid is not None:  # the document keeps its rowid
                        conn.execute("DELETE FROM mc_embeddings WHERE rowid = ?", (rowid,))
                        conn.execute("DELETE FROM mc_docs WHERE rowid = ?", (rowid,))
                    conn.execute(
                        "INSERT INTO mc_docs(rowid, project, doc_id, kind, sqlite_id, document, metadata) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (rowid, project, doc_id, kind, sqlite_id, document, meta_json),
                    )
                    if rowid is None:
                        rowid = conn.last_insert_rowid()
                    conn.execute(
                        "INSERT INTO mc_embeddings(rowid, embedding) VALUES (?, ?)", (rowid, blob)
                    )
                    written.append((rowid, project, blob, sqlite_id))
            if self._scan is not None:  # after the commit, before anyone else holds the lock
                self._scan.add(written)

    def delete(self, ids: Sequence[str], *, project: str | None = None) -> None:
        self._delete_where("doc_id", list(dict.fromkeys(ids)), project)

    def delete_where_sqlite_ids(self, sqlite_ids: Sequence[int], *, project: str | None = None) -> None:
        self._delete_where("sqlite_id", sorted({int(s) for s in sqlite_ids}), project)

    def query(self, vector: Sequence[float], *, projects: Sequence[str] | None, limit: int,
              metadata: bool = True, per_row: bool = False) -> list[VectorMatch]:
        """The ``limit`` nearest documents, nearest first; with ``per_row``, only the nearest document of each
        SQLite row (``sqlite_id``), so ``limit`` documents name ``limit`` rows."""
        vec = as_vector(vector, self.dimension, what="query vector")
        blob = vec.astype("<f4").tobytes()
        if limit <= 0:
            return []
        k = min(int(limit), MAX_K)
        wanted = None if projects is None else list(dict.fromkeys(projects))
        with self._db() as conn:
            scan = self._usable_scan(conn, wanted)
        if scan is not None:
            try:
                return self._scan_query(scan, vec, wanted, k, metadata, per_row)
            except VectorIndexUnavailableError:
                raise
            except Exception as exc:  # noqa: BLE001 - never worse than the exact path
                log.warning("binary scan query failed (%s); back to the exact KNN", exc, exc_info=True)
                with self._lock:
                    if self._scan is scan:
                        self._drop_scan(retry_after=SCAN_RETRY_SECONDS)
        with self._db() as conn:
            # Per row, a row's other documents may fill the first k: look further, as the scan does, and further
            # still while the documents read name fewer than k rows and more documents remain.
            depth = min(k * PER_ROW_DEPTH, MAX_K) if per_row else k
            while True:
                if wanted is None:
                    found = [[r[0] for r in conn.execute(_EXACT_ALL, (blob, depth))]]
                else:
                    found = [[r[0] for r in conn.execute(_EXACT_ONE, (p, blob, depth))] for p in wanted]
                matches = self._rank(conn, vec, [r for part in found for r in part], k, metadata, per_row=per_row)
                if not per_row or len(matches) >= k or depth >= MAX_K or all(len(f) < depth for f in found):
                    return matches
                depth = min(depth * PER_ROW_DEPTH, MAX_K)

    def warm(self) -> None:
        """Start reading the binary scan now if the index is big enough for it (a long-lived process calls
        this at start-up, so its first queries do not wait for a scan they would start)."""
        with self._db() as conn:
            self._usable_scan(conn, None)

    def wait_for_scan(self, timeout: float | None = None) -> bool:
        """Wait for the binary scan being read in the background; True when it is ready to serve.

        False at once when no scan was started (no query reached ``scan_threshold`` yet).
        """
        with self._lock:
            scan = self._scan
        return scan is not None and scan.wait(timeout)

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
                conn.execute("DELETE FROM mc_embeddings")
                conn.execute("DELETE FROM mc_docs")
                self._write_meta(conn)
            if self._scan is not None:  # empty now, and kept in step by the upserts that refill it
                self._scan.clear()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._drop_scan()
            thread, self._scan_thread = self._scan_thread, None
            conn, self._conn, self._closed = self._conn, None, True
            if conn is not None:
                try:
                    conn.close()
                except apsw.Error:
                    pass
        if thread is not None:  # cancelled: it stops at its next batch
            thread.join(timeout=5)

    # -- internals

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

    def _delete_where(self, column: str, values: Sequence[Any], project: str | None) -> None:
        if not values:
            return
        gone: list[tuple[int, str]] = []
        with self._db() as conn:
            with conn:
                for chunk in _chunks(values):
                    marks = ",".join("?" * len(chunk))
                    sql = f"SELECT rowid, project FROM mc_docs WHERE {column} IN ({marks})"
                    args: list[Any] = list(chunk)
                    if project is not None:
                        sql += " AND project = ?"
                        args.append(project)
                    rows = [(int(r[0]), str(r[1])) for r in conn.execute(sql, args)]
                    conn.executemany("DELETE FROM mc_embeddings WHERE rowid = ?", [(r,) for r, _ in rows])
                    conn.executemany("DELETE FROM mc_docs WHERE rowid = ?", [(r,) for r, _ in rows])
                    gone.extend(rows)
            if self._scan is not None and gone:
                self._scan.remove(gone)

    # -- the binary scan (module doc); every method here but the shortlist of `_scan_query` runs under _lock

    def _usable_scan(self, conn: apsw.Connection, projects: list[str] | None) -> BinaryScan | None:
        """The scan when it is ready and these partitions are big enough for it; starts reading it
        when they are and it is not there."""
        scan = self._scan
        if scan is not None:
            if scan.failed:
                self._drop_scan(retry_after=SCAN_RETRY_SECONDS)
                scan = None
            elif self._data_version(conn) != self._scan_version:
                log.info("vector index %s was changed by another connection: binary scan dropped", self.path)
                self._drop_scan()
                scan = None
            elif not scan.ready:
                return None
            else:
                return scan if scan.size(projects) >= self.scan_threshold else None
        if time.monotonic() < self._scan_not_before or self._count(conn, projects) < self.scan_threshold:
            return None
        self._start_scan(conn)
        return None

    def _scan_query(
        self, scan: BinaryScan, vec: Any, projects: list[str] | None, k: int, metadata: bool, per_row: bool
    ) -> list[VectorMatch]:
        """The scan's shortlist, ranked exactly. The scan has a lock of its own, so two queries scan side by
        side; only the ranking holds the connection."""
        # Per row, k rows stand for about PER_ROW_DEPTH k documents: the candidates are as many as for those.
        n = min(max(CANDIDATES_PER_K * k * (PER_ROW_DEPTH if per_row else 1), MIN_CANDIDATES), MAX_CANDIDATES)
        keep = k + max(k // SHORTLIST_MARGIN, MIN_MARGIN)
        rowids = scan.shortlist(vec, projects, n, keep=keep, per_owner=per_row)
        if not len(rowids):
            return []
        with self._db() as conn:  # per_row again: rowids may have been deleted and reused since the shortlist
            return self._rank(conn, vec, rowids.tolist(), k, metadata, per_row=per_row)

    def _start_scan(self, conn: apsw.Connection) -> None:
        scan = BinaryScan(self.dimension)  # records every change from now on, before the reader's snapshot
        self._scan = scan
        self._scan_version = self._data_version(conn)
        self._scan_not_before = time.monotonic() + SCAN_REBUILD_SECONDS
        self._scan_thread = threading.Thread(
            target=self._read_scan, args=(scan,), name="memcairn-binary-scan", daemon=True
        )
        self._scan_thread.start()

    def _drop_scan(self, *, retry_after: float = 0.0) -> None:
        if self._scan is not None:
            self._scan.cancel()
            self._scan = None
        if retry_after:
            self._scan_not_before = max(self._scan_not_before, time.monotonic() + retry_after)

    def _read_scan(self, scan: BinaryScan) -> None:
        """The reader thread: every vector, through a connection of its own (a WAL snapshot)."""
        start = time.perf_counter()
        try:
            conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READWRITE)
            try:
                conn.enable_load_extension(True)
                conn.load_extension(sqlite_vec.loadable_path())
                conn.enable_load_extension(False)
                conn.execute("PRAGMA query_only = 1")
                conn.execute("PRAGMA busy_timeout = 5000")
                with conn:  # one read transaction: the sizes and the rows of the same snapshot
                    sizes = dict(conn.execute("SELECT project, count(*) FROM mc_docs GROUP BY project"))
                    rows = conn.execute(
                        "SELECT e.rowid, d.project, e.embedding, d.sqlite_id FROM mc_embeddings AS e "
                        "JOIN mc_docs AS d ON d.rowid = e.rowid"
                    )
                    built = scan.build(rows, sizes)
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001 - queries keep the exact path
            log.warning("binary scan of %s could not be read (%s); queries keep the exact KNN", self.path, exc)
            scan.fail()
            return
        if built:
            log.info(
                "binary scan of %s ready: %d documents in %.1f s", self.path, scan.size(), time.perf_counter() - start
            )

    @staticmethod
    def _data_version(conn: apsw.Connection) -> int:
        """Changes when another connection commits to the file (our own commits leave it alone)."""
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    @staticmethod
    def _count(conn: apsw.Connection, projects: list[str] | None) -> int:
        if projects is None:
            return int(conn.execute("SELECT count(*) FROM mc_docs").fetchone()[0])
        return sum(
            int(conn.execute("SELECT count(*) FROM mc_docs WHERE project = ?", (p,)).fetchone()[0]) for p in projects
        )

    def _rank(
        self, conn: apsw.Connection, vec: np.ndarray, rowids: Sequence[int], k: int, metadata: bool = True, *,
        per_row: bool = False,
    ) -> list[VectorMatch]:
        """The best ``k`` of these documents by exact cosine distance, joined to their ``mc_docs`` rows
        (``per_row``: the best of each ``sqlite_id`` only)."""
        if not len(rowids):
            return []
        ids: list[int] = []
        blobs: list[bytes] = []
        for rowid, blob in conn.execute(_VECTORS_OF, (json.dumps(list(rowids)),)):
            ids.append(rowid)
            blobs.append(blob)
        if not ids:
            return []
        matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), self.dimension)
        distances = cosine_distances(matrix, vec)
        if not per_row:
            best = np.argpartition(distances, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
            return merge_matches([m for _, m in self._joined(conn, ids, distances, best, metadata)], k)
        # Per row: the best k documents first; when they name fewer than k rows (a row's other documents, or
        # rowids reused since a shortlist was taken), every candidate.
        order = np.argsort(distances, kind="stable")
        rows = self._joined(conn, ids, distances, order[:k], metadata)
        kept = _one_per_row(rows)
        if len(kept) < k < len(ids):
            kept = _one_per_row(rows + self._joined(conn, ids, distances, order[k:], metadata))
        return kept[:k]

    @staticmethod
    def _joined(
        conn: apsw.Connection, ids: Sequence[int], distances: np.ndarray, chosen: np.ndarray, metadata: bool
    ) -> list[tuple[Any, VectorMatch]]:
        """(sqlite_id, match) of the chosen documents, joined to their ``mc_docs`` rows."""
        if not len(chosen):
            return []
        dist = {ids[i]: float(distances[i]) for i in chosen}
        wanted = json.dumps(list(dist))
        if metadata:
            return [(sqlite_id, VectorMatch(doc_id, dist[rowid], json.loads(meta_json)))
                    for rowid, doc_id, sqlite_id, meta_json in conn.execute(_DOCS_OF, (wanted,))]
        return [(sqlite_id, VectorMatch(doc_id, dist[rowid]))
                for rowid, doc_id, sqlite_id in conn.execute(_IDS_OF, (wanted,))]

    def _from_vec0(self, conn: apsw.Connection) -> bool:
        """Schema 1 -> 2 (module doc), inside the caller's transaction; True when vectors were moved."""
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
