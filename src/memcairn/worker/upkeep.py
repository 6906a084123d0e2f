"""The worker's upkeep of its store: finds and repairs damage without waiting for a person.

One daemon thread per worker. It runs a pass

- at once when SQLite reported damage (the store's damage listener: a damaged page or keyword index, an I/O
  error, a dropped keyword table) or a keyword search found the index disagreeing with the rows' text
  (``Store.keyword_probe``), and at start (the file if it was not checked at open, the keyword index's table,
  triggers and row count; after an unclean shutdown, found by the marker file ``<db>.upkeep`` a clean stop
  removes, FTS5's integrity-check and the whole file too);
- every ``interval`` seconds once no write came for ``min(interval, IDLE_SECONDS)``: FTS5's integrity-check
  takes the write lock for its duration (0.5 s at 20k items), so it waits for a quiet moment.

A pass checks the file (SQLite's ``quick_check``: while it fails, the store refuses writes and
``/api/health`` says so) and, when the file passes, repairs the keyword index as ``memcairn doctor --fix``
does (``Store.repair_keyword_index``: content that drifted from the rows, a damaged block, a missing table or
trigger). After a write found the disk full it tries every second to empty the WAL into the database
(``Store.checkpoint``: on a small disk the WAL holds most of the space, as SQLite checkpoints by itself only
past 1,000 pages) and wakes the capture once there is room; every ``retry_seconds`` it queues again the hook
events that failed for lack of space (``Store.requeue_failed_ingest``).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from memcairn.core.errors import MemcairnError
from memcairn.store.integrity import damaged_file_advice
from memcairn.store.protocols import UpkeepStore

log = logging.getLogger("memcairn.upkeep")

IDLE_SECONDS = 60.0
RETRY_SECONDS = 5.0
DISK_FULL_MARK = "disk is full"  # in the error of an event that failed for lack of space (SQLite's words)
MIN_FREE_BYTES = 512 * 1024  # room needed before such events are tried again
MAX_REPAIRS_LISTED = 5


class StoreUpkeep:
    def __init__(self, store: UpkeepStore, *, interval_seconds: float, on_requeue: Callable[[int], None] | None = None,
                 retry_seconds: float = RETRY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.interval = max(0.05, float(interval_seconds))
        self.idle = min(self.interval, IDLE_SECONDS)
        self.retry_seconds = retry_seconds
        self.on_requeue = on_requeue
        self.clock = clock
        self.repairs: list[str] = []  # the latest repairs, newest last
        self.keyword_problem: str | None = None  # damage reported and not repaired yet
        self.disk_full: str | None = None  # a write found the disk full, and no room came back since
        self.last_error: str | None = None
        self.passes = 0
        self._urgent = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_pass = clock()
        self._last_write = clock()
        self._data_version: int | None = None
        self.marker = store.path.with_name(store.path.name + ".upkeep") if store.path is not None else None
        self.unclean_start = False  # the last worker of this store did not stop cleanly
        store.add_damage_listener(self.report)
        store.add_listener(self._wrote)

    # -- control --------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self.unclean_start = self._mark_running()
            if self.unclean_start:
                log.warning("the last worker of %s did not stop cleanly: checking the file and the keyword index "
                            "now", self.store.path)
            self._urgent.set()  # the first pass at once: a large file was not checked at open
            self._thread = threading.Thread(target=self._loop, name="memcairn-upkeep", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._urgent.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self.marker is not None and not self._thread.is_alive():
                self.marker.unlink(missing_ok=True)

    def _mark_running(self) -> bool:
        """Leave the marker a clean stop removes; True when one was left by an earlier worker."""
        if self.marker is None:
            return False
        left = self.marker.exists()
        try:
            fd = os.open(self.marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # owner only, as the home
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()}\n")
        except OSError as exc:  # a read-only or full directory: the checks still run on their schedule
            log.warning("cannot write %s: %s", self.marker, exc)
        return left

    def report(self, kind: str, detail: str) -> None:
        """The store's damage listener: wake for a pass now (safe from any thread); a full disk is handled by
        the retry round instead."""
        if kind == "full":
            self.disk_full = detail
            return
        if kind == "missing_fts":
            self.keyword_problem = f"the keyword index table is missing ({detail}); rebuilding it"
        elif kind == "keyword_damaged":
            self.keyword_problem = (f"the keyword index is damaged ({detail}); searches answer from the semantic "
                                    "leg while it is rebuilt")
        else:
            self.keyword_problem = f"SQLite reported damage ({detail}); checking the file and the keyword index"
        self._urgent.set()

    def _wrote(self, _event: str, _ids: list[int]) -> None:
        self._last_write = self.clock()

    # -- the loop -------------------------------------------------------------------------------------
    def _loop(self) -> None:
        next_retry = self.clock()
        while not self._stop.is_set():
            tick = min(self.retry_seconds, self.idle, 1.0)
            urgent = self._urgent.wait(tick)
            if self._stop.is_set():
                return
            now = self.clock()
            try:
                if urgent or self._due(now):
                    self._urgent.clear()
                    self.run_pass(thorough=self.passes > 0 or self.keyword_problem is not None
                                  or self.unclean_start)
                if now >= next_retry or self.disk_full is not None:  # every tick while the disk is full
                    next_retry = now + self.retry_seconds
                    self.retry_disk_full_events()
            except Exception as exc:  # the loop must survive anything (a locked file, a full disk...)
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("store upkeep pass failed: %s", self.last_error)
                self._urgent.clear()
                self._last_pass = self.clock()

    def _due(self, now: float) -> bool:
        """A periodic pass is due: ``interval`` since the last, and no write (of any process) for ``idle``."""
        try:
            version = self.store.data_version()
        except Exception:  # noqa: BLE001 - a pass will say what is wrong
            version = None
        if version != self._data_version:
            self._data_version = version
            if self.passes:  # another connection committed since the last look
                self._last_write = now
        return now - self._last_pass >= self.interval and now - self._last_write >= self.idle

    def run_pass(self, *, thorough: bool = True) -> list[str]:
        """Check the file, then repair the keyword index if the file is sound; return what was repaired.
        Without ``thorough`` (the pass at start) FTS5's integrity-check is left to the next idle moment: it
        holds the write lock for its duration, and a hook's event arrives with the start."""
        self.passes += 1
        done: list[str] = []
        try:
            result = self.store.check_file() if thorough or self.store.checked_at is None else "ok"
            if result == "ok":
                done = self.store.repair_keyword_index(content=thorough)
                self.keyword_problem = None
            self.last_error = None
        finally:
            self._last_pass = self.clock()
            try:  # the pass's own repairs are no write of anyone else
                self._data_version = self.store.data_version()
            except Exception:  # noqa: BLE001
                self._data_version = None
        for what in done:
            log.warning("store upkeep: %s", what)
            self.repairs = [*self.repairs, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {what}"][-MAX_REPAIRS_LISTED:]
        return done

    def _room(self) -> bool:
        if self.store.path is None:
            return True
        try:
            return shutil.disk_usage(self.store.path.parent).free >= MIN_FREE_BYTES
        except OSError:
            return False

    def retry_disk_full_events(self) -> int:
        """After a full disk: once there is room, empty the WAL (on a small disk it holds most of the space)
        and wake the capture for the events still pending; queue again those that failed for lack of space.
        Returns how many were queued again."""
        if self.disk_full is not None:
            try:
                emptied = self.store.checkpoint()
            except Exception as exc:  # noqa: BLE001 - still no room: the next round tries again
                log.info("checkpoint after a full disk failed: %s", exc)
                emptied = False
            if emptied and self._room():
                log.warning("there is room on the disk again (the WAL was emptied into the database)")
                self.disk_full = None
                if self.on_requeue is not None:
                    self.on_requeue(0)
        if not self.store.failed_ingest_count(matching=DISK_FULL_MARK) or not self._room():
            return 0
        try:
            count = self.store.requeue_failed_ingest(matching=DISK_FULL_MARK)
        except MemcairnError:  # still no room for the write itself: the next round tries again
            return 0
        if count:
            log.warning("queued again %d hook event(s) that failed while the disk was full", count)
            if self.on_requeue is not None:
                self.on_requeue(count)
        return count

    # -- reporting ------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """What ``/api/health`` shows: ``ok``, ``damaged`` (writes refused), ``repairing`` (the keyword index) or
        ``disk_full``; each problem with the command that fixes it; the latest repairs."""
        problems = []
        damage = self.store.damage
        if damage is not None:
            problems.append({"name": "database file", "detail": f"fails SQLite's check ({damage}); writes are "
                             "refused", "fix": damaged_file_advice(self.store.path)})
        if self.keyword_problem is not None:
            problems.append({"name": "keyword index", "detail": self.keyword_problem,
                             "fix": "the worker repairs it by itself; else `memcairn doctor --fix`"})
        if self.disk_full is not None:
            problems.append({"name": "disk", "detail": f"a write found the disk full ({self.disk_full})",
                             "fix": "free some space; the worker tries the failed hook events again by itself"})
        if self.last_error is not None:
            problems.append({"name": "store upkeep", "detail": f"the last check failed: {self.last_error}",
                             "fix": "`memcairn doctor` (the worker log has details)"})
        state = ("damaged" if damage is not None else "repairing" if self.keyword_problem
                 else "disk_full" if self.disk_full else "ok")
        checked = self.store.checked_at
        return {"state": state, "problems": problems, "repairs": list(self.repairs),
                "checked_at": int(checked) if checked else None}
