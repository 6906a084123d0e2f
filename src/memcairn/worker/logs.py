"""The worker's log: ``MEMCAIRN_HOME/logs/worker.log``, rotated at ``log_max_bytes`` with ``log_backups``
old files kept, so the logs never take more than ``(log_backups + 1) * log_max_bytes`` of disk.

Request lines are not logged: URLs carry search text, which belongs in the store, not in a log file.

A spawned worker's stderr goes to ``logs/worker-stderr.log`` (what a crash prints before logging is set up,
native libraries' warnings, a thread's uncaught traceback). `watch_stderr_file` keeps that file under
``log_max_bytes`` too while the worker runs, cutting it to its recent tail.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import queue
import stat
import sys
import threading
import time
from logging.handlers import QueueHandler, QueueListener, RotatingFileHandler
from pathlib import Path

from memcairn.wire.config import Settings

LOG_FILE = "worker.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"
LOGGERS = ("memcairn", "uvicorn", "uvicorn.error")
HANDLER_NAME = "memcairn-worker-file"
STDERR_CHECK_SECONDS = 30.0  # how often a running worker checks the size of its stderr file


def log_path(cfg: Settings) -> Path:
    return cfg.logs_dir / LOG_FILE


class CappedRotatingFileHandler(RotatingFileHandler):
    """``RotatingFileHandler`` that also caps the file without backups: the standard one never rolls over
    when ``backupCount`` is 0 (it reopens the file for appending), so ``log_backups = 0`` grew the log without
    bound. Here the file then starts over empty instead.

    A line that cannot be written (a full disk) is counted and dropped, not reported on stderr (the same full
    disk, for a spawned worker) nor kept in the stream's buffer, where it would be retried half-written; the
    file is opened again for the next line, and the first line that lands says how many were lost."""

    dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.dropped:
            lost, self.dropped = self.dropped, 0
            super().emit(logging.LogRecord("memcairn.worker.logs", logging.WARNING, __file__, 0,
                                           "%d log line(s) could not be written: no space was left on the disk",
                                           (lost,), None))
            if self.dropped:  # still no room: the note is not a line of its own
                self.dropped = lost
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - the logging API's name
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self.dropped += 1
        stream, self.stream = self.stream, None  # type: ignore[assignment]
        if stream is not None:
            try:
                stream.close()  # flushing the failed line again fails too; the descriptor is closed anyway
            except OSError:
                pass

    def doRollover(self) -> None:  # noqa: N802 - the logging API's name
        if self.backupCount > 0:
            super().doRollover()
            return
        if self.stream:
            self.stream.close()
            self.stream = None  # type: ignore[assignment]
        with open(self.baseFilename, "w", encoding=self.encoding):
            pass  # truncate
        if not self.delay:
            self.stream = self._open()


class BackgroundHandler(QueueHandler):
    """Hands each record to a thread that writes it: a request thread never waits for the file, its lock,
    the flush or the rollover checks (several ``stat`` calls a line), which cost more than a search's own
    work under concurrent load. ``close`` writes what is queued, then closes the file."""

    def __init__(self, target: logging.Handler) -> None:
        super().__init__(queue.SimpleQueue())
        self.target = target
        self._listener: QueueListener | None = QueueListener(self.queue, target, respect_handler_level=True)
        self._listener.start()

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
            self.target.close()
        super().close()


def setup_logging(cfg: Settings, level: int = logging.INFO) -> BackgroundHandler:
    """Send the worker's loggers to the rotating file, through a writer thread (idempotent: an earlier
    handler is closed and replaced). The handler is closed at exit, so queued lines reach the file."""
    cfg.logs_dir.mkdir(parents=True, exist_ok=True)
    file_handler = CappedRotatingFileHandler(log_path(cfg), maxBytes=max(1024, cfg.log_max_bytes),
                                       backupCount=max(0, cfg.log_backups), encoding="utf-8")
    file_handler.setFormatter(logging.Formatter(FORMAT))
    handler = BackgroundHandler(file_handler)
    handler.set_name(HANDLER_NAME)
    replaced: list[logging.Handler] = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if h.get_name() == HANDLER_NAME]:
            logger.removeHandler(old)
            replaced.append(old)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    for old in dict.fromkeys(replaced):
        old.close()
    logging.getLogger("uvicorn.access").disabled = True
    atexit.register(handler.close)
    return handler


def trim_stderr_file(path: Path, max_bytes: int, fd: int = 2) -> bool:
    """Cut the file behind ``fd`` to its last quarter of ``max_bytes`` (whole lines, after a marker line) once
    it is larger than ``max_bytes``; True when it did.

    Only when ``fd`` is ``path`` itself, a regular file opened for appending (as `lifecycle.spawn` opens it):
    the writes that follow then land at the new end. A foreground worker's stderr (a terminal, a pipe, a
    file of the person's own) is never touched.
    """
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size <= max_bytes:
            return False
        if not os.path.samestat(st, os.stat(path)) or not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
            return False
        keep = max(0, max_bytes // 4)
        with open(path, "rb") as fh:
            fh.seek(max(0, st.st_size - keep))
            tail = fh.read(keep)
        if len(tail) == keep and b"\n" in tail:  # start at a whole line
            tail = tail[tail.index(b"\n") + 1:]
        marker = time.strftime("[memcairn: earlier output cut at %Y-%m-%d %H:%M:%S to keep this file small]\n")
        os.ftruncate(fd, 0)
        os.write(fd, marker.encode() + tail)
        return True
    except OSError:
        return False


def watch_stderr_file(path: Path, max_bytes: int, interval: float = STDERR_CHECK_SECONDS,
                      fd: int = 2) -> threading.Event:
    """Run `trim_stderr_file` every ``interval`` seconds in a daemon thread until the returned event is set."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(interval):
            trim_stderr_file(path, max_bytes, fd)

    threading.Thread(target=watch, name="memcairn-stderr-cap", daemon=True).start()
    return stop
