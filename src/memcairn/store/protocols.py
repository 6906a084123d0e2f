"""The storage boundary: what search, context, capture and the doors may ask of a store, as typed protocols.

Each protocol holds only the methods its callers use (read off the callers, not designed ahead of them). The
SQLite ``Store`` satisfies all of them; the team store's ``pgstore.adapter.TenantStore`` (one tenant, optionally
one project) satisfies ``Items``, ``KeywordSearch``, ``ProjectsAndSessions``, ``SearchStore`` and
``ContextStore``, where the two stores mean the same thing. tests/test_store_contract.py checks both against
the same behaviour, and that every method named here exists on each implementation with the same parameters.

- ``Items``: write (deduped by content), read, list newest/oldest first, delete (a deleted content is
  forgotten: a replay of it is not stored again unless revived);
- ``KeywordSearch``: the keyword leg, (id, score) best first, a higher score is better;
- ``ProjectsAndSessions``: projects with their merges, sessions opened and ended;
- ``IngestQueue``: hook events waiting for capture, their sessions, usage and capture notices;
- ``MirrorState``: the vector mirror's watermarks and outbox;
- ``Transfer``: export and import rows;
- ``RemoteState``: the remote-mode forwarder's watermark and the deletions it still has to send;
- ``FileUpkeep``: the checks and repairs of a store file the worker runs.

Callers take the narrowest protocol or one of the compositions at the end (``SearchStore``, ``ContextStore``,
``CaptureStore``, ``MirrorStore``, ``UpkeepStore``, ``ImportStore``, ``LocalStore``). Plain values they exchange live in
``store.records``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from memcairn.core.models import AddResult, ItemFilter, MemoryItem, NewItem
from memcairn.store.records import (
    EvidenceHit,
    IngestEvent,
    NewEvidence,
    OutboxEntry,
    ProjectInfo,
    QueryTerms,
    SessionWindow,
)

if TYPE_CHECKING:
    from memcairn.store.transfer_state import Outcome, TransferRecord

Listener = Callable[[str, list[int]], None]
DamageListener = Callable[[str, str], None]


# -- items ------------------------------------------------------------------------------------------------
class ItemReader(Protocol):
    def get_item(self, item_id: int) -> MemoryItem:
        """The item (raises ``NotFoundError`` when there is none)."""
        ...

    def get_items(self, ids: Sequence[int]) -> list[MemoryItem]:
        """Items in the order asked; unknown ids are left out."""
        ...

    def list_items(self, flt: ItemFilter | None = None, *, order: str = "newest", limit: int = 50,
                   offset: int = 0) -> list[MemoryItem]:
        """Items passing the filter, ``newest`` (or ``oldest``) first by creation time, then id."""
        ...


class ItemWriter(Protocol):
    def add_item(self, item: NewItem, *, revive: bool = False) -> AddResult: ...

    def add_items(self, items: Sequence[NewItem], *, revive: bool = False) -> list[AddResult]:
        """One transaction; the same content twice is one row (the second gets its id, ``created`` False); a
        deleted content is refused (``forgotten``) unless ``revive``."""
        ...

    def delete_items(self, ids: Iterable[int]) -> list[int]:
        """Delete and forget; the ids that existed."""
        ...


class Items(ItemReader, ItemWriter, Protocol):
    """Write, read, list, delete/forget."""


class ItemEditor(Protocol):
    def update_item(self, item_id: int, **changes: Any) -> MemoryItem: ...


class TimeWindow(Protocol):
    """Reads by ids and by time that search ranks and pages with (the timeline's slices)."""

    def filter_ids(self, ids: Sequence[int], flt: ItemFilter | None) -> set[int]: ...

    def created_epochs(self, ids: Sequence[int], flt: ItemFilter | None = None) -> dict[int, int]: ...

    def neighbours(self, epoch: int, *, before: int, after: int, flt: ItemFilter | None = None,
                   anchor_id: int | None = None) -> tuple[list[MemoryItem], list[MemoryItem]]: ...


# -- keyword leg ------------------------------------------------------------------------------------------
class KeywordSearch(Protocol):
    def keyword_ids(self, query: str, flt: ItemFilter | None = None, *, limit: int = 20, offset: int = 0,
                    order: str = "relevance") -> list[tuple[int, float]]:
        """(item id, score) best first; a higher score is a better match. Never raises on the query's text."""
        ...


@runtime_checkable
class SessionWindows(Protocol):
    """Each item's neighbours in its session, which a search ranks with it (a store without them ranks items
    alone)."""

    def session_windows(self, ids: Sequence[int], radius: int = 1) -> dict[int, SessionWindow]: ...


class KeywordEvidence(Protocol):
    def query_terms(self, query: str, ids: Sequence[int]) -> QueryTerms | None:
        """The query's words, their document frequencies and which of ``ids`` hold each (None: unreadable)."""
        ...


@runtime_checkable
class StepEvidence(Protocol):
    """The steps kept behind the memories (``schema.EVIDENCE_TABLES``); a store without them (the team server's
    tenant store) leaves capture and search to do without."""

    def add_evidence(self, steps: Sequence[NewEvidence]) -> int: ...

    def evidence_search(self, query: str, projects: Sequence[str] | None, limit: int) -> list[EvidenceHit]: ...


# -- projects and sessions --------------------------------------------------------------------------------
class ProjectsAndSessions(Protocol):
    def projects(self) -> list[ProjectInfo]: ...

    def project_names(self) -> list[str]: ...

    def resolve_projects(self, names: Sequence[str]) -> list[tuple[int, str]]:
        """(id, name) of the named projects and of every project merged into them."""
        ...

    def resolve_project_ids(self, names: Sequence[str]) -> list[int]: ...

    def ensure_session(self, agent_session_id: str, project: str, platform_source: str = "unknown",
                       started_at_epoch: int | None = None) -> int:
        """The session's id, made when new."""
        ...

    def end_session(self, agent_session_id: str, platform_source: str = "unknown", status: str = "completed",
                    ended_at_epoch: int | None = None) -> bool:
        """Whether there was such a session to end."""
        ...


class ProjectMerges(Protocol):
    def merge_project(self, source: str, into: str) -> None: ...


class ProjectSnapshot(Protocol):
    def project_rows(self, wanted: Sequence[str] = ()) -> tuple[tuple[int, str, str | None], ...]:
        """(id, name, merged_into) of every project, as recently read (the context memo keys on it)."""
        ...


# -- the ingest queue -------------------------------------------------------------------------------------
class IngestQueue(Protocol):
    def enqueue_ingest_event(self, session_id: str, platform_source: str, event_type: str,
                             payload: dict[str, Any], tool_use_id: str | None = None,
                             source_key: str | None = None, event_key: str | None = None) -> tuple[int, bool]: ...

    def pending_ingest_events(self, limit: int = 100) -> list[IngestEvent]: ...

    def mark_ingest_event(self, event_id: int, status: str, error: str | None = None) -> None: ...

    def complete_ingest(self, event_ids: Sequence[int], items: Sequence[NewItem], *,
                        prompt_session: tuple[str, str, str] | None = None,
                        end_session: tuple[str, str, str, int] | None = None,
                        replaces: Sequence[int] = ()) -> list[AddResult] | None: ...

    def session_prompt_count(self, platform_source: str, session_id: str) -> int: ...

    def session_project(self, platform_source: str, session_id: str) -> str | None: ...

    def session_events(self, platform_source: str, session_id: str, *, after_id: int = 0,
                       before_id: int | None = None, event_type: str | None = None) -> list[IngestEvent]: ...

    def earlier_session_start(self, platform_source: str, session_id: str, before_epoch: int) -> int | None: ...

    def last_prompt_event(self, platform_source: str, session_id: str, before_id: int, *,
                          started_at: int | None = None) -> IngestEvent | None: ...

    def prune_ingest_events(self, older_than_epoch: int) -> int: ...

    def ingest_queue(self) -> dict[str, Any]: ...

    def live_hook_platforms(self, since_epoch: int) -> list[str]: ...

    def requeue_failed_ingest(self, matching: str | None = None) -> int: ...

    def failed_ingest_count(self, matching: str | None = None) -> int: ...

    def failed_ingest_errors(self, limit: int = 3) -> list[str]: ...

    def pending_capture_notices(self) -> list[str]: ...

    def record_usage(self, usage: Any, session_id: str | None) -> None: ...

    def tokens_spent(self, *, session_id: str | None = None, since_epoch: int | None = None) -> int: ...

    def add_capture_notice(self, kind: str, message: str, project: str | None = None) -> None: ...

    def take_capture_notices(self, projects: Sequence[str] | None = None, *, mark: bool = True) -> list[str]: ...


# -- the vector mirror's state ----------------------------------------------------------------------------
class MirrorState(Protocol):
    def watermarks(self, index_key: str) -> dict[tuple[str, str], int]: ...

    def advance_watermark(self, index_key: str, project: str, kind: str, value: int) -> int: ...

    def set_watermark(self, index_key: str, project: str, kind: str, value: int) -> None: ...

    def clear_watermarks(self, index_key: str | None = None) -> None: ...

    def mirror_extent(self) -> dict[tuple[str, str], int]: ...

    def count_after(self, project: str, kind: str, after_id: int) -> int: ...

    def ids_after(self, project: str, kind: str, after_id: int, limit: int) -> list[int]: ...

    def outbox(self, limit: int = 500) -> list[OutboxEntry]: ...

    def outbox_size(self) -> int: ...

    def ack_outbox(self, entry_ids: list[int]) -> None: ...

    def clear_outbox(self) -> None: ...


# -- transfer ---------------------------------------------------------------------------------------------
class Transfer(Protocol):
    def export_snapshot(self) -> AbstractContextManager[None]: ...

    def export_projects(self) -> Iterator[dict[str, Any]]: ...

    def export_sessions(self, page_size: int = 1000) -> Iterator[dict[str, Any]]: ...

    def export_items(self, page_size: int = 500) -> Iterator[dict[str, Any]]: ...

    def export_forgotten(self, page_size: int = 1000) -> Iterator[dict[str, Any]]: ...

    def session_projects(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]: ...

    def import_records(self, records: Sequence[TransferRecord]) -> list[Outcome]: ...


# -- remote mode ------------------------------------------------------------------------------------------
class RemoteState(Protocol):
    def remote_watermark(self, server: str) -> int: ...

    def acknowledge_forwarded(self, server: str, last_id: int, sent: dict[int, dict[str, Any]]) -> int: ...

    def deletions_to_forward(self, server: str, limit: int) -> list[tuple[int, int, dict[str, Any]]]: ...

    def deletions_forwarded(self, server: str, seqs: list[int]) -> None: ...

    def count_deletions_to_forward(self, server: str) -> int: ...

    def edits_to_forward(self, server: str, limit: int) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
        ...

    def edit_forwarded(self, server: str, item_id: int, event: dict[str, Any] | None) -> None: ...

    def items_to_forward(self, after_id: int, limit: int) -> list[dict[str, Any]]: ...

    def count_to_forward(self, after_id: int) -> int: ...


# -- what a long-lived process does with its store --------------------------------------------------------
class Listeners(Protocol):
    def add_listener(self, listener: Listener) -> None:
        """``listener(event, ids)`` after a commit that added, updated or deleted items."""
        ...


class FileUpkeep(Protocol):
    """The checks and repairs of the store's file (SQLite's own: no other backend has them)."""

    @property
    def path(self) -> Path | None: ...

    @property
    def damage(self) -> str | None: ...

    @property
    def checked_at(self) -> float | None: ...

    def add_damage_listener(self, listener: DamageListener) -> None: ...

    def note_error(self, exc: BaseException) -> str | None: ...

    def check_file(self) -> str: ...

    def checkpoint(self) -> bool: ...

    def data_version(self) -> int: ...

    def repair_keyword_index(self, *, content: bool = True) -> list[str]: ...


class StoreInfo(Protocol):
    def stats(self) -> dict[str, Any]: ...

    def stored_since(self, projects: Sequence[str] | None, epoch_ms: int, *,
                     besides_session: tuple[str, str] | None = None) -> bool: ...

    def start_keyword_index(self, max_rows: int | None = None) -> object:
        """Keep an in-memory copy of the keyword index (a long-lived process)."""
        ...

    def keyword_index_stats(self) -> dict[str, object] | None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


# -- what each caller takes -------------------------------------------------------------------------------
class SearchStore(ItemReader, TimeWindow, KeywordSearch, KeywordEvidence, Protocol):
    """``search.SearchService`` and its timeline."""

    def project_names(self) -> list[str]: ...


class ContextStore(Protocol):
    """The SessionStart context (``memcairn.context.build``)."""

    def resolve_project_ids(self, names: Sequence[str]) -> list[int]: ...

    def list_items(self, flt: ItemFilter | None = None, *, order: str = "newest", limit: int = 50,
                   offset: int = 0) -> list[MemoryItem]: ...

    def chain_totals(self, project_ids: Sequence[int] | None, platform: str | None = None) -> tuple[int, int]:
        """(items, stored characters) of the projects (every project when None)."""
        ...

    def window_start(self, project_ids: Sequence[int] | None, window: int, platform: str | None = None) -> int | None:
        """The creation time from which the newest ``window`` items of each project lie (None: fewer)."""
        ...


class MemoContextStore(ContextStore, ProjectSnapshot, Protocol):
    """``context_memo.ContextMemo``: the context, keyed on the projects as last read."""


class CaptureStore(IngestQueue, ItemReader, ItemEditor, Protocol):
    """The capture pipeline and the transcript importer."""

    def ensure_session(self, agent_session_id: str, project: str, platform_source: str = "unknown",
                       started_at_epoch: int | None = None) -> int: ...


class MirrorStore(MirrorState, ItemReader, Protocol):
    """``mirror.sync.MirrorSync``: the mirror's state and the items it embeds."""

    def resolve_projects(self, names: Sequence[str]) -> list[tuple[int, str]]: ...


class UpkeepStore(FileUpkeep, Listeners, Protocol):
    """``worker.upkeep.StoreUpkeep``: the file's checks, and events a full disk failed queued again."""

    def failed_ingest_count(self, matching: str | None = None) -> int: ...

    def requeue_failed_ingest(self, matching: str | None = None) -> int: ...


class ImportStore(ItemWriter, ProjectMerges, Transfer, Protocol):
    """``transfer.claude_mem``: rows written as the store's own, merges and sessions recorded."""

    def projects(self) -> list[ProjectInfo]: ...


class LocalStore(Items, ItemEditor, TimeWindow, KeywordSearch, KeywordEvidence, ProjectsAndSessions, ProjectMerges,
                 ProjectSnapshot, ContextStore, IngestQueue, MirrorState, Transfer, RemoteState, Listeners,
                 FileUpkeep, StoreInfo, Protocol):
    """Everything the worker and the CLI ask of this machine's store (``runtime.Runtime.store``)."""
