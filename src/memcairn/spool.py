"""Hook events the worker could not take, kept on disk until it can: ``$MEMCAIRN_HOME/spool/`` (standard library only).

A hook that cannot hand its event to the worker (nothing listens, the worker is starting or stopping and
answers 503, no answer in time) writes the event here instead of losing it; the worker drains the directory
into its queue when it starts and while it runs (``worker/spool_drain.py``). So an event is durable once the
worker acknowledged it *or* it is in the spool.

- One file per event, ``<ns since the epoch>-<pid>-<random>.event``: names sort in the order the hooks wrote
  them. The content is ``memcairn-spool 1``, the route, and the body exactly as it would have been posted, one
  per line (the body is the last part and may hold anything).
- Written atomically: a temporary ``.tmp-*`` file in the same directory, ``fsync``, ``rename``, ``fsync`` of
  the directory. A hook killed while writing leaves at most a temporary file, which the worker removes once it
  is old; never half an event under an ``.event`` name.
- The body carries the hook's ``event_key`` (``protocol.EVENT_KEY_FIELD``): an event that reached the worker
  and was also spooled (the answer was late) is queued once.
- A file the worker cannot read as an event is moved to ``spool/rejected/`` (kept for a person to look at,
  never retried in a loop); the worker logs its name and why.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

SPOOL_DIR = "spool"
REJECTED_DIR = "rejected"
SUFFIX = ".event"
TMP_PREFIX = ".tmp-"
MAGIC = b"memcairn-spool 1"


class SpoolError(Exception):
    """A spool file that is not an event of this format (the reason is the message)."""


def spool_dir(home: str) -> str:
    return os.path.join(home, SPOOL_DIR)


def encode(path: str, raw: bytes) -> bytes:
    return MAGIC + b"\n" + path.encode("ascii") + b"\n" + raw


def decode(data: bytes) -> tuple[str, bytes]:
    """(route, body) of a spool file's bytes; ``SpoolError`` when they are not a spooled event."""
    magic, sep, rest = data.partition(b"\n")
    if magic != MAGIC or not sep:
        raise SpoolError("it does not start with the spool header")
    route, sep, body = rest.partition(b"\n")
    if not sep or not route.startswith(b"/api/"):
        raise SpoolError("it names no route")
    return route.decode("ascii", "replace"), body


def write(home: str, path: str, raw: bytes) -> str:
    """Write one event durably; its file name. Raises ``OSError`` when the spool cannot be written."""
    folder = spool_dir(home)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}{SUFFIX}"
    tmp = os.path.join(folder, TMP_PREFIX + name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        data = memoryview(encode(path, raw))
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, os.path.join(folder, name))
    _sync_dir(folder)
    return name


def _sync_dir(folder: str) -> None:
    """Make a rename in ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def pending(home: str) -> Iterator[str]:
    """The paths of spooled events, oldest first (none when there is no spool)."""
    try:
        names = sorted(entry.name for entry in os.scandir(spool_dir(home))
                       if entry.name.endswith(SUFFIX) and not entry.name.startswith("."))
    except OSError:
        return iter(())
    return (os.path.join(spool_dir(home), name) for name in names)


def oldest_age(home: str, now_ns: int | None = None) -> float | None:
    """Seconds since the oldest spooled event was written, or None when none waits."""
    for path in pending(home):
        try:
            written = int(os.path.basename(path).split("-", 1)[0])
        except ValueError:
            continue
        return max(0.0, ((now_ns if now_ns is not None else time.time_ns()) - written) / 1e9)
    return None


def remove(path: str) -> None:
    """Remove a drained event (after the queue committed it)."""
    os.unlink(path)
    _sync_dir(os.path.dirname(path))


def set_aside(path: str) -> str:
    """Move a file that is no event to ``spool/rejected/``; its new path."""
    folder = os.path.join(os.path.dirname(path), REJECTED_DIR)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    target = os.path.join(folder, os.path.basename(path))
    os.replace(path, target)
    _sync_dir(os.path.dirname(path))
    return target


def stale_temporaries(home: str, older_than: float) -> list[str]:
    """Temporary files of hooks killed while writing, older than ``older_than`` seconds."""
    folder, now, found = spool_dir(home), time.time(), []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(TMP_PREFIX):
            try:
                if now - entry.stat().st_mtime > older_than:
                    found.append(entry.path)
            except OSError:
                continue
    return found
