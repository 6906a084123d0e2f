"""One daemon thread that works in passes until it is stopped: the worker's capture, mirror, spool and forwarder.

A subclass writes ``_loop`` (a pass, then ``self._wake.wait(...)``, until ``self._stop`` is set) and names its
thread. ``nudge`` wakes it early (new work arrived) and clears ``_idle``, which a loop sets when a pass found
nothing left to do (``wait_idle`` waits for that); ``stop`` lets the pass in progress finish, then joins.
"""

from __future__ import annotations

import threading


class BackgroundLoop:
    thread_name = "memcairn-background"
    stop_timeout = 10.0  # seconds ``stop`` waits for the pass in progress

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
            self._thread.start()

    def nudge(self, *_args: object) -> None:
        self._idle.clear()
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        """Finish the pass in progress, then stop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.stop_timeout if timeout is None else timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Whether a pass found nothing left to do within ``timeout`` seconds."""
        return self._idle.wait(timeout)

    def _loop(self) -> None:
        raise NotImplementedError
