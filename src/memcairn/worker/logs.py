"""The worker's log: ``MEMCAIRN_HOME/logs/worker.log``, rotated at ``log_max_bytes`` with ``log_backups``
old files kept, so the logs never take more than ``(log_backups + 1) * log_max_bytes`` of disk.

Request lines are not logged: URLs carry search text, which belongs in the store, not in a log file.
"""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler
from pathlib import Path

from memcairn.config import Settings

LOG_FILE = "worker.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"
LOGGERS = ("memcairn", "uvicorn", "uvicorn.error")


def log_path(cfg: Settings) -> Path:
    return cfg.logs_dir / LOG_FILE


def setup_logging(cfg: Settings, level: int = logging.INFO) -> RotatingFileHandler:
    """Send the worker's loggers to the rotating file (idempotent: an earlier handler is replaced)."""
    cfg.logs_dir.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(log_path(cfg), maxBytes=max(1024, cfg.log_max_bytes),
                                  backupCount=max(0, cfg.log_backups), encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.set_name("memcairn-worker-file")
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if h.get_name() == "memcairn-worker-file"]:
            logger.removeHandler(old)
            old.close()
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True
    return handler
