"""Which transcript file the worker may read for the caller that named it (``capture.transcript_tail``).

A hook's body names its transcript (``transcript_path``) and the worker reads the end of that file. Any local
user can reach the worker's loopback port, so the file is opened only when the caller's own user could read it:
the connection's peer is found in ``/proc/net/tcp`` and ``/proc/net/tcp6`` (Linux: the row whose local end is
the peer's address and whose remote end is the worker's holds the uid of the socket's owner), and the file must
be readable by that uid (owner, group and other bits of the file, the search bit of every folder above it).
When the peer cannot be identified (another system, a socket already closing, a spooled event read by the
drainer), the file must belong to the worker's own user. In every case only a regular ``*.jsonl`` file is
read: no symlink to one elsewhere, no ``/proc``, ``/sys`` or device, no FIFO. Anything else is None: the event
goes on without narration.

The HTTP layer names the connection in ``CALLER`` (a context variable, so it travels with the request into the
thread that reads the file); the uid is looked up only when a transcript is read.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import socket
import stat
import struct
from contextvars import ContextVar
from typing import Any

Address = tuple[Any, ...]  # a socket address as asyncio gives it: (host, port) or (host, port, flow, scope)
CALLER: ContextVar[tuple[Address, Address] | None] = ContextVar("memcairn_caller", default=None)
ESTABLISHED = "01"  # a closing socket's row may show uid 0 (TIME_WAIT): only a live connection counts
NOT_FILES = ("/proc/", "/sys/", "/dev/")
SUFFIX = ".jsonl"


def _host(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address of /proc/net/tcp{,6}: 32-bit words in the host's byte order, as hex."""
    words = [int(hex_address[i:i + 8], 16) for i in range(0, len(hex_address), 8)]
    packed = b"".join(struct.pack("=I", w) for w in words)
    return _plain(ipaddress.ip_address(socket.inet_ntop(socket.AF_INET if len(words) == 1 else socket.AF_INET6,
                                                        packed)))


def _plain(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def _endpoint(address: Address) -> tuple[Any, int]:
    return _plain(ipaddress.ip_address(str(address[0]).split("%")[0])), int(address[1])


TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def peer_uid(peer: Address, local: Address, tables: tuple[str, ...] = TABLES) -> int | None:
    """The uid owning the other end of the loopback TCP connection ``local`` <- ``peer``, or None."""
    try:
        want_local, want_remote = _endpoint(peer), _endpoint(local)
    except (ValueError, IndexError, TypeError):
        return None
    mark = f":{want_local[1]:04X} "  # the peer's port ends its row's local address: most rows are passed over
    for table in tables:
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)  # the header
                for line in fh:
                    if mark not in line:
                        continue
                    fields = line.split()
                    if len(fields) < 10 or fields[3] != ESTABLISHED or fields[9] == "0":
                        continue
                    (l_host, l_port), (r_host, r_port) = (f.split(":") for f in fields[1:3])
                    if (int(l_port, 16), int(r_port, 16)) != (want_local[1], want_remote[1]):
                        continue
                    if (_host(l_host), _host(r_host)) == (want_local[0], want_remote[0]):
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


def _groups(uid: int) -> set[int]:
    try:
        entry = pwd.getpwuid(uid)
        return set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except (KeyError, OSError):
        return set()


def _allowed(st: os.stat_result, uid: int, groups: set[int], bits: tuple[int, int, int]) -> bool:
    """Unix permission rules for ``uid``: the owner's bits when it owns the file, else the group's, else others'."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & bits[0])
    if st.st_gid in groups:
        return bool(st.st_mode & bits[1])
    return bool(st.st_mode & bits[2])


def _reachable(real: str, uid: int, groups: set[int]) -> bool:
    """Every folder above ``real`` may be searched by ``uid``."""
    folder = os.path.dirname(real)
    while True:
        if not _allowed(os.stat(folder), uid, groups, (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)):
            return False
        parent = os.path.dirname(folder)
        if parent == folder:
            return True
        folder = parent


def open_transcript(path: str) -> int | None:
    """A read-only descriptor of the transcript at ``path`` when the caller (``CALLER``) may read it, else None.

    Raises nothing: any trouble (no such file, no permission, an odd file) is None."""
    if not isinstance(path, str) or not path.endswith(SUFFIX):
        return None
    try:
        real = os.path.realpath(path)
        if not real.endswith(SUFFIX) or real.startswith(NOT_FILES):
            return None
        caller = CALLER.get()
        uid = peer_uid(*caller) if caller is not None else None
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)  # the file opened, not the name checked: a swap after the check changes nothing
        if not stat.S_ISREG(st.st_mode):
            ok = False
        elif uid is None:
            ok = st.st_uid == os.geteuid()
        else:
            groups = _groups(uid)
            ok = _allowed(st, uid, groups, (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)) and _reachable(real, uid,
                                                                                                      groups)
    except OSError:
        ok = False
    if not ok:
        os.close(fd)
        return None
    return fd
