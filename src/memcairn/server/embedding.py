"""The server's embedding task: one thread per server process that embeds the backlog (``pgstore/backlog.py``)
in batches, so that a write answers without waiting for the model.

With ``--workers N`` every process starts the thread, but only one embeds: the leader, which holds a
session-level advisory lock (``pg_try_advisory_lock``) on a connection of its own for as long as it lives.
When that process dies, PostgreSQL ends its session and releases the lock, and another process's thread
takes it within ``LEADER_RETRY_SECONDS``; a server started again after a crash resumes the backlog where the
committed batches left it.

The thread lowers its own scheduling priority (``nice``) and the task gets a single-threaded model of its own,
so on a small machine the requests run first and the backlog drains in the time between them.

Each batch is taken fairly over the tenants (``backlog.pick``: round robin, oldest first within a tenant), so one
tenant's upload of thousands of memories delays another tenant's new memory by about one batch, not by the whole
upload. The leader may run ``workers`` threads, each with a model of its own (``make_embedder``), taking disjoint
batches (the items a worker holds are left out of the others' picks). One is the default: on 2 cores shared with
the requests, two single-threaded workers embedded 49-56 documents/s against 53-59 for one (load 2-4), and one
two-threaded model 36-46.

Why one leader and not ``FOR UPDATE SKIP LOCKED`` claims shared by every process: a row lock held while the model
runs (a second or more) would make a forget of that item wait for it, and a claim that commits needs a lease
column the backlog does not have; the model is CPU-bound, so leaders in several processes would only contend for
the same cores; and a fair pick needs the view of one picker. Within the leader, workers claim in memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator

import psycopg

from memcairn.core.errors import ConfigError
from memcairn.pgstore import backlog, db
from memcairn.pgstore.items import TeamStore
from memcairn.vectors.base import Embedder

LOCK_KEY = "memcairn:embedding-task"
IDLE_SECONDS = 1.0  # how often an idle task looks for work written by another process
LEADER_RETRY_SECONDS = 2.0
NICE = 10
log = logging.getLogger("memcairn.server.embedding")


class EmbeddingTask:
    """Start with ``start()``, stop with ``stop()``; ``embedder`` is only used by this task's thread."""

    def __init__(self, team: TeamStore, embedder: Embedder, *, batch: int = backlog.BATCH, nice: int = NICE,
                 workers: int = 1, make_embedder: Callable[[], Embedder] | None = None) -> None:
        if workers > 1 and make_embedder is None:
            raise ValueError("several embedding workers need make_embedder: each runs a model of its own")
        self.team = team
        self.embedder = embedder
        self.batch = batch
        self.nice = nice
        self.workers = max(1, workers)
        self._make_embedder = make_embedder
        self._extra: list[Embedder] = []  # the other workers' models, made on first leadership and kept
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._claims = threading.Lock()
        self._held: set[int] = set()  # backlog items a worker of this process is embedding now
        self.embedded = 0  # backlog rows this process settled

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memcairn-embedding", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.team.written.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _lower_priority(self) -> None:
        if self.nice:
            with contextlib.suppress(OSError):  # Linux: a thread's own priority (its native id is its tid)
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)

    def _run(self) -> None:
        self._lower_priority()
        while not self._stop.is_set():
            try:
                with self._leadership() as lock:
                    if lock is None:
                        self._stop.wait(LEADER_RETRY_SECONDS)
                        continue
                    self._lead(lock)
            except (psycopg.Error, ConfigError) as exc:  # the database went away: try again shortly
                log.warning("embedding task: %s", exc)
                self._stop.wait(LEADER_RETRY_SECONDS)
            except Exception:  # noqa: BLE001 - the model failed: the batch stays in the backlog, try again later
                log.exception("embedding task: a batch failed; it stays in the backlog")
                self._stop.wait(LEADER_RETRY_SECONDS)

    @contextlib.contextmanager
    def _leadership(self) -> Iterator[psycopg.Connection | None]:
        """The connection holding the leader's advisory lock, or None when another process holds it."""
        with db.connect(self.team.pool.dsn) as conn:
            row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (LOCK_KEY,)).fetchone()
            leader = bool(row and row[0])
            try:
                yield conn if leader else None
            finally:
                if leader and not conn.closed and not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (LOCK_KEY,))

    def _lead(self, lock: psycopg.Connection) -> None:
        make = self._make_embedder
        while make is not None and len(self._extra) < self.workers - 1:
            self._extra.append(make())
        leading = threading.Event()
        leading.set()
        helpers = [threading.Thread(target=self._help, args=(model, leading), name=f"memcairn-embedding-{n}",
                                    daemon=True) for n, model in enumerate(self._extra, start=1)]
        for helper in helpers:
            helper.start()
        try:
            while not self._stop.is_set():
                self.team.written.clear()
                if not self._embed_next(self.embedder):
                    lock.execute("SELECT 1")  # the lock's session is gone (an error here): lead again with a new one
                    self.team.written.wait(IDLE_SECONDS)
        finally:
            leading.clear()
            for helper in helpers:
                helper.join()

    def _help(self, model: Embedder, leading: threading.Event) -> None:
        """Another worker, while this process leads; a failed batch stays in the backlog, as the leader's does."""
        self._lower_priority()
        while leading.is_set() and not self._stop.is_set():
            try:
                if not self._embed_next(model):
                    self.team.written.wait(IDLE_SECONDS)
            except Exception:  # noqa: BLE001 - the database or the model failed: try again shortly
                log.exception("embedding worker: a batch failed; it stays in the backlog")
                self._stop.wait(LEADER_RETRY_SECONDS)

    def _embed_next(self, model: Embedder) -> int:
        """Pick a fair batch no other worker holds, embed it and settle it; how many rows (0: nothing waits)."""
        with self._claims:
            with self.team.pool.connection() as conn:
                rows = backlog.pick(conn, self.batch, self._held)
            held = {item_id for item_id, _ in rows}
            self._held |= held
        try:
            done = backlog.embed_rows(self.team.pool, model, rows)
        finally:
            with self._claims:
                self._held -= held
        with self._claims:
            self.embedded += done
        return done
