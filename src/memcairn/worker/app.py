"""The worker's HTTP API (Starlette): one process owns the store, the mirror and the model; every door
(hooks, MCP, viewer, CLI) talks to it over loopback.

- **Startup** happens on a background thread started by the lifespan (migrations, FTS drift check, the
  vector mirror and its catch-up thread), so ``/api/health`` answers at once; ``/api/readiness`` and
  every route that needs the store answer 503 ``not_ready`` until it is done.
- **Errors** are JSON ``{"error", "detail"}``: 400 for a malformed request, 404 for an unknown item or
  route, 413 for a large body, 503 while starting or stopping, 507 ``disk_full`` when the disk is full, 500
  ``store_damaged`` while the file fails SQLite's check (writes refused; ``/api/health`` names the fix), a
  generic 500 (trace in the log only).
- **Blocking work** (SQLite, embedding) runs in the thread pool; the event loop only routes.
- **Shutdown** drains: on the signal, event streams end and requests arriving afterwards get 503
  ``shutting_down`` (nothing is written by them); store calls in flight finish; then the mirror thread
  stops and the runtime closes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import memcairn
from memcairn.capture.admission import project_excluded, scrub_item
from memcairn.capture.llm.compressor import local_day_start_ms
from memcairn.capture.privacy import scrub_event
from memcairn.config import Settings, check_bind, load_settings
from memcairn.context_memo import Answer, ContextMemo
from memcairn.doctor import HOOKS_HEARD_MS
from memcairn.errors import (
    DiskFullError,
    MemcairnError,
    NotFoundError,
    StoreDamagedError,
    StoreError,
    ValidationError,
)
from memcairn.fastjson import encode_json, loads
from memcairn.models import NewItem
from memcairn.protocol import (
    CONTEXT_HEADER,
    CONTEXT_PATH,
    EVENT_KEY_FIELD,
    INIT_PATH,
    MAX_BODY_BYTES,
    OBSERVATIONS_PATH,
    ROUTE_EVENT_TYPES,
    SUMMARIZE_PATH,
)
from memcairn.runtime import Runtime, open_runtime
from memcairn.store.protocols import LocalStore
from memcairn.team_client import team_id, team_ref
from memcairn.worker import remote_reads
from memcairn.worker.events import HEARTBEAT_SECONDS, Broadcaster, ExternalWriteTailer, StoreEventBridge
from memcairn.worker.fields import parse_json, text_field, text_list
from memcairn.worker.intake import INGEST_ROUTES, accept_event, ingest_fields
from memcairn.worker.openapi import MAX_BATCH_IDS, MAX_ITEM_ID, build_openapi
from memcairn.worker.security import BodyLimitMiddleware, GuardMiddleware
from memcairn.worker.upkeep import StoreUpkeep

log = logging.getLogger("memcairn.worker")

STATIC_DIR = Path(__file__).with_name("static")
PLACEHOLDER = "<!doctype html><title>memcairn</title><p>memcairn worker is running; the viewer is not installed.</p>\n"
DRAIN_SECONDS = 10.0
ACK_SECONDS = 0.5  # a hook's event whose insert takes longer (a held write lock) is acknowledged once spooled
RUNNER_STOP_SECONDS = 5.0
# Fields of hook events that must be text when present (the rest of a payload is kept as sent).
TEXT_PAYLOAD_FIELDS = ("prompt", "last_assistant_message", "tool_name", "transcript_path", "narration")
KIND_ROUTES = {"observation": "observation", "summary": "summary", "prompt": "prompt", "memory": None}

# CONTEXT_HEADER says how /api/context/inject got its text: "memo" (a memoized render) or "rendered" (rendered for
# this request), or one of these:
RESUMED = "resumed"  # the CONTEXT_HEADER value of RESUMED_NOTE
EXCLUDED = "excluded"  # the CONTEXT_HEADER value of the empty answer for a project exclude_projects names
RESUMED_NOTE = ("memcairn: no new memories since this session started; its memory context is earlier in this "
                "conversation.")
RESUME_GRACE_MS = 30_000
# The SessionStart event is recorded after its context was rendered (the hook sends it once the context
# arrived; older hooks sent both together): what was stored this long before the recorded start counts as new
# (a full context, never a missing memory).
RESUME_SLACK_MS = 10_000

RuntimeSource = Runtime | Callable[[Settings], Runtime] | None


# -- errors -----------------------------------------------------------------------------------------
class NotReady(Exception):
    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail


def _clean(value: Any) -> Any:
    """NaN and infinities (which strict JSON cannot carry) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=False, allow_nan=False, default=str, separators=(",", ":"))
        except ValueError:
            text = json.dumps(_clean(content), ensure_ascii=False, allow_nan=False, default=str,
                              separators=(",", ":"))
        return text.encode("utf-8")


def error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSON:
    return JSON({"error": code, "detail": detail}, status_code=status, headers=headers)


Endpoint = Callable[[Request], Awaitable[Response]]


def endpoint(fn: Endpoint) -> Endpoint:
    """Translate errors into JSON answers; nothing but a generic message leaves the process on a bug."""

    @functools.wraps(fn)
    async def wrapper(request: Request) -> Response:
        try:
            return await fn(request)
        except NotReady as exc:
            return error(503, exc.error, exc.detail, {"Retry-After": "1"})
        except ValidationError as exc:
            return error(400, "invalid_request", str(exc))
        except NotFoundError as exc:
            return error(404, "not_found", str(exc))
        except OverflowError:
            return error(400, "invalid_request", "a number in the request is out of range")
        except DiskFullError as exc:
            log.error("disk full on %s %s: %s", request.method, request.url.path, exc)
            return await on_disk_full(request, str(exc)) or error(507, "disk_full", str(exc))
        except StoreDamagedError as exc:
            return error(500, "store_damaged", str(exc))
        except StoreError as exc:
            log.error("store error on %s %s: %s", request.method, request.url.path, exc)
            return error(500, "store_error", str(exc))
        except sqlite3.DatabaseError as exc:  # a state of the file (a damaged page, a full disk) or a defect
            answer = _database_error(request, exc)
            if answer is not None:
                return answer
            log.exception("unexpected error on %s %s", request.method, request.url.path)
            return error(500, "internal_error", "unexpected error; the details are in the worker log")
        except MemcairnError as exc:
            log.error("error on %s %s: %s", request.method, request.url.path, exc)
            return error(500, "error", str(exc))
        except Exception:
            log.exception("unexpected error on %s %s", request.method, request.url.path)
            return error(500, "internal_error", "unexpected error; the details are in the worker log")

    return wrapper


async def on_disk_full(request: Request, detail: str) -> Response | None:
    """A full disk refused a request: the drainer empties the WAL before anything more is written (freeing the
    reserve for the checkpoint if need be); a hook's event is held in memory and acknowledged as held. None:
    answer 507 as before."""
    state: WorkerState = request.app.state.worker
    drainer = state.spool  # it flushes the held events, once the worker is ready
    if drainer is None:
        return None
    held = drainer.held
    if state.runtime is not None:
        held.checkpoint = state.runtime.store.checkpoint
    held.disk_full = True
    drainer.nudge()  # the drainer empties the WAL (in the reserve if need be) before it writes anything more
    if request.method != "POST" or request.url.path not in ROUTE_EVENT_TYPES:
        return None
    try:
        body = await request.body()  # read by the route already: Starlette keeps it
        data = loads(body)
    except Exception:  # noqa: BLE001 - no body to hold: the 507 stands
        return None
    key = data.get(EVENT_KEY_FIELD) if isinstance(data, dict) else None
    if isinstance(key, str) and key:
        body = encode_json(scrub_event(data))  # it may go to the spool: no secret rests on disk (admission again later)
    if not isinstance(key, str) or not key or not held.hold(key, request.url.path, body):
        return None
    log.warning("the disk is full: a %s event is held in memory (%d held) until the disk has room",
                request.url.path, len(held))
    return JSONResponse({"status": "accepted", "held": HELD, "duplicate": False,
                         "detail": f"the disk is full; the event is held in the worker's memory and queued once "
                                   f"there is room ({detail})"}, status_code=202)


def _database_error(request: Request, exc: sqlite3.DatabaseError) -> Response | None:
    """The answer for an SQLite error that names a state of the file, else None. Damage is reported to the
    store, whose upkeep checks the file and repairs the keyword index at once."""
    from memcairn.store.db import describe_open_error, error_kind
    from memcairn.store.integrity import damaged_file_advice

    state: WorkerState = request.app.state.worker
    runtime = state.runtime
    kind = runtime.store.note_error(exc) if runtime is not None else error_kind(exc)
    path = str(state.settings.db_path)
    if kind == "full":
        log.error("disk full on %s %s: %s", request.method, request.url.path, exc)
        return error(507, "disk_full", describe_open_error(path, exc))
    if kind == "corrupt":
        log.error("damaged database on %s %s: %s", request.method, request.url.path, exc)
        return error(500, "store_damaged", f"{path} is damaged ({exc}); the worker checks it now; "
                     f"{damaged_file_advice(path)}")
    if kind == "missing_fts":
        log.error("keyword index missing on %s %s: %s", request.method, request.url.path, exc)
        return error(500, "keyword_index_damaged", f"the keyword index is missing ({exc}); the worker rebuilds "
                     "it now, else `memcairn doctor --fix`")
    return None


HELD = "memory"  # a held event's answer's ``held``: where the event waits (worker/held_events.py)


# -- state --------------------------------------------------------------------------------------------
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
        self.search: Any = None
        self.runner: Any = None
        self.capture: Any = None
        self.tailer: ExternalWriteTailer | None = None
        self.upkeep: Any = None
        self.spool: Any = None  # the spool drainer (worker/spool_drain.py), once ready
        self.forwarder: Any = None  # remote mode's forwarder (worker/forwarder.py), once ready
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
            runtime = source if isinstance(source, Runtime) else (source or _worker_runtime)(self.settings)
            if self._stop.is_set():
                if self._owns_runtime:
                    runtime.close()
                return
            from memcairn.search import SearchService

            search = SearchService(runtime.store, runtime.mirror,
                                   recency_window_days=self.settings.recency_window_days,
                                   mirror_error=runtime.mirror_error)
            bridge = StoreEventBridge(runtime.store, self.broadcaster)
            runtime.store.add_listener(bridge)
            tailer = ExternalWriteTailer(bridge)  # other processes' writes, from the store's change log
            runner = None
            if runtime.mirror is not None:
                from memcairn.mirror.background import MirrorRunner

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
        from memcairn.worker.spool_drain import SpoolDrainer, intake_accept

        def on_pass(report: Any) -> None:
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
        from memcairn.worker.forwarder import Forwarder

        forwarder = Forwarder(runtime.store, self.settings.home)
        with self._cond:
            if self.phase != "ready":
                return
            self.forwarder = forwarder
        runtime.store.add_listener(forwarder.nudge)
        forwarder.start()

    def _start_capture(self, runtime: Runtime) -> Any:
        from memcairn.capture.background import CaptureRunner
        from memcairn.capture.llm import make_compressor
        from memcairn.capture.pipeline import CapturePipeline

        try:
            compressor = make_compressor(self.settings, runtime.store)
        except MemcairnError as exc:
            log.error("capture backend not usable (%s); the offline extractor compresses instead", exc)
            runtime.store.add_capture_notice("llm_config", f"memory capture: {exc}; the offline extractor is used")
            compressor = None
        pipeline = CapturePipeline(runtime.store, self.settings, compressor=compressor)

        def on_pass(report: Any) -> None:
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


def _worker_runtime(cfg: Settings) -> Runtime:
    """The worker's runtime: its model runs ``worker_embedding_threads`` threads per call. Requests run side
    by side (one read per core), so one thread each embeds a query fastest (about 20 ms instead of 25 for a
    whole hybrid search at 100k items, 2 cores) and 8 concurrent searches gain ~17%; a backfill then embeds
    about half as fast as with every core."""
    return open_runtime(cfg, embedding_threads=cfg.worker_embedding_threads)


# -- request helpers --------------------------------------------------------------------------------
async def read_json(request: Request) -> dict[str, Any]:
    return parse_json(await request.body())


def _raw_param(request: Request, name: str) -> str | None:
    """The one value of a single-valued parameter as sent (blank included); None when absent.

    Raises:
        ValidationError: the parameter is given more than once (which value was meant cannot be known).
    """
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise ValidationError(f"{name} was given {len(values)} times; give it once")
    return values[0] if values else None


def _param(request: Request, *names: str) -> str | None:
    """The value of the first of ``names`` given and not blank, stripped; None when absent."""
    for name in names:
        value = _raw_param(request, name)
        if value is not None and value.strip():
            return value.strip()
    return None


def _params(request: Request, *names: str) -> list[str] | None:
    """Every value of the parameters, repeated or comma-separated; None when absent."""
    out: list[str] = []
    for name in names:
        for value in request.query_params.getlist(name):
            out += [v.strip() for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(out)) or None


def _projects(request: Request) -> list[str] | None:
    """``projects`` is a comma-separated list; each ``project`` is one whole name, so a name holding a comma
    (a directory named ``client,server``) is not read as other projects."""
    whole = [v.strip() for v in request.query_params.getlist("project") if v.strip()]
    return list(dict.fromkeys([*(_params(request, "projects") or []), *whole])) or None


def _flag(request: Request, name: str) -> bool:
    value = (request.query_params.get(name) or "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValidationError(f"{name} must be true or false, got {value!r}")


def _format(request: Request) -> str:
    value = _param(request, "format") or "index"
    if value not in ("index", "json"):
        raise ValidationError(f"format must be index or json, got {value!r}")
    return value


def _path_id(request: Request) -> int:
    item_id = request.path_params["id"]
    if not 0 < item_id <= MAX_ITEM_ID:
        raise NotFoundError(f"no memory with id {item_id}")
    return item_id


def _state(request: Request) -> WorkerState:
    return request.app.state.worker


# -- routes -----------------------------------------------------------------------------------------
@endpoint
async def health(request: Request) -> Response:
    """Liveness (always 200 while the process serves HTTP, so a probe never restarts a worker for its store's
    state); ``status`` is ``ok``, or ``degraded`` when the store's state is not ``ok`` or the capture queue is
    stuck, each named in ``problems`` with its section (``store``, ``queue``) holding the fix."""
    state = _state(request)
    upkeep = state.upkeep
    store = upkeep.status() if upkeep is not None else None
    queue = await _queue_health(state)
    problems = [f"store {store['state']}"] if store is not None and store["state"] != "ok" else []
    if queue is not None and queue["state"] != "ok":
        problems.append(f"capture queue {queue['state']}")
    return JSON({"status": "degraded" if problems else "ok", "problems": problems, "pid": os.getpid(),
                 "port": state.settings.port, "version": memcairn.__version__, "ready": state.ready,
                 "state": state.phase, "started_at": int(state.started_at), "store": store, "queue": queue})


BACKLOG_SECONDS = 1.0  # a probe polling health reads the queue at most once a second (a thread hop: ~0.3 ms)


async def _queue_health(state: WorkerState) -> dict[str, Any] | None:
    """The capture queue's state (``CaptureRunner.queue_state``) once the worker is ready; None before."""
    runtime, capture = state.runtime, state.capture
    if runtime is None or capture is None or not state.ready:
        return None
    now = time.monotonic()
    if state.backlog is not None and now - state.backlog[0] < BACKLOG_SECONDS:
        backlog = state.backlog[1]
    else:
        try:
            backlog = await run_in_threadpool(runtime.store.ingest_backlog)  # index seeks; never behind searches
        except Exception as exc:  # noqa: BLE001 - health answers whatever the store does
            return {"state": "unknown", "detail": f"the queue cannot be read: {exc}"}
        state.backlog = (now, backlog)
    return {**capture.queue_state(backlog["pending"], backlog["oldest_pending_epoch"]),
            "failed": backlog["failed"]}


@endpoint
async def readiness(request: Request) -> Response:
    _state(request).require()
    return JSON({"status": "ready"})


def _mirror_summary(runtime: Runtime, runner: Any) -> dict[str, Any]:
    mirror = runtime.mirror
    if mirror is None:
        disabled = runtime.settings.vector_backend == "none"
        return {"state": "disabled" if disabled else "unavailable", "error": runtime.mirror_error,
                "lag": None, "outbox": None}
    status = mirror.status()
    return {"state": status["state"], "backend": status["backend"], "model": status["model"],
            "lag": sum(r["lag"] for r in status["rows"]), "outbox": status["outbox"],
            "last_error": status["last_error"], "runner": runner is not None}


@endpoint
async def stats(request: Request) -> Response:
    state = _state(request)
    runtime = state.require()

    def collect() -> dict[str, Any]:
        out = runtime.store.stats()
        out["mirror"] = _mirror_summary(runtime, state.runner)
        out["ingest"] = runtime.store.ingest_queue()
        out["hooks_heard"] = runtime.store.live_hook_platforms(int(time.time() * 1000) - HOOKS_HEARD_MS)
        out["llm_tokens_today"] = runtime.store.tokens_spent(since_epoch=local_day_start_ms())
        out["search"] = state.search.telemetry_snapshot() if state.search is not None else None
        out["keyword_index"] = runtime.store.keyword_index_stats()
        out["remote"] = dict(state.forwarder.status) if state.forwarder is not None else {"mode": "local"}
        out["worker"] = {"pid": os.getpid(), "version": memcairn.__version__,
                         "uptime_seconds": round(time.time() - state.started_at, 1),
                         "stream_clients": state.broadcaster.subscribers}
        return out

    return JSON(await state.call(collect))


@endpoint
async def projects(request: Request) -> Response:
    state = _state(request)
    runtime = state.require()
    rows = await state.call(runtime.store.projects)
    return JSON({"projects": [{"name": p.name, "merged_into_project": p.merged_into_project, "items": p.items,
                               "last_epoch": p.last_epoch} for p in rows]})


@endpoint
async def search(request: Request) -> Response:
    from memcairn.search import SearchRequest, parse_tz, render_index

    state = _state(request)
    state.require()
    fmt = _format(request)
    tz = parse_tz(_param(request, "tz"))
    req = SearchRequest(
        query=_param(request, "query", "q") or "",
        projects=_projects(request),
        kinds=_params(request, "kind", "kinds"),
        types=_params(request, "type", "obs_type"),
        concepts=_params(request, "concepts", "concept"),
        files=_params(request, "files", "file"),
        date_start=_param(request, "dateStart"),
        date_end=_param(request, "dateEnd"),
        platform_source=_param(request, "platformSource"),
        limit=_param(request, "limit") or 20,
        offset=_param(request, "offset") or 0,
        order=_param(request, "orderBy"),
        mode=_param(request, "mode"),
        min_score=_param(request, "min_score", "minScore"),
        tz=tz,
    )
    team = await _team_search(state, req) if _team_answerable(req) else None
    if team is not None and not isinstance(team, str):
        if fmt == "index":
            return JSON({"format": "index", "text": remote_reads.team_index_text(team), "strategy": "team",
                         "fallback_reason": None, "notes": team["notes"], "counts": team["counts"], "hidden": 0,
                         "latency_ms": team["latency_ms"], "source": "team",
                         "rows": remote_reads.team_index_rows(team, tz)})
        return JSON({"format": "json", **team})
    result = await state.call(state.search.search, req)
    if isinstance(team, str):  # remote mode, the server did not answer: the local copy, saying so
        result = dataclasses.replace(result, fallback_reason=remote_reads.FALLBACK_REASON,
                                     notes=[*result.notes, f"{team}; answered from the local copy"])
    if fmt == "index":
        from memcairn.search.rows import result_rows

        out = {"format": "index", "text": render_index(result, tz=tz), "strategy": result.strategy,
               "fallback_reason": result.fallback_reason, "notes": list(result.notes), "counts": result.counts,
               "hidden": result.hidden, "latency_ms": result.latency_ms, "rows": result_rows(result, tz)}
    else:
        out = {"format": "json", **result.to_dict()}
    return JSON(out)


def _team_answerable(req: Any) -> bool:
    """A plain query (words, projects, limit, mode) is what the team API answers; filters stay local."""
    return bool(req.query.strip()) and not any((req.kinds, req.types, req.concepts, req.files, req.date_start,
                                                req.date_end, req.platform_source, req.order)) \
        and not int(req.offset or 0) and req.min_score is None


async def _team_search(state: WorkerState, req: Any) -> dict[str, Any] | str | None:
    """Remote mode: the team server's result, or why it gave none (a string); None in local mode."""
    cfg = remote_reads.remote_config(state.settings)
    if cfg is None:
        return None
    started = time.perf_counter()
    params: dict[str, Any] = {"query": req.query, "limit": int(req.limit or 20)}
    if req.mode in ("keyword", "semantic"):
        params["mode"] = req.mode
    if req.projects:
        params["project"] = [cfg.server_project(p) for p in req.projects]
    body, why = await remote_reads.ask(state.settings, cfg, "/v1/search", params)
    if body is None:
        assert why is not None
        return why
    return remote_reads.team_search_result(body, cfg, (time.perf_counter() - started) * 1000)


@endpoint
async def timeline(request: Request) -> Response:
    from memcairn.search import parse_tz, render_timeline

    state = _state(request)
    state.require()
    fmt = _format(request)
    tz = parse_tz(_param(request, "tz"))
    team_anchor = team_id(_param(request, "anchor"))
    if team_anchor is not None:  # remote mode: a team search's id; the server's timeline in the anchor's project
        return await _team_timeline(request, state, team_anchor, fmt, tz)
    result = await state.call(
        state.search.timeline, anchor=_param(request, "anchor"), query=_param(request, "query"),
        depth_before=_param(request, "before", "depth_before") or 10,  # depth_*: the earlier names
        depth_after=_param(request, "after", "depth_after") or 10,
        projects=_projects(request), tz=tz,
    )
    if fmt == "index":
        return JSON({"format": "index", "text": render_timeline(result, tz=tz), "anchor_id": result.anchor_id,
                     "notes": list(result.notes), "strategy": result.strategy})
    return JSON({"format": "json", **result.to_dict()})


async def _team_timeline(request: Request, state: WorkerState, anchor: int, fmt: str, tz: Any) -> Response:
    from memcairn.search.request import clamp
    from memcairn.search.timeline import MAX_DEPTH

    if _param(request, "query") is not None:
        raise ValidationError("give anchor or query, not both")
    notes: list[str] = []
    before = clamp(_param(request, "before", "depth_before") or 10, 0, MAX_DEPTH, "depth_before", notes)
    after = clamp(_param(request, "after", "depth_after") or 10, 0, MAX_DEPTH, "depth_after", notes)
    try:
        rows = await remote_reads.team_timeline(state.settings, anchor, before, after)
    except remote_reads.TeamReadFailed as exc:
        return _team_failed(exc)
    ref = team_ref(anchor)
    if fmt == "index":
        return JSON({"format": "index", "text": remote_reads.team_timeline_text(anchor, rows, tz, notes),
                     "anchor_id": ref, "notes": notes, "strategy": "team", "source": "team"})
    return JSON({"format": "json", "anchor_id": ref, "strategy": "team", "source": "team", "notes": notes,
                 "items": [remote_reads.team_record(item, "raw", tz) for item, _ in rows]})


def _team_failed(exc: remote_reads.TeamReadFailed) -> Response:
    """Not connected: a request this worker cannot answer (400); else the team server failed it (502: this
    worker is fine, so no 503 that clients read as a worker still starting)."""
    if isinstance(exc, remote_reads.NotConnected):
        return error(400, "invalid_request", str(exc))
    return error(502, remote_reads.FALLBACK_REASON, str(exc))


def _batch_ids(ids: list[Any]) -> tuple[list[int], list[int]]:
    """(local ids, team server ids) of a batch: whole numbers, or ``team#N`` in remote mode."""
    local, team = [], []
    for i in ids:
        number = team_id(i)
        if number is not None:
            team.append(number)
        elif isinstance(i, int) and not isinstance(i, bool):
            if not 0 < i <= MAX_ITEM_ID:
                raise ValidationError(f"ids must be between 1 and {MAX_ITEM_ID}")
            local.append(i)
        else:
            raise ValidationError("ids must be whole numbers, or a team server's ids as \"team#12\", e.g. [12, 15]")
    return local, team


@endpoint
async def observations_batch(request: Request) -> Response:
    state = _state(request)
    runtime = state.require()
    data = await read_json(request)
    ids = data.get("ids")
    if not isinstance(ids, list) or not ids:
        raise ValidationError("ids is required: a non-empty list of item ids, e.g. {\"ids\": [12, 15]}")
    if len(ids) > MAX_BATCH_IDS:
        raise ValidationError(f"at most {MAX_BATCH_IDS} ids per request")
    if all(isinstance(i, int) and not isinstance(i, bool) for i in ids) and not all(0 < i <= MAX_ITEM_ID
                                                                                    for i in ids):
        raise ValidationError(f"ids must be between 1 and {MAX_ITEM_ID}")
    local, team = _batch_ids(ids)
    from memcairn.search import parse_tz
    from memcairn.search.records import agent_record, check_format

    if any(not isinstance(data[key], str) for key in ("format", "tz") if key in data):
        raise ValidationError("format and tz must be strings, e.g. {\"format\": \"agent\", \"tz\": \"UTC\"}")
    fmt, tz = check_format(data.get("format")), parse_tz(data.get("tz"))
    items = await state.call(runtime.store.get_items, local) if local else []
    found = {i.id for i in items}
    records = [agent_record(i, tz) if fmt == "agent" else i.to_dict() for i in items]
    if not team:
        return JSON({"items": records, "missing": [i for i in dict.fromkeys(ids) if i not in found]})
    try:
        held, _ = await remote_reads.team_items(state.settings, list(dict.fromkeys(team)))
    except remote_reads.TeamReadFailed as exc:
        return _team_failed(exc)
    by_ref: dict[Any, dict[str, Any]] = {r["id"]: r for r in records}
    by_ref.update({team_ref(n): remote_reads.team_record(item, fmt, tz) for n, item in held.items()})
    asked = list(dict.fromkeys(team_ref(n) if (n := team_id(i)) is not None else i for i in ids))
    return JSON({"items": [by_ref[i] for i in asked if i in by_ref], "missing": [i for i in asked if i not in by_ref]})


def _kind_of(request: Request) -> str | None:
    return KIND_ROUTES[request.url.path.split("/")[2]]


@endpoint
async def get_item(request: Request) -> Response:
    state = _state(request)
    runtime = state.require()
    item_id, kind = _path_id(request), _kind_of(request)
    item = await state.call(runtime.store.get_item, item_id)
    if kind is not None and item.kind != kind:
        raise NotFoundError(f"#{item_id} is a {item.kind}, not a {kind}; read it at /api/memory/{item_id}")
    return JSON(item.to_dict())


@endpoint
async def delete_item(request: Request) -> Response:
    state = _state(request)
    runtime = state.require()
    item_id, kind = _path_id(request), _kind_of(request)

    def remove() -> dict[str, Any]:
        item = runtime.store.get_item(item_id)
        if kind is not None and item.kind != kind:
            raise NotFoundError(f"#{item_id} is a {item.kind}, not a {kind}; delete it at /api/memory/{item_id}")
        if not runtime.store.delete_items([item_id]):
            raise NotFoundError(f"no memory with id {item_id}")
        # The outbox (filled by a trigger) tells the mirror too; this drops the vectors now instead of at the
        # runner's next pass. It is idempotent, so the outbox replaying it later is harmless.
        if runtime.mirror is not None:
            try:
                runtime.mirror.index.delete_where_sqlite_ids([item_id], project=item.project)
            except Exception as exc:  # the outbox retries it
                log.warning("could not drop #%d from the mirror now (the outbox will): %s", item_id, exc)
        return {"id": item_id, "deleted": True, "kind": item.kind}

    return JSON(await state.call(remove, write=True))


@endpoint
async def team_item(request: Request) -> Response:
    """``/api/memory/team/12``: a team server's memory (remote mode), search's ``team#12``."""
    state = _state(request)
    state.require()
    item_id = request.path_params["id"]
    ref = team_ref(item_id)
    if not 0 < item_id <= MAX_ITEM_ID:
        raise NotFoundError(f"no memory {ref}")
    try:
        held, _ = await remote_reads.team_items(state.settings, [item_id])
    except remote_reads.TeamReadFailed as exc:
        return _team_failed(exc)
    if item_id not in held:
        raise NotFoundError(f"the team server holds no memory {ref}")
    return JSON(remote_reads.team_record(held[item_id], "raw", None))


async def item_route(request: Request) -> Response:
    """One route per path for both methods, so a 405 names every allowed method."""
    return await (delete_item if request.method == "DELETE" else get_item)(request)


@endpoint
async def save_memory(request: Request) -> Response:
    state = _state(request)
    runtime = state.require()
    data = await read_json(request)
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise ValidationError("metadata must be a JSON object")
    item = NewItem(
        project=text_field(data, "project", max_chars=200) or "default",
        kind="manual",
        type=text_field(data, "type", max_chars=40),
        title=text_field(data, "title", blank_ok=True),
        text=text_field(data, "text", required=True, hint=": the memory to save, as text"),
        facts=text_list(data, "facts"),
        concepts=text_list(data, "concepts"),
        metadata=metadata or {},
        platform_source=text_field(data, "platform_source", "platformSource", max_chars=100, blank_ok=True),
    )
    item = scrub_item(item)  # the privacy rules of captured events: <private> parts out, secrets redacted
    if item.text is None:
        raise ValidationError("text holds nothing but <private> parts; nothing was saved")
    # An explicit save: content the user deleted before is stored again.
    result = await state.call(runtime.store.add_item, item, revive=True, write=True)
    return JSON({"id": result.id, "created": result.created})


def _ingest(path: str) -> Endpoint:
    event_type, required = INGEST_ROUTES[path]

    async def accept(request: Request) -> Response:
        state = _state(request)
        runtime = state.require()
        data = await read_json(request)
        fields = ingest_fields(data, required)

        def admit_and_queue() -> dict[str, Any]:
            return accept_event(runtime.store, state.settings, event_type, data, fields)

        job = asyncio.ensure_future(state.call(admit_and_queue, write=True))
        if fields.event_key is not None:  # a hook's event: durable in the spool is as good as queued
            done, _ = await asyncio.wait({job}, timeout=ACK_SECONDS)
            if not done and await _spool_late(state, path, data, job):
                return JSON({"status": "accepted", "spooled": True, "duplicate": False}, status_code=202)
        answer = await job
        if state.capture is not None and answer.get("duplicate") is False:
            state.capture.nudge()
        return JSON(answer, status_code=202)

    accept.__name__ = f"ingest_{event_type}"
    return endpoint(accept)


async def _spool_late(state: WorkerState, path: str, data: dict[str, Any], job: asyncio.Future) -> bool:
    """A write that waits (another process holds the store's write lock) is no outage: the event is written to
    the spool and acknowledged, the insert under way goes on, and the drainer queues the spooled copy once
    (``event_key``) after it, or in its place should it fail. False when the spool cannot be written."""
    from memcairn import spool

    try:
        # secrets out before the event rests on disk; the drainer admits the copy again as the route would
        await run_in_threadpool(lambda: spool.write(str(state.settings.home), path, encode_json(scrub_event(data))))
    except OSError as exc:
        log.warning("could not spool a slow %s event (%s); waiting for the store instead", path, exc)
        return False
    job.add_done_callback(lambda done: done.cancelled() or done.exception())  # its outcome is the spool's now
    return True


def _context_settings(request: Request, settings: Settings) -> Settings:
    """The settings with the budget lowered to ``maxTokens`` (an agent's own size limit); never raised."""
    value = _raw_param(request, "maxTokens")
    if value is None:
        return settings
    try:
        cap = int(value)  # blank is a mistake here, not "absent": only an agent's hook sends it
    except ValueError:
        raise ValidationError(f"maxTokens must be a whole number, got {value!r}") from None
    if cap < 1:
        raise ValidationError("maxTokens must be at least 1")
    return dataclasses.replace(settings, context_token_budget=min(settings.context_token_budget, cap))


@endpoint
async def context_inject(request: Request) -> Response:
    from memcairn.search import parse_tz

    state = _state(request)
    runtime = state.require()
    # POST is the SessionStart hook giving the context to an agent: the capture notices in it are then marked
    # shown. GET reads only (a person, the demo, a benchmark): the notices are in the text and stay unshown.
    mark = request.method == "POST"
    if mark and (await request.body()).strip():
        await read_json(request)  # the parameters are the query's; a body, when sent, must still be JSON
    names = _projects(request)
    platform = _param(request, "platformSource")
    colors, full, fresh = _flag(request, "colors"), _flag(request, "full"), _flag(request, "fresh")
    tz = parse_tz(_param(request, "tz"))
    settings = _context_settings(request, state.settings)
    if names and project_excluded(names, state.settings):  # the header tells the hook this is the worker
        return PlainTextResponse("", headers={CONTEXT_HEADER: EXCLUDED})
    memo = state.context_memo
    if memo is None:  # set with the runtime; a memo that always renders otherwise
        memo = ContextMemo(None)

    resumed = _resumed_session(request)

    def build() -> Answer:
        if runtime.store.damage is not None:  # writes are refused (marking notices shown too): say so on top
            notices = [f"memory is read-only: the database fails SQLite's check ({runtime.store.damage}); new "
                       "memories are not saved until it is restored: run `memcairn doctor`"]
        else:
            notices = runtime.store.take_capture_notices(names or None, mark=mark)
        # Capture warnings are shown at the top of a full context: a resume with some gets the context, or they
        # would wait for the next start.
        if resumed is not None and not notices and _unchanged_since_start(runtime.store, names, *resumed):
            return Answer(RESUMED_NOTE, RESUMED)
        return memo.render(runtime.store, settings, projects=names, platform_source=platform, colors=colors,
                           full=full, tz=tz, notices=notices, fresh=fresh)

    cfg = remote_reads.remote_config(state.settings) if names else None
    if cfg is not None and resumed is None:  # remote mode: the team's digest first
        body, why = await remote_reads.ask(state.settings, cfg, "/v1/context", {
            "project": [cfg.server_project(n) for n in names or ()], "max_tokens": settings.context_token_budget})
        if body is not None and isinstance(body.get("context"), str):
            return PlainTextResponse(body["context"], headers={CONTEXT_HEADER: "team",
                                                               remote_reads.REMOTE_HEADER: "team"})
        answer = await state.call(build)
        return PlainTextResponse(answer.text, headers={CONTEXT_HEADER: answer.source,
                                                       remote_reads.REMOTE_HEADER: "local-fallback",
                                                       remote_reads.FALLBACK_HEADER: str(why)[:300]})
    answer = await state.call(build)
    return PlainTextResponse(answer.text, headers={CONTEXT_HEADER: answer.source})


def _resumed_session(request: Request) -> tuple[str, str, int | None] | None:
    """(agent, session id, when the asking hook started or None) when the context is asked for a resumed session
    (``source=resume``), else None."""
    started = _param(request, "started")
    if started is not None and not (started.isascii() and started.isdecimal()):
        raise ValidationError(f"started must be epoch milliseconds (a whole number), got {started!r}")
    if (_param(request, "source") or "").lower() != "resume":
        return None
    agent, session = _param(request, "agent"), _param(request, "session")
    return (agent, session, int(started) if started is not None else None) if agent and session else None


def _unchanged_since_start(store: LocalStore, projects: list[str] | None, agent: str, session: str,
                           hook_started: int | None = None) -> bool:
    """A resumed Claude Code session replays the context its start was given; when nothing was stored, edited
    or deleted since that start (but by the session itself, whose work is in its conversation), giving it
    again only doubles it. Only starts whose context reached the agent count (``Store.earlier_session_start``):
    a start whose context request failed left nothing in the transcript to replay. The current resume's own
    SessionStart event is sent after this request by hooks that say when they started (``hook_started``): only
    events from before that count, so a resume right after the start is told too. An older hook may send its
    event beside this request: without ``hook_started``, events of the last ``RESUME_GRACE_MS`` do not count."""
    now = int(time.time() * 1000)
    before = min(hook_started, now) if hook_started is not None else now - RESUME_GRACE_MS
    started = store.earlier_session_start(agent, session, before_epoch=before)
    return started is not None and not store.stored_since(projects, started - RESUME_SLACK_MS,
                                                          besides_session=(agent, session))


async def stream(request: Request) -> Response:
    state = _state(request)
    first = ("status", state.status_event())
    return StreamingResponse(
        state.broadcaster.stream(first, heartbeat=request.app.state.heartbeat_seconds),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def openapi(request: Request) -> Response:
    return JSON(request.app.state.openapi)


async def index(request: Request) -> Response:
    page = request.app.state.static_dir / "index.html"
    if page.is_file():
        return FileResponse(page, media_type="text/html")
    return HTMLResponse(PLACEHOLDER)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    detail = exc.detail if exc.status_code != 404 else f"no route {request.url.path}; see /openapi.json"
    return error(exc.status_code, code, str(detail), dict(exc.headers or {}))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error(500, "internal_error", "unexpected error; the details are in the worker log")


async def _not_found_app(scope: Any, receive: Any, send: Any) -> None:
    await error(404, "not_found", "the viewer's static files are not installed")(scope, receive, send)


# -- the application --------------------------------------------------------------------------------
def make_app(runtime: RuntimeSource = None, settings: Settings | None = None, *,
             startup_gate: threading.Event | None = None, heartbeat_seconds: float = HEARTBEAT_SECONDS,
             max_body_bytes: int = MAX_BODY_BYTES, stream_queue_size: int = 256,
             static_dir: Path | None = None) -> Starlette:
    """The worker's ASGI app.

    ``runtime`` is an open ``Runtime`` (left open at shutdown: the caller owns it), or a callable
    ``factory(settings) -> Runtime`` (default ``open_runtime``; the app closes what it opened). Startup
    runs on a thread once the lifespan starts; with ``startup_gate`` it first waits for that event to be
    set (tests hold it to observe the not-ready answers).

    Raises:
        ConfigError: the settings bind to a non-loopback host without a token.
    """
    cfg = settings or (runtime.settings if isinstance(runtime, Runtime) else load_settings())
    check_bind(cfg)
    broadcaster = Broadcaster(stream_queue_size)
    state = WorkerState(cfg, runtime, startup_gate=startup_gate, broadcaster=broadcaster)

    @asynccontextmanager
    async def lifespan(app: Starlette):  # noqa: ANN202
        import asyncio

        broadcaster.bind(asyncio.get_running_loop())
        state.start()
        try:
            yield
        finally:
            state.begin_drain()
            broadcaster.close()
            await run_in_threadpool(state.shutdown)

    routes = [
        Route("/api/health", health),
        Route("/api/readiness", readiness),
        Route("/api/stats", stats),
        Route("/api/projects", projects),
        Route("/api/search", search),
        Route("/api/timeline", timeline),
        Route("/api/observations/batch", observations_batch, methods=["POST"]),
        Route(CONTEXT_PATH, context_inject, methods=["GET", "POST"]),
        Route("/api/memory/save", save_memory, methods=["POST"]),
        Route(INIT_PATH, _ingest(INIT_PATH), methods=["POST"]),
        Route(OBSERVATIONS_PATH, _ingest(OBSERVATIONS_PATH), methods=["POST"]),
        Route(SUMMARIZE_PATH, _ingest(SUMMARIZE_PATH), methods=["POST"]),
        *(Route(f"/api/{kind}/{{id:int}}", item_route, methods=["GET", "DELETE"]) for kind in KIND_ROUTES),
        Route("/api/memory/team/{id:int}", team_item, methods=["GET"]),
        Route("/stream", stream),
        Route("/openapi.json", openapi),
        Route("/", index),
    ]
    static = static_dir or STATIC_DIR
    routes.append(Mount("/static", StaticFiles(directory=static) if static.is_dir() else _not_found_app))
    app = Starlette(
        routes=routes,
        middleware=[Middleware(GuardMiddleware, settings=cfg, json_paths=frozenset(
                        r.path for r in routes if isinstance(r, Route) and "POST" in (r.methods or ()))),
                    Middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)],
        exception_handlers={HTTPException: _http_error, Exception: _unexpected},
        lifespan=lifespan,
    )
    app.state.worker = state
    app.state.heartbeat_seconds = heartbeat_seconds
    app.state.static_dir = static
    app.state.openapi = build_openapi(cfg)
    return app

