"""The worker's side of the spool (``memcairn.wire.spool``): events hooks could not hand over, drained into the queue.

One thread per worker passes over ``$MEMCAIRN_HOME/spool/`` once the store is open and then every
``interval`` seconds (listing an empty directory costs microseconds). Each file, oldest first, goes through
``accept`` (the ingest route's own checks, admission and queue insert, with the same dedupe keys: an event
both answered late and spooled is queued once); the file is removed only after the queue committed it.

- A file that is no event (not the spool's format, not JSON, a field the route refuses) is moved to
  ``spool/rejected/`` and logged by name with the reason: kept for a person, never retried in a loop.
- Any other failure (the store locked past its busy timeout, a full disk) keeps the file for the next pass.
- Temporary files a killed hook left are removed once they are ``TMP_MAX_AGE`` seconds old.
- After a full disk, each pass first empties the WAL (in the freed disk reserve if need be) and queues nothing
  until that worked; then keeps the reserve (``spool.keep_reserve``) and hands the events the worker holds in
  memory (``worker/held_events.py``) to the queue or the spool; stopping, it hands them over one last time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from memcairn.core.background import BackgroundLoop
from memcairn.core.errors import DiskFullError, ValidationError
from memcairn.store.protocols import LocalStore
from memcairn.wire import spool
from memcairn.wire.config import Settings
from memcairn.worker.held_events import HeldEvents
from memcairn.worker.intake import accept_spooled

log = logging.getLogger("memcairn.worker")

INTERVAL = 1.0
HELD_INTERVAL = 0.25  # while events wait in memory: the first room that comes back is theirs
TMP_MAX_AGE = 600.0


class Rejected(Exception):
    """The event can never be queued (the reason is the message): set aside, not retried."""


@dataclass
class DrainReport:
    queued: int = 0  # new events in the queue
    duplicates: int = 0  # already queued (answered late and spooled, or spooled twice)
    skipped: int = 0  # refused by admission (an excluded project, a skipped tool), as the route would
    rejected: int = 0  # set aside
    kept: int = 0  # left for the next pass (a failure that may pass)
    disk_full: bool = False  # the queue refused an event for a full disk


# ``accept(route, body) -> "queued" | "duplicate" | "skipped"``; raises Rejected for an event that never can be.
Accept = Callable[[str, bytes], str]


def intake_accept(settings: Settings, ready_store: Callable[[], LocalStore],
                  on_queued: Callable[[], None]) -> Accept:
    """The ingest use case (``worker/intake.py``) as ``accept``: an event the ingest route would refuse with 400
    is ``Rejected``. ``ready_store`` raises while the worker is not ready (the file is kept); ``on_queued``
    hears of each new event in the queue."""

    def accept(route: str, body: bytes) -> str:
        store = ready_store()
        try:
            answer = accept_spooled(store, settings, route, body)
        except ValidationError as exc:
            raise Rejected(str(exc)) from None
        if answer["status"] == "skipped":
            return "skipped"
        if answer["duplicate"]:
            return "duplicate"
        on_queued()
        return "queued"

    return accept


class SpoolDrainer(BackgroundLoop):
    thread_name = "memcairn-spool"
    stop_timeout = 5.0

    def __init__(self, home: str, accept: Accept, *, interval: float = INTERVAL,
                 on_pass: Callable[[DrainReport], None] | None = None) -> None:
        self.home = home
        self.accept = accept
        self.interval = interval
        self.on_pass = on_pass
        super().__init__()
        self._failing: set[str] = set()  # files whose failure was logged already
        self.held = HeldEvents()  # events a full disk refused, acknowledged as held (worker/held_events.py)
        self._reserved = False  # a disk reserve was made (then it is made again whenever there is room)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                report = self.drain()
                if self.on_pass is not None and (report.queued or report.duplicates or report.rejected):
                    self.on_pass(report)
            except Exception:  # noqa: BLE001 - the thread must outlive any one pass
                log.exception("draining the spool failed; retrying in %.0f s", self.interval)
            self._wake.wait(min(self.interval, HELD_INTERVAL) if len(self.held) else self.interval)
        self._release_held()

    def _release_held(self) -> None:
        """Stopping: what is still held goes to the queue or the spool now, or is lost (and said so)."""
        if not len(self.held):
            return
        report = self.held.flush(self.accept, self.home, Rejected)
        if report.kept:
            log.error("%d hook event(s) held in memory for a full disk are lost: neither the queue nor the spool "
                      "had room for them", report.kept)

    def drain(self) -> DrainReport:
        """One pass over the spool, oldest event first."""
        report = DrainReport()
        room = self.held.make_room(self.home)  # after a full disk: the WAL emptied before anything is queued
        if room:  # first: the next checkpoint's room (at most half of what is free)
            self._reserved = spool.keep_reserve(self.home, again=self._reserved) or self._reserved
        if len(self.held):
            flushed = self.held.flush(self.accept if room else None, self.home, Rejected)
            report.queued += flushed.queued
            report.kept += flushed.kept
            report.disk_full = flushed.disk_full and room
        for path in spool.pending(self.home) if room else ():
            if self._stop.is_set():
                break
            self._one(path, report)
        if report.disk_full:
            self.held.disk_full = True
        for path in spool.stale_temporaries(self.home, TMP_MAX_AGE):
            try:
                spool.remove(path)
            except OSError:
                pass
        return report

    def _one(self, path: str, report: DrainReport) -> None:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return  # drained by another pass
        except OSError as exc:
            self._keep(path, f"cannot read it ({exc})", report)
            return
        try:
            route, body = spool.decode(data)
            outcome = self.accept(route, body)
        except (spool.SpoolError, Rejected) as exc:
            self._set_aside(path, str(exc), report)
            return
        except Exception as exc:  # noqa: BLE001 - a failure that may pass: kept for the next pass
            report.disk_full = report.disk_full or isinstance(exc, DiskFullError)
            self._keep(path, f"{type(exc).__name__}: {exc}", report)
            return
        try:
            spool.remove(path)
        except FileNotFoundError:
            pass
        self._failing.discard(path)
        if outcome == "queued":
            report.queued += 1
        elif outcome == "duplicate":
            report.duplicates += 1
        else:
            report.skipped += 1

    def _keep(self, path: str, why: str, report: DrainReport) -> None:
        report.kept += 1
        if path not in self._failing:
            self._failing.add(path)
            log.warning("spooled event %s not queued yet (%s); retried on the next pass", path, why)

    def _set_aside(self, path: str, why: str, report: DrainReport) -> None:
        report.rejected += 1
        self._failing.discard(path)
        try:
            target = spool.set_aside(path)
        except OSError as exc:
            log.error("spool file %s is no event (%s) and cannot be moved aside (%s)", path, why, exc)
            return
        log.warning("spool file %s is no event the worker can queue (%s); kept as %s", path, why, target)
