"""Live events for the viewer: store commits become server-sent events on ``GET /stream``.

The store calls its listeners on the writing thread right after a commit; ``StoreEventBridge`` turns the
ids into small JSON records and hands them to the ``Broadcaster`` on the event loop. Each client has a
bounded queue: a client that falls that far behind is disconnected (``EventSource`` reconnects by itself
and the viewer reloads), so a stuck browser tab can never make the worker hold memory without limit. A
commit of more than ``MAX_ITEMS_PER_NOTIFY`` items (an import) ends every stream the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from memcairn.search.result import item_row

log = logging.getLogger("memcairn.worker")

DEFAULT_QUEUE_SIZE = 256
HEARTBEAT_SECONDS = 15.0
MAX_ITEMS_PER_NOTIFY = 200
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


class StoreEventBridge:
    """A store listener (``store.add_listener(bridge)``) that publishes commits to a broadcaster."""

    def __init__(self, store: Any, broadcaster: Broadcaster) -> None:
        self.store = store
        self.broadcaster = broadcaster

    def __call__(self, event: str, ids: list[int]) -> None:
        name = EVENT_NAMES.get(event)
        if name is None or not self.broadcaster.subscribers:
            return
        ids = list(ids)
        if len(ids) > MAX_ITEMS_PER_NOTIFY:  # a bulk write: one event each would flood every client
            self.broadcaster.resync_threadsafe()
            return
        if event == "deleted":
            records: list[dict[str, Any]] = [{"id": i} for i in ids]
        else:
            records = [item_event(item) for item in self.store.get_items(ids)]
        for record in records:
            self.broadcaster.publish_threadsafe(name, record)
