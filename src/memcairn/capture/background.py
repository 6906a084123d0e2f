"""Runs queue processing off the request path: nudged by every accepted event, polling while batches wait."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from memcairn.background import BackgroundLoop
from memcairn.capture.pipeline import CapturePipeline, CaptureReport

log = logging.getLogger("memcairn.capture")

PRUNE_EVERY_SECONDS = 3600.0


class CaptureRunner(BackgroundLoop):
    """One daemon thread per worker. ``nudge()`` is cheap and safe from any thread; ``on_pass`` hears about
    every pass that did something (the worker turns it into a ``/stream`` status event). Processed events
    older than ``ingest_retention_days`` are pruned after a pass at most every ``prune_every_seconds``, as
    measured by ``clock`` (both injectable for tests)."""

    thread_name = "memcairn-capture"

    def __init__(self, pipeline: CapturePipeline, *, idle_seconds: float = 30.0,
                 on_pass: Callable[[CaptureReport], None] | None = None,
                 prune_every_seconds: float = PRUNE_EVERY_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.pipeline = pipeline
        self.idle_seconds = idle_seconds
        self.on_pass = on_pass
        self.prune_every_seconds = prune_every_seconds
        self.clock = clock
        super().__init__()
        self._pruned_at = 0.0

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            wait = self.idle_seconds
            try:
                report = self.pipeline.process_pending()
                while report.events and not self._stop.is_set():  # a full page: more may be waiting
                    if self.on_pass is not None:
                        self.on_pass(report)
                    report = self.pipeline.process_pending()
                if report.waiting:
                    wait = min(wait, max(0.2, self.pipeline.settings.capture_batch_wait_seconds / 2))
                self._prune()
            except Exception:  # the loop must survive anything
                log.exception("capture pass failed")
            if not self._wake.is_set():
                self._idle.set()
            self._wake.wait(wait)

    def _prune(self) -> None:
        now = self.clock()
        if now - self._pruned_at < self.prune_every_seconds:
            return
        self._pruned_at = now
        days = self.pipeline.settings.ingest_retention_days
        removed = self.pipeline.store.prune_ingest_events(int((now - days * 86400) * 1000))
        if removed:
            log.info("pruned %d processed hook events older than %d days", removed, days)
