"""A memo of rendered SessionStart contexts, so ``GET /api/context/inject`` answers a repeated question
without rendering it again.

Why: rendering costs ~20 ms of CPU on a 100k-item store (most of it SQL), and every session start asks
(twice: for the model and, in colour, for the person), so a few concurrent clients queue behind each other
on a 2-core machine. Yet the text is a pure function of (see ``memcairn.context.build``):

- the store's content, and its projects table as the ``Store`` sees it: a ``Store`` keeps its read of that
  table for up to ``PROJECTS_TTL`` seconds (``Store.project_rows``), so a merge committed by another process
  reaches its renders a little after the change token moved; with the table in the key, a text rendered from
  the older read is not served once the store reads the newer one,
- the files the rows' freshness was read from (``context.freshness_check``: its ``token`` moves when one does),
- the request: projects, ``platform_source``, ``colors``, ``full``,
- the settings that shape it (``context.CONTEXT_SETTINGS``) and ``tz``,
- the current time, but only as the header's clock shows it (``context.clock``: minute precision in ``tz``,
  with the zone's name; rows show the items' own times and nothing is relative to ``now``).

The key holds the zone's name, not the minute: a text kept from an earlier minute gets the current clock
in its header (``context.clock.restamp``; same width, so the budget fitting comes out the same), and a memoized
answer is byte-identical to a fresh render. Otherwise every minute would re-render every project at once.

**The store's change token** is ``PRAGMA data_version`` read on a dedicated read-only connection to the
store's file (``?mode=ro`` and ``query_only``). SQLite changes that value whenever *another* connection
commits, in this process or any other (a CLI import, a second worker, the hook queue); this connection
never writes, so every commit to the database counts, including ones that do not touch the context (the
ingest queue, mirror watermarks): a spurious miss, never a stale hit. The token is read *before* the data
is gathered, so a text stored under a token never predates it (a write racing a render stores a newer text
under an older token, which no later request asks for). When the token moves, older entries are dropped.

**Bypassed** (always rendered, nothing stored): an in-memory store (``path`` None: its connection cannot be
shared), a store file the memo cannot open read-only, a failing read of the token, and a request carrying
capture notices (they are consumed by the request, so a text holding them must not be replayed and a
memoized text lacks them). ``fresh`` skips the lookup but stores the new text (diagnostics, the bench).

Bounded: ``capacity`` texts and ``max_chars`` characters, least recently used first out; thread-safe (the
worker renders on its thread pool; renders run outside the lock, so two clients missing the same key at
once both render, and the second store wins with an identical text).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any

from memcairn.context.build import render_context, shaping_settings
from memcairn.context.clock import CLOCK_WIDTH, clock, restamp
from memcairn.context.freshness_check import shared_checker
from memcairn.core.clock import now_ms as current_ms
from memcairn.store.protocols import MemoContextStore
from memcairn.wire.config import Settings

log = logging.getLogger("memcairn.context")

CAPACITY = 256
MAX_CHARS = 8_000_000  # ~8 MB of text at most, whatever the entries' sizes (a ``full`` text can be large)
BUSY_TIMEOUT_MS = 5_000
MEMO, RENDERED = "memo", "rendered"


@dataclass(frozen=True)
class Answer:
    text: str
    source: str  # MEMO (served from the memo) or RENDERED (rendered for this request)


class ContextMemo:
    """Rendered context texts of one store's database file, keyed as the module docstring says."""

    def __init__(self, path: Path | str | None, *, capacity: int = CAPACITY, max_chars: int = MAX_CHARS) -> None:
        self.capacity = max(1, capacity)
        self.max_chars = max(1, max_chars)
        self.hits = self.misses = self.bypassed = 0
        self._lock = threading.Lock()
        self._texts: OrderedDict[Hashable, tuple[str, str]] = OrderedDict()  # key -> (text, its clock)
        self._chars = 0
        self._version: int | None = None  # the token the entries were stored under
        self._warned = False
        self._conn = self._open(Path(path)) if path is not None else None

    @classmethod
    def for_store(cls, store: object, **kwargs: Any) -> ContextMemo:
        return cls(getattr(store, "path", None), **kwargs)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection | None:
        conn = None
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = ON")
            conn.execute("PRAGMA data_version").fetchone()
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # a file that is not a database fails here
            return conn
        except (sqlite3.Error, OSError, ValueError) as exc:
            log.warning("context memo off: cannot open %s read-only (%s); every context is rendered", path, exc)
            if conn is not None:
                conn.close()
            return None

    @property
    def enabled(self) -> bool:
        return self._conn is not None

    def __bool__(self) -> bool:  # a memo is a memo even while empty (``__len__`` would say otherwise)
        return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._texts)

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._texts.clear()
            self._chars = 0
            if conn is not None:
                conn.close()

    def version(self) -> int | None:
        """The store's change token now; None when the memo is bypassed. A new token drops older entries."""
        with self._lock:
            if self._conn is None:
                return None
            try:
                value = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:  # busy past the timeout, file gone: render this request
                if not self._warned:
                    log.warning("context memo: cannot read the store's change token (%s); rendering", exc)
                    self._warned = True
                return None
            if value != self._version:
                self._texts.clear()
                self._chars = 0
                self._version = value
            return value

    def _get(self, key: tuple[Any, ...], stamp: str) -> str | None:
        with self._lock:
            entry = self._texts.get(key)
            if entry is not None:
                self._texts.move_to_end(key)
        return None if entry is None else restamp(entry[0], entry[1], stamp)

    def _put(self, key: tuple[Any, ...], text: str, stamp: str) -> None:
        with self._lock:
            if key[0] != self._version or len(text) > self.max_chars:  # the store moved on meanwhile
                return
            old = self._texts.pop(key, None)
            self._chars -= len(old[0]) if old is not None else 0
            self._texts[key] = (text, stamp)
            self._chars += len(text)
            while len(self._texts) > self.capacity or self._chars > self.max_chars:
                _, (dropped, _) = self._texts.popitem(last=False)
                self._chars -= len(dropped)

    def render(self, store: MemoContextStore, settings: Settings, *, projects: Sequence[str] | None = None,
               platform_source: str | None = None, colors: bool = False, full: bool = False,
               now_ms: int | None = None, tz: tzinfo | None = None, notices: Sequence[str] = (),
               fresh: bool = False) -> Answer:
        """``render_context`` with the same arguments, from the memo when it holds the text (``fresh``: render
        anyway, and keep the new text)."""
        now_ms = current_ms() if now_ms is None else now_ms

        def build() -> str:
            return render_context(store, settings, projects=projects, platform_source=platform_source,
                                  colors=colors, full=full, now_ms=now_ms, tz=tz, notices=notices)

        token = None if notices else self.version()
        if token is None:
            with self._lock:
                self.bypassed += 1
            return Answer(build(), RENDERED)
        platform = platform_source.strip() if platform_source and platform_source.strip() else None
        stamp = clock(now_ms, tz)
        key = (token, tuple(projects) if projects else None, platform, bool(colors), bool(full),
               stamp[CLOCK_WIDTH:], tz, shaping_settings(settings), store.project_rows(tuple(projects or ())),
               shared_checker().token())  # the files the rows' freshness was read from
        if not fresh:
            text = self._get(key, stamp)
            if text is not None:
                with self._lock:
                    self.hits += 1
                return Answer(text, MEMO)
        text = build()
        self._put(key, text, stamp)
        with self._lock:
            self.misses += 1
        return Answer(text, RENDERED)
