"""Reads that must not wait. The server answers a read first on its process's event loop (``server/http.py``),
where a wait — for a pooled connection, a project's lock, a large project read whole into the copies or many
changes caught up (``project_copies.QUICK_*``), a query's embedding, a ranking left to SQL — would hold up every
other request of the process. Inside ``no_waiting()`` those steps raise ``WouldWait`` before they wait, and the
route runs the read again on a request thread, where they may. A read raising it has written nothing (a
request's bound store only reads) and is simply done again. What stays on the loop is a few short statements
(the key, the changes since a copy, a small project's rows, the shown records); a PostgreSQL that stopped
answering in the middle of one would hold the process's loop until the connection fails, where a thread would
hold only itself.

Why not a thread for every read: a request handed to a thread and its answer handed back cost the process's
interpreter lock twice, and with a few request threads and the loop taking turns on it, 50 clients' fused
searches of 100k memories on 2 cores (query vectors kept) answered 440-475 a second with a p95 of 132-145 ms;
answered on the loop when nothing waits, 623-625 a second, p95 92-99 ms (the same clients, two runs each).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from memcairn.core.errors import WouldWait

_local = threading.local()


@contextmanager
def no_waiting() -> Iterator[None]:
    """In this thread, until the block ends, a step that would wait raises ``WouldWait`` instead."""
    before = may_wait()
    _local.forbidden = True
    try:
        yield
    finally:
        _local.forbidden = not before


def may_wait() -> bool:
    return not getattr(_local, "forbidden", False)


def before_waiting(what: str) -> None:
    """Call before a step that may wait: raises ``WouldWait`` (naming ``what``) where waiting is not allowed."""
    if not may_wait():
        raise WouldWait(what)
