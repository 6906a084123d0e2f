"""The sqlite-vec sidecar's queries through the binary scan (read in the background, dropped when another
connection writes) and the exact ranking both paths end in. Mixed into ``SqliteVecIndex`` (``sqlite_vec`` module
doc)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from memcairn.vectors.base import VectorMatch
from memcairn.vectors.binary_scan import BinaryScan
from memcairn.vectors.memory import merge_matches

log = logging.getLogger("memcairn.vectors.sqlite_vec")  # the sidecar's one logger, whichever module speaks

# The binary scan (``sqlite_vec`` module doc) serves queries whose partitions hold at least SCAN_THRESHOLD
# documents: below that the exact path costs no more than a re-ranking.
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


class ScanQueriesMixin:
    path: Path
    dimension: int
    scan_threshold: int
    _lock: threading.RLock
    _scan: BinaryScan | None
    _scan_thread: threading.Thread | None
    _scan_version: int
    _scan_not_before: float
    _db: Callable[[], AbstractContextManager[apsw.Connection]]

    # -- every method here but the shortlist of `_scan_query` runs under _lock

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

