"""Hook events a full disk refused, held in the worker's memory until the disk takes them.

When the queue insert of a hook's event fails with ``DiskFullError`` (and the spool, on the same disk, most
likely cannot be written either), the worker keeps the event in memory and answers 202 ``{"status":
"accepted", "held": "memory"}``. The hook still tries to spool it (a spool write that finds no room takes the
blocks it needs from the disk reserve, ``spool.RESERVE_FILE``); either copy is queued once (``event_key``).

Before it writes anything more, the spool drainer (``worker/spool_drain.py``) empties the WAL into the database
(on a small disk the WAL holds most of the space), giving the checkpoint the reserve ``CHECKPOINT_STEP`` at a
time while it finds no room: a checkpoint that cannot run leaves every later write to grow the WAL instead.
Then it passes over the held events, oldest first: each goes into the queue (the ingest route's own checks
and admission) or, when the store still refuses it, into the spool; the first one neither takes stops the
pass until the next. A worker stopping writes what it still holds to the queue or the spool one last time.

The loss window: an event held in memory only (its hook's spool write failed too) is lost if the worker dies
(SIGKILL, a crash) before the disk has room for it; it is logged as lost when the worker stops with it.
Bounded: ``MAX_EVENTS`` events or ``MAX_BYTES`` of bodies; past that the answer is 507 as before.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from memcairn.core.errors import DiskFullError
from memcairn.store.db import error_kind
from memcairn.wire import spool

log = logging.getLogger("memcairn.worker")

MAX_EVENTS = 10_000
MAX_BYTES = 64 * 1024 * 1024
CHECKPOINT_STEP = 256 * 1024  # the reserve is given to a checkpoint in steps: a racing writer takes little


@dataclass
class FlushReport:
    queued: int = 0  # taken by the queue (or found already queued, or skipped by admission)
    spooled: int = 0  # written to the spool, which the drainer queues
    dropped: int = 0  # an event the route can never queue (logged)
    kept: int = 0  # still held
    disk_full: bool = False  # the queue refused one for a full disk


class HeldEvents:
    """Thread-safe, ordered: event key -> (route, body)."""

    def __init__(self, max_events: int = MAX_EVENTS, max_bytes: int = MAX_BYTES) -> None:
        self.max_events, self.max_bytes = max_events, max_bytes
        self._events: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self.checkpoint: Callable[[], bool] | None = None  # the store's: empties the WAL into the database
        self.disk_full = False  # a write found the disk full, and no checkpoint has emptied the WAL since

    def __len__(self) -> int:
        return len(self._events)

    def hold(self, key: str, route: str, body: bytes) -> bool:
        """Keep one event; False when the holding is full (the same key twice is held once)."""
        with self._lock:
            if key in self._events:
                return True
            if len(self._events) >= self.max_events or self._bytes + len(body) > self.max_bytes:
                return False
            self._events[key] = (route, body)
            self._bytes += len(body)
            return True

    def _drop(self, key: str) -> None:
        with self._lock:
            held = self._events.pop(key, None)
            if held is not None:
                self._bytes -= len(held[1])

    def make_room(self, home: str) -> bool:
        """After a full disk, before any other write: empty the WAL into the database (on a small disk the WAL
        holds most of the space), in the freed reserve when it needs room. True when queue writes may go on;
        while False, written events would only grow the WAL the checkpoint cannot empty."""
        if not self.disk_full or self.checkpoint is None:
            return True
        freed = 0
        while True:
            try:
                if self.checkpoint():
                    self.disk_full = False
                    log.warning("the disk has room again: the WAL was emptied into the database%s",
                                f" ({freed // 1024} KiB of the reserve given to it)" if freed else "")
                    return True
                return True  # readers kept it from finishing, not the disk: writes may go on, and it is tried again
            except Exception as exc:  # noqa: BLE001 - no room for the checkpoint yet, or another failure
                if not _no_room(exc):
                    log.info("checkpoint after a full disk failed: %s", exc)
                    return False
            if not spool.shrink_reserve(home, CHECKPOINT_STEP):
                return False
            freed += CHECKPOINT_STEP

    def flush(self, accept: Callable[[str, bytes], str] | None, home: str,
              rejected: type[Exception]) -> FlushReport:
        """Hand the held events to the queue (``accept``; None: the disk has no room for it), else the spool,
        oldest first; stop at the first neither takes."""
        report = FlushReport()
        with self._flushing:
            with self._lock:
                pending = list(self._events.items())
            for number, (key, (route, body)) in enumerate(pending):
                try:
                    if accept is None:
                        raise DiskFullError("no room for the queue yet")
                    accept(route, body)
                    report.queued += 1
                except rejected as exc:
                    log.error("a held %s event can never be queued (%s); dropped", route, exc)
                    report.dropped += 1
                except Exception as exc:  # noqa: BLE001 - the disk still full, the store busy: try the spool
                    report.disk_full = report.disk_full or isinstance(exc, DiskFullError)
                    try:
                        spool.write(home, route, body)
                        report.spooled += 1
                    except OSError:
                        report.kept = len(pending) - number
                        log.debug("held events wait for room (%s: %s)", type(exc).__name__, exc)
                        return report
                self._drop(key)
        return report


def _no_room(exc: Exception) -> bool:
    if isinstance(exc, DiskFullError):
        return True
    return isinstance(exc, sqlite3.Error) and error_kind(exc) == "full"
