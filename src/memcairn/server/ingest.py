"""The server's ingest consumers: threads that store the queued events (``server/queue.py``) as items.

Every server process runs ``threads`` of them (``--workers N`` processes: N times that); they share the queue
through ``FOR UPDATE SKIP LOCKED``, so there is no leader and a process that dies leaves its claimed jobs to the
others once PostgreSQL has ended its session. A write in this process wakes them at once (``wake``); work queued
through another process is found within ``IDLE_SECONDS``.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from memcairn.core.errors import ConfigError
from memcairn.pgstore.items import TeamStore
from memcairn.server.queue import CLAIM, consume

IDLE_SECONDS = 0.2
RETRY_SECONDS = 1.0
log = logging.getLogger("memcairn.server.ingest")


class IngestConsumers:
    """Start with ``start()``, stop with ``stop()`` (a batch in flight is finished or rolled back)."""

    def __init__(self, team: TeamStore, wake: threading.Event, *, threads: int = 1, claim: int = CLAIM) -> None:
        self.team = team
        self.wake = wake
        self.claim = claim
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, name=f"memcairn-ingest-{n}", daemon=True)
                         for n in range(threads)]
        self.stored = 0  # jobs this process settled
        self.failed = 0
        self._count = threading.Lock()  # the threads add to the counts

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.wake.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                done = consume(self.team, self.claim)
            except (psycopg.Error, ConfigError) as exc:  # the database went away: the jobs wait; try again
                log.warning("ingest consumer: %s", exc)
                self._stop.wait(RETRY_SECONDS)
                continue
            except Exception:  # noqa: BLE001 - the thread must live; the jobs stay queued
                log.exception("ingest consumer: a batch failed; its jobs stay queued")
                self._stop.wait(RETRY_SECONDS)
                continue
            with self._count:
                self.stored += done.jobs - done.failed
                self.failed += done.failed
            if done.failed:
                log.warning("ingest consumer: %d queued event(s) could not be stored (see ingest_jobs.error)",
                            done.failed)
            if done.jobs < self.claim:  # the queue is (nearly) empty: wait for a write or the next poll
                self.wake.wait(IDLE_SECONDS)
                self.wake.clear()
