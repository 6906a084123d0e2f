"""The worker's log: ``MEMCAIRN_HOME/logs/worker.log``, rotated at ``log_max_bytes`` with ``log_backups``
old files kept, so the logs never take more than ``(log_backups + 1) * log_max_bytes`` of disk.

Request lines are not logged: URLs carry search text, which belongs in the store, not in a log file.
"""

from __future__ import annotations

import atexit
import logging
import queue
from logging.handlers import QueueHandler, QueueListener, RotatingFileHandler
from pathlib import Path

from memcairn.config import Settings

LOG_FILE = "worker.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"
LOGGERS = ("memcairn", "uvicorn", "uvicorn.error")
HANDLER_NAME = "memcairn-worker-file"


def log_path(cfg: Settings) -> Path:
    return cfg.logs_dir / LOG_FILE


class CappedRotatingFileHandler(RotatingFileHandler):
    """``RotatingFileHandler`` that also caps the file without backups: the standard one never rolls over
    when ``backupCount`` is 0 (it reopens the file for appending), so ``log_backups = 0`` grew the log without
    bound. Here the file then starts over empty instead."""

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
