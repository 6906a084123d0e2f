"""Consecutive worker failures seen by hooks, kept in ``$MEMCAIRN_HOME/hook-state.json``.

Hooks fail open: a dead worker costs the agent nothing but memory. So that this does not go unnoticed,
each hook that cannot reach the worker adds one to a counter; at ``NOTIFY_AFTER`` failures in a row the
person is told once (``systemMessage``), and the first hook that reaches the worker again removes the file.

A success costs one ``stat`` (the file usually does not exist). Writes are atomic (temporary file and
rename; a write that fails removes its temporary file). Hooks run in parallel, so two failures at the same
instant may count once: the count is a signal, not an audit. Standard library only.
"""

from __future__ import annotations

import os
import time

from memcairn.wire.fastjson import dumps, loads

STATE_FILE = "hook-state.json"
NOTIFY_AFTER = 3


def _path(home: str) -> str:
    return os.path.join(home, STATE_FILE)


def read(home: str) -> dict:
    try:
        with open(_path(home), encoding="utf-8") as fh:
            data = loads(fh.read())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(home: str, data: dict) -> None:
    """Replace the file whole; on any failure (a full disk) the temporary file goes too."""
    os.makedirs(home, exist_ok=True)
    target = _path(home)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(dumps(data))
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def record_success(home: str) -> None:
    """The worker answered: forget earlier failures (and allow a new notice after the next three)."""
    target = _path(home)
    if os.path.exists(target):
        try:
            os.unlink(target)
        except OSError:
            pass


def record_failure(home: str, reason: str, *, can_notify: bool) -> bool:
    """Count one failure; True when the caller should now tell the person (once per run of failures).

    ``can_notify`` is False for events whose output nobody sees (SessionEnd): the notice waits for the next.
    """
    try:
        data = read(home)
        failures = int(data.get("failures", 0)) + 1 if isinstance(data.get("failures", 0), int) else 1
        notify = can_notify and failures >= NOTIFY_AFTER and not data.get("notified")
        _write(home, {"failures": failures, "notified": bool(data.get("notified")) or notify,
                      "last_error": reason[:300], "at": int(time.time())})
    except OSError:
        return False
    return notify
