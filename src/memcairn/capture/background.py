"""Runs queue processing off the request path: nudged by every accepted event, polling while batches wait."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from memcairn.capture.pipeline import CapturePipeline, CaptureReport
from memcairn.core.background import BackgroundLoop

log = logging.getLogger("memcairn.capture")

PRUNE_EVERY_SECONDS = 3600.0
STUCK_SECONDS = 120.0  # pending events, none processed for this long: the queue is stuck (a model call is ~60 s)
FAILED_PASSES = 3  # or this many passes in a row failed with events pending


class CaptureRunner(BackgroundLoop):
    """One daemon thread per worker. ``nudge()`` is cheap and safe from any thread; ``on_pass`` hears about
    every pass that did something (the worker turns it into a ``/stream`` status event). Processed events
    older than ``ingest_retention_days`` are pruned after a pass at most every ``prune_every_seconds``, as
    measured by ``clock`` (both injectable for tests). ``queue_state`` says whether the queue is stuck: what
    ``/api/health`` shows."""

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
        self.progress_at = clock()  # the last pass that processed an event, failed one or found none waiting
        self.failed_passes = 0  # passes in a row that raised
        self.last_error: str | None = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            wait = self.idle_seconds
            try:
                report = self.pipeline.process_pending()
                self._passed(report)
                while report.events and not self._stop.is_set():  # a full page: more may be waiting
                    if self.on_pass is not None:
                        self.on_pass(report)
                    report = self.pipeline.process_pending()
                    self._passed(report)
                if report.waiting:
                    wait = min(wait, max(0.2, self.pipeline.settings.capture_batch_wait_seconds / 2))
                self._prune()
            except Exception as exc:  # the loop must survive anything
                log.exception("capture pass failed")
                self.failed_passes += 1
                self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            if not self._wake.is_set():
                self._idle.set()
            self._wake.wait(wait)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _passed(self, report: CaptureReport) -> None:
        self.failed_passes = 0
        if report.events or report.failed or not report.waiting:
            self.progress_at = self.clock()

    def queue_state(self, pending: int, oldest_pending_epoch: int | None) -> dict[str, Any]:
        """The queue as ``/api/health`` shows it, from the store's counts (``Store.ingest_backlog``): stuck when
        events are pending and either no pass made progress for ``STUCK_SECONDS`` while the oldest waited as
        long, or the last ``FAILED_PASSES`` passes failed."""
        now = self.clock()
        idle = max(0.0, now - self.progress_at)
        age = max(0.0, now - oldest_pending_epoch / 1000) if oldest_pending_epoch else 0.0
        stuck = pending > 0 and (self.failed_passes >= FAILED_PASSES
                                 or (idle >= STUCK_SECONDS and age >= STUCK_SECONDS)
                                 or not self.running)
        state: dict[str, Any] = {"state": "stuck" if stuck else "ok", "pending": pending,
                                 "oldest_pending_age_seconds": round(age, 1),
                                 "seconds_since_progress": round(idle, 1), "failed_passes": self.failed_passes,
                                 "last_error": self.last_error}
        if stuck:
            cause = ("the capture thread is not running" if not self.running
                     else f"{self.failed_passes} capture passes in a row failed ({self.last_error})"
                     if self.failed_passes >= FAILED_PASSES else f"no event processed for {idle:.0f} s")
            state["detail"] = (f"{pending} hook event(s) wait, the oldest for {age:.0f} s: {cause}")
            state["fix"] = ("`memcairn doctor` names the events and the fix (`memcairn doctor --fix` sets aside "
                            "events no pass can read); the worker log has each failure")
        return state

    def _prune(self) -> None:
        now = self.clock()
        if now - self._pruned_at < self.prune_every_seconds:
            return
        self._pruned_at = now
        days = self.pipeline.settings.ingest_retention_days
        removed = self.pipeline.store.prune_ingest_events(int((now - days * 86400) * 1000))
        if removed:
            log.info("pruned %d processed hook events older than %d days", removed, days)
