"""Runs mirror catch-up off the request path: nudged after every store write, retried while degraded."""

from __future__ import annotations

import logging

from memcairn.core.background import BackgroundLoop
from memcairn.mirror.sync import MirrorSync

log = logging.getLogger("memcairn.mirror")


class MirrorRunner(BackgroundLoop):
    """One daemon thread per worker. ``nudge()`` is cheap and safe from any thread.

    Between nudges it still looks every ``idle_seconds``: other processes (``memcairn import``, ``add``) write
    to the same SQLite file without nudging this one. Such a look runs a pass only when some connection
    committed since the last one (``PRAGMA data_version``).
    """

    thread_name = "memcairn-mirror"

    def __init__(self, mirror: MirrorSync, *, retry_seconds: float = 15.0, idle_seconds: float = 5.0) -> None:
        self.mirror = mirror
        self.retry_seconds = retry_seconds
        self.idle_seconds = idle_seconds
        super().__init__()
        self.backfill_first = True

    def _loop(self) -> None:
        seen: int | None = None  # the store's data_version when the last pass began
        while not self._stop.is_set():
            nudged = self._wake.is_set()
            self._wake.clear()
            try:
                if self.backfill_first:
                    self.mirror.backfill()
                    self.backfill_first = not self.mirror.available
                else:
                    version = self._data_version()
                    # An idle look when no connection committed since the last pass has nothing to find (and
                    # a pass reads the highest id of every project and kind: a GROUP BY over the whole store).
                    if nudged or version is None or version != seen or not self.mirror.available:
                        seen = version
                        self.mirror.sync_pending()
            except Exception:  # the loop must survive anything a backend throws
                log.exception("mirror catch-up failed")
            if not self._wake.is_set():
                self._idle.set()
            wait = self.idle_seconds if self.mirror.available else self.retry_seconds
            self._wake.wait(wait)

    def _data_version(self) -> int | None:
        """SQLite's count of commits by other connections, on this thread's connection (None: unknown)."""
        read = getattr(self.mirror.store, "data_version", None)
        try:
            return read() if callable(read) else None
        except Exception:  # noqa: BLE001 - unknown: the pass runs
            return None
