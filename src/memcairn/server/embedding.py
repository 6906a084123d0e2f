"""The server's embedding task: one thread per server process that embeds the backlog (``pgstore/backlog.py``)
in batches, so that a write answers without waiting for the model.

With ``--workers N`` every process starts the thread, but only one embeds: the leader, which holds a
session-level advisory lock (``pg_try_advisory_lock``) on a connection of its own for as long as it lives.
When that process dies, PostgreSQL ends its session and releases the lock, and another process's thread
takes it within ``LEADER_RETRY_SECONDS``; a server started again after a crash resumes the backlog where the
committed batches left it.

The thread lowers its own scheduling priority (``nice``) and the task gets a single-threaded model of its own,
so on a small machine the requests run first and the backlog drains in the time between them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

import psycopg

from memcairn.errors import ConfigError
from memcairn.pgstore import db
from memcairn.pgstore.backlog import BATCH, embed_batch
from memcairn.pgstore.items import TeamStore
from memcairn.vectors.base import Embedder

LOCK_KEY = "memcairn:embedding-task"
IDLE_SECONDS = 1.0  # how often an idle task looks for work written by another process
LEADER_RETRY_SECONDS = 2.0
NICE = 10
log = logging.getLogger("memcairn.server.embedding")


class EmbeddingTask:
    """Start with ``start()``, stop with ``stop()``; ``embedder`` is only used by this task's thread."""

    def __init__(self, team: TeamStore, embedder: Embedder, *, batch: int = BATCH, nice: int = NICE) -> None:
        self.team = team
        self.embedder = embedder
        self.batch = batch
        self.nice = nice
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.embedded = 0  # backlog rows this process settled

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memcairn-embedding", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.team.written.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        if self.nice:
            with contextlib.suppress(OSError):  # Linux: a thread's own priority (its native id is its tid)
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
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
        while not self._stop.is_set():
            self.team.written.clear()
            done = embed_batch(self.team.pool, self.embedder, self.batch)
            self.embedded += done
            if not done:
                lock.execute("SELECT 1")  # the lock's session is gone (an error here): lead again only with a new one
                self.team.written.wait(IDLE_SECONDS)
