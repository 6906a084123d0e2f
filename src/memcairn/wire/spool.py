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
- A full disk: ``$MEMCAIRN_HOME/disk-reserve`` is a file of up to ``RESERVE_BYTES`` the worker keeps (first
  made once the disk has twice that free; then never more than half the free room). A spool write that fails
  for lack of space shrinks it by what it needs and tries again; the worker shrinks it step by step for
  SQLite's checkpoint (which empties the WAL) and makes it whole again once there is room. No failure leaves
  a temporary file behind.
"""

from __future__ import annotations

import errno
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
RESERVE_FILE = "disk-reserve"
RESERVE_BYTES = 4 * 1024 * 1024  # a checkpoint of SQLite's default WAL (1,000 pages) into the database
MIN_RESERVE_BYTES = 64 * 1024
BLOCK = 4096
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


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
    """Write one event durably; its file name. Raises ``OSError`` when the spool cannot be written (a full disk
    only once the reserve is spent too: the event is then written in as much of it as it needs)."""
    try:
        return _write(home, path, raw)
    except OSError as exc:
        if exc.errno not in NO_SPACE or not shrink_reserve(home, len(raw) + len(path) + 2 * BLOCK + len(MAGIC)):
            raise
    return _write(home, path, raw)


def _write(home: str, path: str, raw: bytes) -> str:
    folder = spool_dir(home)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}{SUFFIX}"
    tmp = os.path.join(folder, TMP_PREFIX + name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            data = memoryview(encode(path, raw))
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(folder, name))
    except BaseException:
        _unlink(tmp)
        raise
    _sync_dir(folder)
    return name


def reserve_path(home: str) -> str:
    return os.path.join(home, RESERVE_FILE)


def release_reserve(home: str) -> bool:
    """Free the whole reserve; True when there was one to free."""
    try:
        os.unlink(reserve_path(home))
    except OSError:
        return False
    return True


def shrink_reserve(home: str, size: int) -> bool:
    """Give ``size`` bytes (whole blocks) of the reserve back to the disk, for a write the full disk refused:
    only what that write needs, so that another writer racing for the room takes little of it. True when
    there was a reserve to shrink (the last of it is then removed)."""
    have = _reserve_size(home)
    if have <= 0:
        return False
    keep = have - (size + BLOCK - 1) // BLOCK * BLOCK
    if keep <= 0:
        return release_reserve(home)
    try:
        os.truncate(reserve_path(home), keep)
    except OSError:
        return release_reserve(home)
    return True


def keep_reserve(home: str, size: int = RESERVE_BYTES, *, again: bool = True) -> bool:
    """Make (or grow) the reserve up to ``size``, never past half the free room: on a disk that fills again,
    the next checkpoint finds room too. ``again`` False (no reserve was ever made): only on a disk with room
    for it twice over (a disk that small gets none). True when there is one."""
    have = _reserve_size(home)
    if have >= size:
        return True
    free = _free(home)
    if not again and not have and free < 2 * size:
        return False
    want = min(size, free // 2) // BLOCK * BLOCK
    if want < MIN_RESERVE_BYTES or want <= have:
        return have > 0
    return _make_reserve(home, want) or have > 0


def _reserve_size(home: str) -> int:
    try:
        return os.stat(reserve_path(home)).st_size
    except OSError:
        return 0


def _free(home: str) -> int:
    try:
        disk = os.statvfs(home)
    except OSError:
        return 0
    return disk.f_bavail * disk.f_frsize


def _make_reserve(home: str, size: int) -> bool:
    """Take ``size`` bytes (at most what is free, less a little) as the reserve; False when it could not."""
    size = min(size, _free(home) - 2 * BLOCK) // BLOCK * BLOCK
    if size <= 0:
        return False
    target = reserve_path(home)
    tmp = f"{target}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _fill(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target)
    except OSError:
        _unlink(tmp)
        return False
    return True


def _fill(fd: int, size: int) -> None:
    """Take ``size`` bytes of the disk: allocated where the file system can, else written (random: a file
    system that compresses would keep zeros in no room at all)."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except (AttributeError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            raise
    block, written = os.urandom(65536), 0
    while written < size:
        written += os.write(fd, block[:size - written])


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
