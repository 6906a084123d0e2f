"""Live events for the viewer: store commits become server-sent events on ``GET /stream``.

The store calls its listeners on the writing thread right after a commit; ``StoreEventBridge`` turns the
ids into small JSON records and hands them to the ``Broadcaster`` on the event loop. Each client has a
bounded queue: a client that falls that far behind is disconnected (``EventSource`` reconnects by itself
and the viewer reloads), so a stuck browser tab can never make the worker hold memory without limit. A
commit of more than ``MAX_ITEMS_PER_NOTIFY`` items (an import) ends every stream the same way.

**Writes of other processes.** Store listeners only hear the worker's own ``Store``. ``ExternalWriteTailer``
covers the rest (``memcairn import``, ``memcairn add`` without a worker, another tool): a thread that tails
the ``keyword_changes`` log (one entry per insert, update or delete of an item, from any process; read by
``store/changes.py`` on a read-only connection).

- *Idle cost*: every ``POLL_SECONDS`` one ``PRAGMA data_version`` (no table is read); only when some other
  connection committed is the log read, and only when its last entry moved are items read. With no client
  connected the tailer just moves its position (a page that connects loads its feed afresh).
- *Event type*, decided per item id from the rows in one snapshot, against ``high`` (the highest item id at
  the previous position; ids are AUTOINCREMENT, never reused) and ``ToldLedger`` (what the streams were last
  told about the id: its ``(updated_at_epoch, content_hash)`` or deleted):
  row gone -> ``item_deleted``, unless the streams were told so already, or the id is above ``high`` and was
  never told (added and deleted between two polls: nothing to take off the page);
  row present and the same state as told -> nothing; told before (present) -> ``item_updated``;
  never told and above ``high`` -> ``item_added``; never told and at most ``high`` (an item older than the
  position, which the page loaded itself) -> ``item_updated``.
  Several entries of one id between two polls make one event, with the row as it is now.
- *Own writes once*: ``StoreEventBridge`` and the tailer both publish through ``ToldLedger.claim(id,
  state)``, which accepts a state once (and never one older than told, nor anything after a delete): the
  bridge's immediate event takes the state, and the tailer, reading the same row later, finds it told and
  stays quiet (if the tailer reads first, the bridge is the one that stays quiet). With no stream listening
  the bridge reads nothing and marks the ids ``OWN``: a page that connects before the tailer's next poll
  loaded them itself, and the tailer records their state without telling it.
- *Batches*: a poll reads at most ``MAX_CHANGES_PER_POLL`` log entries; past that (an import of 100,000
  rows) it reads none of them, and, like a poll with more than ``MAX_ITEMS_PER_NOTIFY`` items to announce,
  ends every stream once (``Broadcaster.resync``): the page reconnects and reloads, as for a bulk write of
  its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from memcairn.search.result import item_row
from memcairn.store.changes import ChangeLog
from memcairn.store.protocols import ItemReader

log = logging.getLogger("memcairn.worker")

DEFAULT_QUEUE_SIZE = 256
HEARTBEAT_SECONDS = 15.0
MAX_ITEMS_PER_NOTIFY = 200
POLL_SECONDS = 0.5  # how often the tailer looks for other processes' writes
MAX_CHANGES_PER_POLL = 2_000  # log entries one poll reads at most; more end every stream instead
LEDGER_SIZE = 20_000  # item ids whose last told state is remembered (a forgotten one may be told twice)
DELETED = "deleted"  # a ToldLedger state
OWN = "own"  # a ToldLedger state: written by the worker while no stream listened (its version unknown)
EVENT_NAMES = {"added": "item_added", "updated": "item_updated", "deleted": "item_deleted"}

_CLOSE = ("", None)  # sentinel: end the stream


def sse(event: str, data: Any) -> str:
    """One server-sent event; the JSON is on one line, so one ``data:`` field carries it."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


class _Client:
    __slots__ = ("queue", "overflowed")

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=size)
        self.overflowed = False


class Broadcaster:
    """Fan-out of events to every connected ``/stream`` client. Methods without ``_threadsafe`` run on
    the event loop; the ``_threadsafe`` ones may be called from any thread."""

    def __init__(self, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self.queue_size = queue_size
        self._clients: set[_Client] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.closed = False

    @property
    def subscribers(self) -> int:
        return len(self._clients)

    def subscribe(self) -> _Client:
        client = _Client(self.queue_size)
        if self.closed:
            client.queue.put_nowait(_CLOSE)
        self._clients.add(client)
        return client

    def unsubscribe(self, client: _Client) -> None:
        self._clients.discard(client)

    def publish(self, event: str, data: Any) -> None:
        for client in list(self._clients):
            if client.overflowed:
                continue
            try:
                client.queue.put_nowait((event, data))
            except asyncio.QueueFull:
                self._disconnect(client)
                log.info("an event-stream client fell %d events behind; disconnected it", self.queue_size)

    def resync(self) -> None:
        """End every stream now (too many changes at once to send one by one): each client reconnects and
        reloads, as after falling behind."""
        for client in list(self._clients):
            if not client.overflowed:
                self._disconnect(client)

    def _disconnect(self, client: _Client) -> None:
        client.overflowed = True
        self._drain(client)
        client.queue.put_nowait(_CLOSE)

    @staticmethod
    def _drain(client: _Client) -> None:
        while not client.queue.empty():
            client.queue.get_nowait()

    def close(self) -> None:
        """End every stream (shutdown); later subscribers get a stream that ends at once."""
        self.closed = True
        for client in list(self._clients):
            self._drain(client)
            client.queue.put_nowait(_CLOSE)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed in between
            pass

    def publish_threadsafe(self, event: str, data: Any) -> None:
        self._call(self.publish, event, data)

    def resync_threadsafe(self) -> None:
        self._call(self.resync)

    def close_threadsafe(self) -> None:
        self._call(self.close)

    async def stream(self, first: tuple[str, Any] | None = None,
                     heartbeat: float = HEARTBEAT_SECONDS) -> AsyncIterator[str]:
        """The text of one client's event stream, until shutdown, overflow or disconnect."""
        client = self.subscribe()
        try:
            yield "retry: 3000\n\n"
            if first is not None:
                yield sse(*first)
            while True:
                try:
                    event, data = await asyncio.wait_for(client.queue.get(), timeout=heartbeat)
                except TimeoutError:
                    yield ": heartbeat\n\n"
                    continue
                if not event:
                    return
                yield sse(event, data)
        finally:
            self.unsubscribe(client)


def item_event(item: Any) -> dict[str, Any]:
    return item_row(item)


def item_state(item: Any) -> tuple[int, str]:
    """What tells two versions of an item apart: every write stamps ``updated_at_epoch`` and ``content_hash``."""
    return (int(getattr(item, "updated_at_epoch", 0) or 0), str(getattr(item, "content_hash", "")))


class ToldLedger:
    """The state the streams were last told for each recent item id (``LEDGER_SIZE`` ids, least recent
    dropped first); thread-safe. See the module's notes."""

    def __init__(self, size: int = LEDGER_SIZE) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._told: OrderedDict[int, tuple[int, str] | str] = OrderedDict()

    def get(self, item_id: int) -> tuple[int, str] | str | None:
        with self._lock:
            return self._told.get(item_id)

    def claim(self, item_id: int, state: tuple[int, str] | str) -> bool:
        """True once for a state not told yet (the caller publishes it); False for one told already, one
        older than told, or anything after the id was told deleted (ids are never reused)."""
        with self._lock:
            told = self._told.get(item_id)
            if told == DELETED or told == state:
                return False
            if isinstance(told, tuple) and state != DELETED and state[0] < told[0]:
                return False  # a late event for an older version
            self._remember(item_id, state)
            return True

    def adopt(self, item_id: int, state: tuple[int, str] | str) -> None:
        """Record ``state`` as told without telling it (the tailer meeting an ``OWN`` write)."""
        with self._lock:
            self._remember(item_id, state)

    def mark_own(self, ids: list[int], deleted: bool) -> None:
        """The worker wrote these while no stream listened: nobody is to be told, and the tailer must not take
        them for another process's writes when a page connects before its next poll."""
        with self._lock:
            for item_id in ids:
                self._remember(item_id, DELETED if deleted else OWN)

    def _remember(self, item_id: int, state: tuple[int, str] | str) -> None:
        self._told[item_id] = state
        self._told.move_to_end(item_id)
        while len(self._told) > self.size:
            self._told.popitem(last=False)


class StoreEventBridge:
    """A store listener (``store.add_listener(bridge)``) that publishes commits to a broadcaster."""

    def __init__(self, store: ItemReader, broadcaster: Broadcaster, ledger: ToldLedger | None = None) -> None:
        self.store = store
        self.broadcaster = broadcaster
        self.ledger = ledger or ToldLedger()

    def __call__(self, event: str, ids: list[int]) -> None:
        name = EVENT_NAMES.get(event)
        if name is None:
            return
        if not self.broadcaster.subscribers:
            self.ledger.mark_own(list(ids), deleted=event == "deleted")
            return
        ids = list(ids)
        if len(ids) > MAX_ITEMS_PER_NOTIFY:  # a bulk write: one event each would flood every client
            self.broadcaster.resync_threadsafe()
            return
        if event == "deleted":
            records: list[dict[str, Any]] = [{"id": i} for i in ids if self.ledger.claim(i, DELETED)]
        else:
            records = [item_event(item) for item in self.store.get_items(ids)
                       if self.ledger.claim(item.id, item_state(item))]
        for record in records:
            self.broadcaster.publish_threadsafe(name, record)


class ExternalWriteTailer:
    """Streams the item writes of other processes (see the module's notes). ``start`` opens the log and
    starts the polling thread (nothing for an in-memory store); ``stop`` ends and joins it."""

    def __init__(self, bridge: StoreEventBridge, *, interval: float = POLL_SECONDS,
                 max_changes: int = MAX_CHANGES_PER_POLL, max_items: int = MAX_ITEMS_PER_NOTIFY) -> None:
        self.store = bridge.store
        self.broadcaster = bridge.broadcaster
        self.ledger = bridge.ledger
        self.interval = interval
        self.max_changes = max_changes
        self.max_items = max_items
        self._log: Any = None
        self._version: int | None = None
        self._seq = 0
        self._high = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = ""

    def open(self) -> bool:
        """Open the log and take its current position (what is already there is not streamed)."""
        path = getattr(self.store, "path", None)
        if path is None:
            return False
        try:
            changes = ChangeLog(path)
            self._version = changes.data_version()
            self._seq, self._high = changes.position()
        except Exception as exc:  # noqa: BLE001 - the stream still carries the worker's own writes
            log.warning("the stream will not show other processes' writes: cannot read %s (%s)", path, exc)
            return False
        self._log = changes
        return True

    def start(self) -> None:
        if self._thread is not None or not self.open():
            return
        self._thread = threading.Thread(target=self._run, name="memcairn-stream-tail", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the stream's change tailer did not stop within %.0f s", timeout)
                return
            self._thread = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
                self._failing = ""
            except Exception as exc:  # noqa: BLE001 - a locked or replaced file: try again next time
                if str(exc) != self._failing:
                    log.warning("the stream's change tailer failed (%s); retrying", exc)
                    self._failing = str(exc)

    def poll(self) -> int:
        """One look at the log; the number of events published (-1: every stream was ended instead)."""
        changes = self._log
        if changes is None:
            return 0
        version = changes.data_version()
        if version == self._version:
            return 0  # nobody committed since the last look
        self._version = version
        if not self.broadcaster.subscribers:
            self._seq, self._high = changes.position()
            return 0
        batch = changes.read_since(self._seq, self.max_changes)
        high = self._high
        self._seq, self._high = batch.last_seq, max(high, batch.max_item_id)
        if batch.overflow:
            return self._resync(f"more than {self.max_changes} changes")
        plan: list[tuple[int, str]] = []
        for item_id in batch.item_ids:
            told, state = self.ledger.get(item_id), batch.states.get(item_id)
            if told == OWN:  # the worker's own write while nobody listened: a page loads it itself
                self.ledger.adopt(item_id, state if state is not None else DELETED)
                continue
            if state is None:
                if told != DELETED and (told is not None or item_id <= high):
                    plan.append((item_id, "deleted"))
            elif told != state:
                plan.append((item_id, "added" if told is None and item_id > high else "updated"))
        if len(plan) > self.max_items:
            return self._resync(f"{len(plan)} items changed")
        present = [item_id for item_id, event in plan if event != "deleted"]
        items = {item.id: item for item in self.store.get_items(present)} if present else {}
        published = 0
        for item_id, event in plan:
            if event == "deleted":
                if self.ledger.claim(item_id, DELETED):
                    self.broadcaster.publish_threadsafe(EVENT_NAMES[event], {"id": item_id})
                    published += 1
                continue
            item = items.get(item_id)
            if item is not None and self.ledger.claim(item_id, item_state(item)):  # None: deleted since
                self.broadcaster.publish_threadsafe(EVENT_NAMES[event], item_event(item))
                published += 1
        return published

    def _resync(self, why: str) -> int:
        log.info("other processes wrote to the store (%s): every event stream reloads", why)
        self.broadcaster.resync_threadsafe()
        return -1
