"""Keeping the vector mirror in step with SQLite.

The mechanisms of the reference design live here once, for every backend:

- **Watermark per (project, kind)**, a row in SQLite, advanced only after the mirror accepted a whole
  batch (``advance_watermark`` is monotonic). Items above it are what the mirror still lacks.
- **Gap guard**: once a batch of a run fails, later batches of that run may still be written but do not
  move the watermark, so the gap is retried next time instead of skipped forever.
- **Bootstrap**: a missing watermark starts at the highest ``sqlite_id`` the index already holds (nothing
  is embedded twice); a watermark above what the index holds (the index lost documents) is lowered to it.
- **Backfill** of every project at start and on demand: at most ``concurrency`` projects at once, one run
  at a time (a second caller gets ``skipped``).
- **Outbox**: edits and deletes recorded by triggers are replayed (old documents removed, new ones written).
- **Degraded mode**: an unreachable index never fails a store write; the mirror is marked degraded and
  catches up when it answers again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from memcairn.core.errors import VectorIndexUnavailableError
from memcairn.core.models import KINDS
from memcairn.mirror.documents import Document, documents_for, parse_doc_id
from memcairn.store.protocols import MirrorStore
from memcairn.vectors.base import Embedder, VectorIndex, VectorRecord

log = logging.getLogger("memcairn.mirror")

BATCH_DOCS = 100
BACKFILL_CONCURRENCY = 3
MAX_SAMPLE_ERRORS = 5

Progress = Callable[[str, int], None]  # (project, memories just written: a bar's unit, known up front)


@dataclass
class SyncResult:
    documents: int = 0
    items: int = 0
    failed_batches: int = 0
    skipped: bool = False
    sample_errors: list[str] = field(default_factory=list)

    def merge(self, other: SyncResult) -> None:
        self.documents += other.documents
        self.items += other.items
        self.failed_batches += other.failed_batches
        self.sample_errors = (self.sample_errors + other.sample_errors)[:MAX_SAMPLE_ERRORS]

    def error(self, message: str) -> None:
        self.failed_batches += 1
        if len(self.sample_errors) < MAX_SAMPLE_ERRORS:
            self.sample_errors.append(message)


@dataclass(frozen=True)
class VectorHit:
    item_id: int
    kind: str
    distance: float
    doc_id: str


class MirrorSync:
    def __init__(self, store: MirrorStore, index: VectorIndex, embedder: Embedder, *, index_key: str,
                 batch_docs: int = BATCH_DOCS, concurrency: int = BACKFILL_CONCURRENCY) -> None:
        if index.dimension != embedder.dimension:
            raise VectorIndexUnavailableError(
                f"the {index.name} mirror holds {index.dimension}-d vectors but the model {embedder.model_id} "
                f"makes {embedder.dimension}-d ones; run `memcairn sync rebuild`"
            )
        self.store = store
        self.index = index
        self.embedder = embedder
        self.index_key = index_key
        self.batch_docs = batch_docs
        self.concurrency = concurrency
        self.state = "ok"
        self.last_error: str | None = None
        self._backfill_lock = threading.Lock()
        self._write_lock = threading.Lock()  # one catch-up or backfill writes at a time
        self._bootstrapped = False

    # -- health -----------------------------------------------------------------------------------
    def _degrade(self, exc: BaseException) -> None:
        self.state = "degraded"
        self.last_error = str(exc)
        self._bootstrapped = False  # it may come back without what it held: compare again before catching up
        log.warning("vector mirror degraded: %s", exc)

    def _recover(self) -> None:
        if self.state != "ok":
            log.info("vector mirror available again")
        self.state = "ok"
        self.last_error = None

    @property
    def available(self) -> bool:
        return self.state == "ok"

    # -- writing ----------------------------------------------------------------------------------
    def _records(self, docs: Sequence[Document], project: str) -> list[VectorRecord]:
        vectors = self.embedder.embed_documents([d.text for d in docs])
        return [VectorRecord(d.id, project, v, d.text, d.metadata) for d, v in zip(docs, vectors, strict=True)]

    def _write(self, docs: list[Document], project: str) -> None:
        if docs:
            self.index.upsert(self._records(docs, project))

    def sync_kind(self, project: str, kind: str, progress: Progress | None = None) -> SyncResult:
        """Mirror every item of (project, kind) above its watermark, batch by batch."""
        result = SyncResult()
        watermark = self.store.watermarks(self.index_key).get((project, kind), 0)
        had_gap = False
        cursor = watermark
        while True:
            ids = self.store.ids_after(project, kind, cursor, 200)
            if not ids:
                break
            items = self.store.get_items(ids)
            batch: list[Document] = []
            batch_items: list[int] = []
            for n, item in enumerate(items):
                batch += documents_for(item)
                batch_items.append(item.id)
                if len(batch) >= self.batch_docs or n == len(items) - 1:
                    try:
                        self._write(batch, project)
                    except VectorIndexUnavailableError:
                        raise
                    except Exception as exc:  # one bad batch: remember the gap, go on with the rest
                        had_gap = True
                        result.error(f"{project}/{kind} items {batch_items[0]}-{batch_items[-1]}: {exc}")
                        log.warning("mirror batch failed (%s/%s): %s", project, kind, exc)
                    else:
                        result.documents += len(batch)
                        result.items += len(batch_items)
                        if not had_gap:
                            self.store.advance_watermark(self.index_key, project, kind, batch_items[-1])
                        if progress:
                            progress(project, len(batch_items))
                    batch, batch_items = [], []
            cursor = ids[-1]
        return result

    def sync_project(self, project: str, progress: Progress | None = None) -> SyncResult:
        result = SyncResult()
        for kind in KINDS:
            result.merge(self.sync_kind(project, kind, progress))
        return result

    def drain_outbox(self, result: SyncResult | None = None) -> int:
        """Replay edits and deletes recorded by the store's triggers; return how many entries were applied.

        An edit whose documents cannot be written (the model or the index refused them) stays in the outbox and
        is counted in ``result``: like a failed batch, it is retried on the next pass instead of stopping the
        pass, so one such edit does not keep every other write out of the mirror. Later entries wait for that
        next pass (the outbox is read from its oldest entry).
        """
        result = result if result is not None else SyncResult()
        applied = 0
        while True:
            entries = self.store.outbox(200)
            if not entries:
                return applied
            deleted = [e for e in entries if e.op == "delete"]
            updated = [e for e in entries if e.op == "update"]
            for e in deleted:
                self.index.delete_where_sqlite_ids([e.item_id], project=e.project or None)
            live = {i.id: i for i in self.store.get_items([e.item_id for e in updated])}
            failed: set[int] = set()
            for e in updated:
                self.index.delete_where_sqlite_ids([e.item_id], project=e.project or None)
                item = live.get(e.item_id)
                if item is None or item.id > self.store.watermarks(self.index_key).get((item.project, item.kind), 0):
                    continue
                try:
                    self._write(documents_for(item), item.project)
                except VectorIndexUnavailableError:
                    raise
                except Exception as exc:  # noqa: BLE001 - kept for the next pass, reported like a failed batch
                    failed.add(e.id)
                    result.error(f"{item.project}/{item.kind} edit of item {item.id}: {exc}")
                    log.warning("mirror edit failed (item %s): %s", item.id, exc)
            self.store.ack_outbox([e.id for e in entries if e.id not in failed])
            applied += len(entries) - len(failed)
            if failed:
                return applied

    def bootstrap(self) -> None:
        """Align watermarks with what the index really holds (see the module docstring)."""
        marks = self.store.watermarks(self.index_key)
        for (project, kind) in self.store.mirror_extent():
            held = self.index.max_sqlite_id(project, kind)
            current = marks.get((project, kind))
            if current is None or held < current:
                self.store.set_watermark(self.index_key, project, kind, held)
        self._bootstrapped = True

    def sync_pending(self, progress: Progress | None = None) -> SyncResult:
        """Catch up: replay the outbox, then mirror whatever lies above the watermarks."""
        result = SyncResult()
        try:
            if not self._bootstrapped:
                self.bootstrap()
            self.drain_outbox(result)
            marks = self.store.watermarks(self.index_key)
            lagging = sorted({p for (p, k), top in self.store.mirror_extent().items() if top > marks.get((p, k), 0)})
            with self._write_lock:
                for project in lagging:
                    result.merge(self.sync_project(project, progress))
        except VectorIndexUnavailableError as exc:
            self._degrade(exc)
            result.error(str(exc))
            return result
        self._recover()
        return result

    def backfill(self, progress: Progress | None = None) -> SyncResult:
        """Bootstrap, then mirror every project (at most ``concurrency`` at once). One run at a time."""
        if not self._backfill_lock.acquire(blocking=False):
            return SyncResult(skipped=True)
        try:
            result = SyncResult()
            try:
                self.bootstrap()
                self.drain_outbox(result)
            except VectorIndexUnavailableError as exc:
                self._degrade(exc)
                result.error(str(exc))
                return result
            projects = sorted({p for p, _ in self.store.mirror_extent()})
            errors: list[BaseException] = []
            with self._write_lock, ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                futures = [pool.submit(self.sync_project, p, progress) for p in projects]
                for future in futures:
                    try:
                        result.merge(future.result())
                    except VectorIndexUnavailableError as exc:
                        errors.append(exc)
                    except Exception as exc:  # a project's failure does not stop the others
                        result.error(str(exc))
            if errors:
                self._degrade(errors[0])
                result.error(str(errors[0]))
            else:
                self._recover()
            return result
        finally:
            self._backfill_lock.release()

    def rebuild(self, progress: Progress | None = None) -> SyncResult:
        """Drop the mirror's content and refill it from SQLite."""
        with self._write_lock:
            self.index.reset()
            self.store.clear_watermarks(self.index_key)
            self.store.clear_outbox()
            self._bootstrapped = False
        return self.backfill(progress)

    # -- reading ----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        marks = self.store.watermarks(self.index_key)
        rows = []
        for (project, kind), top in sorted(self.store.mirror_extent().items()):
            mark = marks.get((project, kind), 0)
            rows.append({"project": project, "kind": kind, "watermark": mark, "max_id": top,
                         "lag": self.store.count_after(project, kind, mark) if top > mark else 0})
        return {"state": self.state, "backend": self.index.name, "index_key": self.index_key,
                "model": self.embedder.model_id, "last_error": self.last_error,
                "outbox": self.store.outbox_size(), "rows": rows}

    def projects_for(self, names: Sequence[str] | None) -> list[str] | None:
        """Index partitions to query for these projects: themselves and every project merged into them."""
        if names is None:
            return None
        return [name for _, name in self.store.resolve_projects(list(names))]

    def query(self, text: str, *, projects: Sequence[str] | None = None, limit: int = 50,
              vector: Sequence[float] | None = None) -> list[VectorHit]:
        """Nearest items (not documents): each item once, at its best-ranked document.

        Raises:
            VectorIndexUnavailableError: the index cannot be queried (the caller falls back to keyword).
        """
        partitions = self.projects_for(projects)
        if partitions is not None and not partitions:
            return []
        vec = vector if vector is not None else self.embedder.embed_query(text)
        start = time.perf_counter()
        try:
            if getattr(self.index, "queries_per_row", False):  # the index keeps each item's best document itself
                matches = self.index.query(vec, projects=partitions, limit=limit, metadata=False, per_row=True)
            else:  # an item has several documents: ask for more, keep each item's first
                matches = self.index.query(vec, projects=partitions, limit=limit * 4, metadata=False)
        except VectorIndexUnavailableError as exc:
            self._degrade(exc)
            raise
        log.debug("vector query %.1f ms", (time.perf_counter() - start) * 1000)
        seen: dict[int, VectorHit] = {}
        for match in matches:
            parsed = parse_doc_id(match.id)
            if parsed is None:
                continue
            kind, item_id = parsed
            if item_id not in seen:
                seen[item_id] = VectorHit(item_id, kind, match.distance, match.id)
        return list(seen.values())[:limit]
