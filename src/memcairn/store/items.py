"""The repository: every read and write of memories goes through ``Store``.

One database file, WAL mode, one connection per thread (readers never block the writer), writes in
``BEGIN IMMEDIATE`` transactions. Inserts dedupe by content hash and always return a stable id. ``Store`` holds the
connections and the listeners; its projects, writes, reads and keyword leg are mixins of their own modules.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memcairn.core.errors import StoreError
from memcairn.core.models import KINDS, AddResult, NewItem
from memcairn.store import fts
from memcairn.store.db import connect, describe_open_error, error_kind
from memcairn.store.evidence import EvidenceMixin
from memcairn.store.ingest_state import IngestStateMixin
from memcairn.store.integrity import IntegrityMixin, restores_keyword_table
from memcairn.store.item_reads import ItemReadsMixin
from memcairn.store.item_writes import ItemWritesMixin
from memcairn.store.keyword_search import KeywordSearchMixin
from memcairn.store.migrations import migrate
from memcairn.store.mirror_state import MirrorStateMixin
from memcairn.store.projects import ProjectsMixin
from memcairn.store.remote_state import RemoteStateMixin
from memcairn.store.totals import ChainTotalsMixin
from memcairn.store.transfer_state import TransferStateMixin

if TYPE_CHECKING:  # numpy is imported only by a process that keeps the copy (the worker)
    from memcairn.store.keyword_index import KeywordIndex

Listener = Callable[[str, list[int]], None]


class Store(ProjectsMixin, ItemWritesMixin, ItemReadsMixin, KeywordSearchMixin, MirrorStateMixin, IngestStateMixin,
            TransferStateMixin, IntegrityMixin, RemoteStateMixin, ChainTotalsMixin, EvidenceMixin):
    """Open (creating and migrating if needed) the database at ``path``.

    Raises:
        StoreError: the file cannot be opened or written, or is not a database.
        SchemaTooNewError: the file was written by a newer memcairn.
    """

    def __init__(self, path: Path | str, *, check_fts: bool = True) -> None:
        self.path = Path(path) if str(path) != ":memory:" else None
        self._target = str(path)
        self._local = threading.local()
        self._all_conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._project_ids: dict[str, int] = {}
        self._projects_seen: tuple[float, tuple[tuple[int, str, str | None], ...]] | None = None
        self._frequencies = fts.FrequencyCache()
        self._keyword_index: KeywordIndex | None = None
        self._init_integrity()
        self._init_totals()
        try:
            migrate(self._conn, self.path)
            self._open_checks(check_fts)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(describe_open_error(self._target, exc)) from None
        except BaseException:
            self.close()
            raise

    def _open_checks(self, check_fts: bool) -> None:
        """Repair the keyword index's table and count, check a small file. A damaged page met on the way leaves
        the store open for reads with writes refused (``integrity`` module doc), not closed."""
        try:
            if self.restore_fts_table():
                self.repaired_at_open.append("recreated the missing keyword index table and rebuilt it")
            elif check_fts and self.fts_drift_check():
                self.repaired_at_open.append("rebuilt the keyword index (its row count differed)")
        except sqlite3.DatabaseError as exc:
            if error_kind(exc) != "corrupt":
                raise
            if self.check_file() == "ok":  # the file is sound: the damage is the index's (repaired later)
                return
        self._check_small_file()

    # -- connections ------------------------------------------------------------------------------
    @property
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.path is None and self._all_conns:  # :memory: is per-connection; share the one
                conn = self._all_conns[0]
            else:
                conn = connect(self._target)
                self._watch(conn)
            self._local.conn = conn
            with self._conns_lock:
                self._all_conns.append(conn)
        return conn

    def close(self) -> None:
        with self._conns_lock:
            for conn in self._all_conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all_conns.clear()
        self._local = threading.local()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event, ids)`` after a commit that added, updated or deleted items."""
        self._listeners.append(listener)

    def _notify(self, event: str, ids: list[int]) -> None:
        if not ids:
            return
        for listener in list(self._listeners):
            try:
                listener(event, ids)
            except Exception:  # a listener must never undo or fail a committed write
                pass

    @restores_keyword_table
    def complete_ingest(self, event_ids: Sequence[int], items: Sequence[NewItem], *,
                        prompt_session: tuple[str, str, str] | None = None,
                        end_session: tuple[str, str, str, int] | None = None,
                        replaces: Sequence[int] = ()) -> list[AddResult] | None:
        """``IngestStateMixin.complete_ingest``, written once more after recreating a dropped keyword table."""
        return super().complete_ingest(event_ids, items, prompt_session=prompt_session, end_session=end_session,
                                       replaces=replaces)

    def data_version(self) -> int:
        """``PRAGMA data_version`` of this thread's connection: it changes when another connection (of this
        process or another) commits to the database."""
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def max_item_id(self) -> int:
        return self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM memory_items").fetchone()[0]

    def stats(self) -> dict[str, Any]:
        conn = self._conn
        by_kind = {k: 0 for k in KINDS}
        by_kind.update({r[0]: r[1] for r in conn.execute("SELECT kind, COUNT(*) FROM memory_items GROUP BY kind")})
        by_project: dict[str, dict[str, int]] = {}
        for name, kind, count in conn.execute(
            "SELECT p.name, m.kind, COUNT(*) FROM memory_items m JOIN projects p ON p.id = m.project_id "
            "GROUP BY p.name, m.kind ORDER BY p.name"
        ):
            by_project.setdefault(name, {})[kind] = count
        size = 0
        if self.path is not None:
            for suffix in ("", "-wal", "-shm"):
                p = Path(str(self.path) + suffix)
                size += p.stat().st_size if p.exists() else 0
        return {
            "items": sum(by_kind.values()),
            "by_kind": by_kind,
            "by_project": by_project,
            "projects": conn.execute("SELECT COUNT(*) FROM projects").fetchone()[0],
            "sessions": conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0],
            "db_path": str(self.path) if self.path else ":memory:",
            "db_bytes": size,
        }
