"""What the worker's routes share (``WorkerState``): the runtime once open, its collaborators (search, capture,
mirror runner, upkeep, spool drainer, forwarder), the phase, and the store calls in flight.

**Startup** happens on a background thread started by the app's lifespan (migrations, FTS drift check, the
vector mirror and its catch-up thread), so ``/api/health`` answers at once; every route that needs the store
raises ``NotReady`` until it is done. **Shutdown** drains: requests arriving afterwards get ``NotReady``
(``shutting_down``: nothing is written by them); store calls in flight finish; then the threads stop and the
runtime closes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.concurrency import run_in_threadpool

from memcairn.capture.background import CaptureRunner
from memcairn.capture.llm import make_compressor
from memcairn.capture.pipeline import CapturePipeline, CaptureReport
from memcairn.context.freshness_check import checker_for
from memcairn.context.memo import ContextMemo
from memcairn.core.errors import MemcairnError
from memcairn.mirror.background import MirrorRunner
from memcairn.mirror.runtime import Runtime, open_runtime
from memcairn.search import SearchService
from memcairn.wire.config import Settings
from memcairn.worker.events import Broadcaster, ExternalWriteTailer, StoreEventBridge
from memcairn.worker.forwarder import Forwarder
from memcairn.worker.spool_drain import DrainReport, SpoolDrainer, intake_accept
from memcairn.worker.upkeep import StoreUpkeep

log = logging.getLogger("memcairn.worker")

DRAIN_SECONDS = 10.0
RUNNER_STOP_SECONDS = 5.0

RuntimeSource = Runtime | Callable[[Settings], Runtime] | None


class NotReady(Exception):
    """The worker is starting, failed to start, or is stopping: ``error`` says which (the routes answer 503)."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail


class WorkerState:
    """What the routes share: the runtime once open, the phase, and the count of store calls in flight.

    Phases: ``starting`` -> ``ready`` (or ``failed``) -> ``draining`` -> ``stopped``.
    """

    def __init__(self, settings: Settings, source: RuntimeSource, *, startup_gate: threading.Event | None,
                 broadcaster: Broadcaster) -> None:
        self.settings = settings
        self._source = source
        self._owns_runtime = not isinstance(source, Runtime)
        self.gate = startup_gate
        self.broadcaster = broadcaster
        self.runtime: Runtime | None = None
        self.search: SearchService | None = None
        self.runner: MirrorRunner | None = None
        self.capture: CaptureRunner | None = None
        self.tailer: ExternalWriteTailer | None = None
        self.upkeep: StoreUpkeep | None = None
        self.spool: SpoolDrainer | None = None  # once ready
        self.forwarder: Forwarder | None = None  # remote mode's, once ready
        self.context_memo: ContextMemo | None = None
        self.read_threads = max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                else os.cpu_count() or 2)
        self._read_limiter: anyio.CapacityLimiter | None = None
        self.backlog: tuple[float, dict[str, Any]] | None = None  # /api/health's last read of the queue, and when
        self.phase = "starting"
        self.detail = "waiting to start"
        self.started_at = time.time()
        self._cond = threading.Condition(threading.RLock())
        self._inflight = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._startup, name="memcairn-startup", daemon=True)
        self._thread.start()

    def _startup(self) -> None:
        try:
            if self.gate is not None:
                self.detail = "waiting for the startup gate"
                while not self.gate.wait(0.05):
                    if self._stop.is_set():
                        return
            self.detail = "opening the store (migrations, keyword index check) and the vector mirror"
            source = self._source
            runtime = source if isinstance(source, Runtime) else (source or worker_runtime)(self.settings)
            if self._stop.is_set():
                if self._owns_runtime:
                    runtime.close()
                return
            search = SearchService(runtime.store, runtime.mirror,
                                   recency_window_days=self.settings.recency_window_days,
                                   mirror_error=runtime.mirror_error,
                                   evidence_snippets=self.settings.search_evidence_snippets,
                                   freshness=checker_for(runtime.store))
            bridge = StoreEventBridge(runtime.store, self.broadcaster)
            runtime.store.add_listener(bridge)
            tailer = ExternalWriteTailer(bridge)  # other processes' writes, from the store's change log
            runner = None
            if runtime.mirror is not None:
                warm = getattr(runtime.mirror.index, "warm", None)
                if callable(warm):  # the sqlite-vec index starts reading its binary scan
                    try:
                        warm()
                    except Exception as exc:  # noqa: BLE001 - queries keep the exact path
                        log.warning("the vector index could not start its scan: %s", exc)

                runner = MirrorRunner(runtime.mirror)
                runtime.store.add_listener(runner.nudge)
                runner.start()  # its first pass is the backfill
            if self.settings.worker_keyword_index:
                runtime.store.start_keyword_index()  # built in the background; SQL ranks until it is ready
            capture = self._start_capture(runtime)  # picks up events a crash left pending
            memo = ContextMemo.for_store(runtime.store)
            tailer.start()
            upkeep = StoreUpkeep(runtime.store, interval_seconds=self.settings.integrity_check_seconds,
                                 on_requeue=lambda _count: capture.nudge())
            upkeep.start()
            with self._cond:
                abandoned = self.phase != "starting"  # shutdown began while the store was opening
                if not abandoned:
                    self.runtime, self.search, self.runner = runtime, search, runner
                    self.capture, self.context_memo, self.tailer = capture, memo, tailer
                    self.upkeep = upkeep
                    self.phase, self.detail = "ready", "ready"
            if abandoned:
                upkeep.stop(RUNNER_STOP_SECONDS)
                tailer.stop(RUNNER_STOP_SECONDS)
                memo.close()
                capture.stop(RUNNER_STOP_SECONDS)
                if runner is not None:
                    runner.stop(RUNNER_STOP_SECONDS)
                if self._owns_runtime:
                    runtime.close()
                return
            log.info("worker ready (store %s, mirror %s)", runtime.store.path,
                     "off" if runtime.mirror is None else runtime.mirror.index.name)
            self.broadcaster.publish_threadsafe("status", self.status_event())
            self._start_spool()
            self._start_forwarder(runtime)
        except Exception as exc:
            log.exception("worker startup failed")
            with self._cond:
                if self.phase == "starting":
                    self.phase = "failed"
                    self.detail = f"startup failed: {exc}; see the worker log, fix the cause and restart the worker"

    def _start_spool(self) -> None:
        """Drain what hooks spooled while no worker took their events: now, then every second."""

        def on_pass(report: DrainReport) -> None:
            log.info("spool: %d event(s) queued, %d already queued, %d set aside", report.queued,
                     report.duplicates, report.rejected)

        accept = intake_accept(self.settings, lambda: self.require().store, self._nudge_capture)
        drainer = SpoolDrainer(str(self.settings.home), accept, on_pass=on_pass)
        with self._cond:
            if self.phase != "ready":
                return
            self.spool = drainer
        drainer.start()

    def _start_forwarder(self, runtime: Runtime) -> None:
        """Remote mode's forwarder: idle (a look at remote.json a second) until `memcairn connect`."""
        forwarder = Forwarder(runtime.store, self.settings.home)
        with self._cond:
            if self.phase != "ready":
                return
            self.forwarder = forwarder
        runtime.store.add_listener(forwarder.nudge)
        forwarder.start()

    def _start_capture(self, runtime: Runtime) -> CaptureRunner:
        try:
            compressor = make_compressor(self.settings, runtime.store)
        except MemcairnError as exc:
            log.error("capture backend not usable (%s); the offline extractor compresses instead", exc)
            runtime.store.add_capture_notice("llm_config", f"memory capture: {exc}; the offline extractor is used")
            compressor = None
        pipeline = CapturePipeline(runtime.store, self.settings, compressor=compressor)

        def on_pass(report: CaptureReport) -> None:
            self.broadcaster.publish_threadsafe("processing", {
                "events": report.events, "observations": report.observations, "summaries": report.summaries,
                "prompts": report.prompts, "fallbacks": report.fallbacks, "failed": report.failed,
                "queue": runtime.store.ingest_queue()})

        capture = CaptureRunner(pipeline, on_pass=on_pass)
        capture.start()
        return capture

    def _nudge_capture(self) -> None:
        if self.capture is not None:
            self.capture.nudge()

    def begin_drain(self) -> None:
        """Refuse new store requests with 503 and end event streams (safe in a signal handler: no lock, no I/O)."""
        if self.phase in ("starting", "ready", "failed"):
            self.phase = "draining"
        self.detail = "the worker is shutting down"
        self.broadcaster.close_threadsafe()

    def shutdown(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """Blocking: wait (bounded) for store calls in flight, stop the mirror thread, close the runtime."""
        self._stop.set()
        with self._cond:
            if self.phase != "stopped":
                self.phase = "draining"
                self.detail = "the worker is shutting down"
            if not self._cond.wait_for(lambda: self._inflight == 0, timeout=drain_seconds):
                log.warning("%d store call(s) still running after %.0f s; closing anyway", self._inflight,
                            drain_seconds)
        if self._thread is not None:
            self._thread.join(drain_seconds)
        if self.spool is not None:  # what it has not drained stays spooled for the next worker
            self.spool.stop(RUNNER_STOP_SECONDS)
        if self.forwarder is not None:  # what it has not sent waits above the watermark for the next worker
            self.forwarder.stop(RUNNER_STOP_SECONDS)
        if self.upkeep is not None:
            self.upkeep.stop(RUNNER_STOP_SECONDS)
        if self.tailer is not None:
            self.tailer.stop(RUNNER_STOP_SECONDS)
        if self.capture is not None:
            self.capture.stop(RUNNER_STOP_SECONDS)
        if self.runner is not None:
            self.runner.stop(RUNNER_STOP_SECONDS)
        with self._cond:
            runtime, self.runtime = self.runtime, None
            memo, self.context_memo = self.context_memo, None
            self.phase, self.detail = "stopped", "the worker has stopped"
        if memo is not None:
            memo.close()
        if runtime is not None and self._owns_runtime:
            runtime.close()
        log.info("worker stopped")

    # requests -------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.phase == "ready"

    def require(self) -> Runtime:
        if self.phase == "ready" and self.runtime is not None:
            return self.runtime
        if self.phase in ("draining", "stopped"):
            raise NotReady("shutting_down", self.detail)
        raise NotReady("not_ready", self.detail)

    async def call(self, fn: Callable[..., Any], *args: Any, write: bool = False, **kwargs: Any) -> Any:
        """Run ``fn`` on the thread pool, counted so shutdown waits for it; writes are refused once
        shutdown began (nothing is written by a refused call).

        Reads (searches, timelines, contexts, records) run at most ``read_threads`` at a time: they are
        CPU-bound (SQLite, numpy, the embedding model), so more of them at once than there are cores only
        add GIL hand-offs and cache misses (8 concurrent hybrid searches on 2 cores: 45 req/s with the
        default 40 threads, 61 with 2). Writes keep the default pool, so a hook's event never queues
        behind searches."""
        self.require()

        def job() -> Any:
            with self._cond:
                if self.runtime is None or (write and self.phase != "ready"):
                    raise NotReady("shutting_down" if self.phase in ("draining", "stopped") else "not_ready",
                                   self.detail)
                self._inflight += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._cond:
                    self._inflight -= 1
                    self._cond.notify_all()

        if write:
            return await run_in_threadpool(job)
        if self._read_limiter is None:  # made here: a limiter belongs to the running event loop
            self._read_limiter = anyio.CapacityLimiter(self.read_threads)
        return await anyio.to_thread.run_sync(job, limiter=self._read_limiter)

    def status_event(self) -> dict[str, Any]:
        return {"state": self.phase, "ready": self.ready, "detail": self.detail}


def worker_runtime(cfg: Settings) -> Runtime:
    """The worker's runtime: its model runs ``worker_embedding_threads`` threads per call. Requests run side
    by side (one read per core), so one thread each embeds a query fastest (about 20 ms instead of 25 for a
    whole hybrid search at 100k items, 2 cores) and 8 concurrent searches gain ~17%; a backfill then embeds
    about half as fast as with every core."""
    return open_runtime(cfg, embedding_threads=cfg.worker_embedding_threads)
