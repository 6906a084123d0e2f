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
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from memcairn.core.errors import VectorIndexUnavailableError
from memcairn.vectors.base import VectorMatch, VectorRecord
from memcairn.vectors.binary_scan import BinaryScan
from memcairn.vectors.memory import as_vector, check_dimension, check_record, last_wins
from memcairn.vectors.sqlite_vec_file import MMAP_SIZE, SidecarFileMixin
from memcairn.vectors.sqlite_vec_scan import PER_ROW_DEPTH, SCAN_RETRY_SECONDS, SCAN_THRESHOLD, ScanQueriesMixin

log = logging.getLogger(__name__)

MAX_K = 4096  # most documents one query returns
_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit

# The exact path's choice of rowids (ranked afterwards like the scan's candidates).
_EXACT_ONE = """
    SELECT d.rowid FROM mc_docs AS d JOIN mc_embeddings AS e ON e.rowid = d.rowid
    WHERE d.project = ? ORDER BY vec_distance_cosine(e.embedding, ?) LIMIT ?
"""
_EXACT_ALL = """
    SELECT e.rowid FROM mc_embeddings AS e ORDER BY vec_distance_cosine(e.embedding, ?) LIMIT ?
"""


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqliteVecIndex(SidecarFileMixin, ScanQueriesMixin):
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

