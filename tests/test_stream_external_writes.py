"""Writes made by other processes reach ``GET /stream`` (``ExternalWriteTailer`` in ``worker/events.py``).

The first half drives the tailer's ``poll`` by hand against a second ``Store`` (another connection, as
another process is to SQLite): event types, own writes told once, coalescing and the idle cost, with no
timing involved. The second half runs the worker app in process, reads its event stream and writes from a
real second process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.store.changes import ChangeLog
from memcairn.wire.config import Settings, load_settings
from memcairn.worker.app import make_app
from memcairn.worker.events import EVENT_NAMES, MAX_ITEMS_PER_NOTIFY, ExternalWriteTailer, StoreEventBridge, item_event

PORT = 37879
BASE = f"http://127.0.0.1:{PORT}"
EVENT_DEADLINE_S = 3.0  # one poll is 0.5 s; the rest is slack for a loaded machine


def note(title: str, project: str = "demo") -> NewItem:
    return NewItem(project=project, kind="manual", title=title, text=f"text of {title}")


# -- the tailer, polled by hand -------------------------------------------------------------------------
class FakeHub:
    """Stands in for the ``Broadcaster``: records what would be sent."""

    def __init__(self, subscribers: int = 1) -> None:
        self.subscribers = subscribers
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.resyncs = 0

    def publish_threadsafe(self, event: str, data: Any) -> None:
        self.events.append((event, data))

    def resync_threadsafe(self) -> None:
        self.resyncs += 1

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        got, self.events = self.events, []
        return got


@pytest.fixture
def worker_store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "shared.db")
    yield s
    s.close()


@pytest.fixture
def other(worker_store: Store) -> Any:
    """Another connection to the same file: to SQLite, another writer."""
    s = Store(worker_store.path)
    yield s
    s.close()


@pytest.fixture
def hub() -> FakeHub:
    return FakeHub()


@pytest.fixture
def tailer(worker_store: Store, hub: FakeHub) -> Any:
    bridge = StoreEventBridge(worker_store, hub)
    worker_store.add_listener(bridge)
    t = ExternalWriteTailer(bridge)
    assert t.open()
    yield t
    t.stop()


def test_other_connections_adds_edits_and_deletes_get_their_event_types(
        worker_store: Store, other: Store, tailer: ExternalWriteTailer, hub: FakeHub) -> None:
    old = other.add_item(note("written by another connection")).id
    assert hub.take() == []  # the worker's own listeners never hear of it
    assert tailer.poll() == 1
    [(event, data)] = hub.take()
    assert event == "item_added" and data == item_event(worker_store.get_item(old))

    other.update_item(old, title="edited elsewhere")
    assert tailer.poll() == 1
    [(event, data)] = hub.take()
    assert event == "item_updated" and data["id"] == old and data["title"] == "edited elsewhere"
    assert set(data) == {"id", "kind", "type", "title", "display_title", "project", "created_at_epoch"}

    other.delete_items([old])
    assert tailer.poll() == 1
    assert hub.take() == [("item_deleted", {"id": old})]
    assert tailer.poll() == 0 and hub.take() == []


def test_items_older_than_the_tailer_are_updated_not_added(tmp_path: Path, hub: FakeHub) -> None:
    with Store(tmp_path / "s.db") as store, Store(tmp_path / "s.db") as other:
        before = other.add_item(note("there before the worker started")).id
        tailer = ExternalWriteTailer(StoreEventBridge(store, hub))
        assert tailer.open()
        assert tailer.poll() == 0  # what was there is not news
        other.update_item(before, title="edited later")
        other.delete_items([other.add_item(note("born and gone between two looks")).id])
        added = other.add_item(note("new one")).id
        other.update_item(added, title="new one, edited at once")
        tailer.poll()
        got = hub.take()
        assert [(e, d["id"]) for e, d in got] == [("item_updated", before), ("item_added", added)]
        assert got[1][1]["title"] == "new one, edited at once"  # several changes of one id: one event, as it is now
        tailer.stop()


def test_the_workers_own_writes_are_told_once(worker_store: Store, other: Store, tailer: ExternalWriteTailer,
                                               hub: FakeHub) -> None:
    own = worker_store.add_item(note("saved by the worker")).id  # the bridge tells at once
    assert [(e, d["id"]) for e, d in hub.take()] == [("item_added", own)]
    worker_store.update_item(own, title="edited by the worker")
    assert [(e, d["id"]) for e, d in hub.take()] == [("item_updated", own)]
    assert tailer.poll() == 0 and hub.take() == []  # the log has them, but they were told
    worker_store.delete_items([own])
    assert hub.take() == [("item_deleted", {"id": own})]
    assert tailer.poll() == 0 and hub.take() == []


def test_when_the_tailer_reads_an_own_write_first_the_bridge_stays_quiet(tmp_path: Path, hub: FakeHub) -> None:
    with Store(tmp_path / "s.db") as store:
        bridge = StoreEventBridge(store, hub)
        tailer = ExternalWriteTailer(bridge)
        assert tailer.open()
        item = store.add_item(note("committed, listeners not called yet")).id  # no listener registered
        assert tailer.poll() == 1
        assert [(e, d["id"]) for e, d in hub.take()] == [("item_added", item)]
        bridge("added", [item])  # the bridge's turn comes after the tailer's
        assert hub.take() == []
        tailer.stop()


def test_many_items_in_one_poll_end_every_stream_once(worker_store: Store, other: Store,
                                                      tailer: ExternalWriteTailer, hub: FakeHub) -> None:
    few = [r.id for r in other.add_items([note(f"small batch {n}") for n in range(20)])]
    assert tailer.poll() == 20
    assert [d["id"] for _, d in hub.take()] == few and hub.resyncs == 0
    other.add_items([note(f"import {n}") for n in range(MAX_ITEMS_PER_NOTIFY + 1)])
    assert tailer.poll() == -1
    assert hub.take() == [] and hub.resyncs == 1
    assert tailer.poll() == 0 and hub.resyncs == 1  # told once, then quiet


def test_a_huge_batch_is_not_read_row_by_row(worker_store: Store, other: Store, hub: FakeHub,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tailer = ExternalWriteTailer(StoreEventBridge(worker_store, hub), max_changes=100)
    assert tailer.open()
    reads: list[Any] = []
    real = ChangeLog.read_since

    def spy(self: ChangeLog, after: int, max_rows: int) -> Any:
        reads.append(batch := real(self, after, max_rows))
        return batch

    monkeypatch.setattr(ChangeLog, "read_since", spy)
    monkeypatch.setattr(worker_store, "get_items", lambda ids: pytest.fail("items were read"))
    other.add_items([note(f"bulk {n}") for n in range(150)])
    assert tailer.poll() == -1 and hub.resyncs == 1 and hub.events == []
    assert reads[-1].overflow and reads[-1].item_ids == [] and reads[-1].states == {}
    tailer.stop()


def test_an_idle_poll_reads_no_table(worker_store: Store, other: Store, tailer: ExternalWriteTailer, hub: FakeHub,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for name in ("read_since", "position"):
        real = getattr(ChangeLog, name)
        monkeypatch.setattr(ChangeLog, name, lambda self, *a, _n=name, _r=real: calls.append(_n) or _r(self, *a))
    monkeypatch.setattr(worker_store, "get_items", lambda ids: calls.append("get_items") or [])
    for _ in range(5):
        assert tailer.poll() == 0
    assert calls == []  # only PRAGMA data_version
    other.ensure_session("s-1", "demo")  # a commit that changes no item: the log is read, no item is
    assert tailer.poll() == 0
    assert calls == ["read_since"]
    assert tailer.poll() == 0 and calls == ["read_since"]


def test_with_nobody_listening_the_tailer_only_moves_on(worker_store: Store, other: Store,
                                                       tailer: ExternalWriteTailer, hub: FakeHub) -> None:
    hub.subscribers = 0
    unseen = other.add_item(note("nobody was watching")).id
    assert tailer.poll() == 0 and hub.events == []
    hub.subscribers = 1  # a page connects now: it loads its feed itself
    seen = other.add_item(note("someone is watching")).id
    assert tailer.poll() == 1
    assert [(e, d["id"]) for e, d in hub.take()] == [("item_added", seen)]
    other.update_item(unseen, title="older than the page")
    tailer.poll()
    assert [(e, d["id"]) for e, d in hub.take()] == [("item_updated", unseen)]


def test_own_writes_while_nobody_listened_are_not_told_when_a_page_connects_before_the_next_poll(
        worker_store: Store, other: Store, tailer: ExternalWriteTailer, hub: FakeHub) -> None:
    """The page that connects loads those items itself; telling them again as added re-drew their rows (and
    took the keyboard focus off a row the person was on)."""
    hub.subscribers = 0
    own = worker_store.add_item(note("saved while nobody watched")).id
    gone = worker_store.add_item(note("deleted while nobody watched")).id
    worker_store.delete_items([gone])
    hub.subscribers = 1  # a page connects before the tailer looked
    assert tailer.poll() == 0 and hub.take() == []
    other.update_item(own, title="edited by another process")  # later writes of others are told as usual
    tailer.poll()
    assert [(e, d["id"]) for e, d in hub.take()] == [("item_updated", own)]
    worker_store.update_item(own, title="edited by the worker")
    assert [(e, d["id"]) for e, d in hub.take()] == [("item_updated", own)]
    assert tailer.poll() == 0 and hub.take() == []


def test_an_in_memory_store_has_no_tailer(hub: FakeHub) -> None:
    with Store(":memory:") as store:
        tailer = ExternalWriteTailer(StoreEventBridge(store, hub))
        tailer.start()
        assert not tailer.open() and tailer.poll() == 0
        tailer.stop()


# -- the worker app and a second process ----------------------------------------------------------------
WRITER = r"""
import json, sys
from memcairn.core.models import NewItem
from memcairn.store import Store

store = Store(sys.argv[1])
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "add":
        out = [r.id for r in store.add_items([NewItem(project="elsewhere", kind="manual", title=t,
                                                      text="written by another process") for t in cmd["titles"]])]
    elif cmd["op"] == "edit":
        out = store.update_item(cmd["id"], title=cmd["title"]).id
    else:
        out = store.delete_items([cmd["id"]])
    print(json.dumps(out), flush=True)
"""


class Writer:
    """A second process holding its own ``Store`` on the worker's database, writing on command."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def _call(self, **cmd: Any) -> Any:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the writer process died"
        return json.loads(line)

    async def call(self, **cmd: Any) -> Any:
        return await asyncio.to_thread(self._call, **cmd)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


class Stream:
    """``GET /stream`` read at the ASGI level; ``events`` grows as they arrive, ``ended`` once the worker
    ends the stream."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.ended = asyncio.Event()
        self._changed = asyncio.Event()
        self._disconnect = asyncio.Event()
        self._buffer = b""
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Stream:
        async def receive() -> dict[str, Any]:
            await self._disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                assert message["status"] == 200
            elif message["type"] == "http.response.body":
                self._feed(message.get("body", b""))
                if not message.get("more_body", False):
                    self.ended.set()
                    self._changed.set()

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": "/stream", "raw_path": b"/stream",
                 "query_string": b"", "root_path": "", "headers": [(b"host", f"127.0.0.1:{PORT}".encode())],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", PORT), "state": {}}
        self._task = asyncio.create_task(self.app(scope, receive, send))
        await self.wait(lambda ev: bool(ev), "the stream's first event")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._disconnect.set()
        assert self._task is not None
        await asyncio.wait_for(self._task, timeout=5)

    def _feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            lines = dict(line.split(": ", 1) for line in block.decode().splitlines()
                         if ": " in line and not line.startswith(":"))
            if "event" in lines:
                self.events.append((lines["event"], json.loads(lines["data"])))
        self._changed.set()

    async def wait(self, until: Any, what: str, timeout: float = EVENT_DEADLINE_S) -> None:
        deadline = time.monotonic() + timeout
        while not until(self.events):
            left = deadline - time.monotonic()
            assert left > 0 and not self.ended.is_set(), f"no {what} within {timeout} s: {self.events}"
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=left)
            except TimeoutError:
                pass

    def named(self, event: str, item_id: int) -> list[dict[str, Any]]:
        return [d for e, d in self.events if e == event and d.get("id") == item_id]


@pytest.fixture
def cfg(monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    monkeypatch.setenv("MEMCAIRN_PORT", str(PORT))
    return load_settings()


def run_worker(cfg: Settings, scenario: Any) -> Any:
    """Run ``scenario(app, http, writer)`` inside the app's lifespan; afterwards no tailer thread is left."""
    app = make_app(None, cfg)

    async def main() -> Any:
        async with app.router.lifespan_context(app):
            while app.state.worker.phase != "ready":
                assert app.state.worker.phase == "starting", app.state.worker.detail
                await asyncio.sleep(0.01)
            writer = Writer(app.state.worker.runtime.store.path)
            try:
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
                    return await scenario(app, http, writer)
            finally:
                await asyncio.to_thread(writer.close)

    result = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert not [t for t in threading.enumerate() if t.name == "memcairn-stream-tail"]
    return result


def test_another_process_adds_edits_and_deletes_reach_the_stream(cfg: Settings) -> None:
    async def scenario(app: Any, http: httpx.AsyncClient, writer: Writer) -> None:
        assert app.state.worker.tailer is not None
        async with Stream(app) as stream:
            [item] = await writer.call(op="add", titles=["from another process"])
            await stream.wait(lambda _: stream.named("item_added", item), "item_added")
            [added] = stream.named("item_added", item)
            assert added["title"] == "from another process" and added["project"] == "elsewhere"
            assert added["kind"] == "manual"
            assert set(added) == {"id", "kind", "type", "title", "display_title", "project", "created_at_epoch"}

            await writer.call(op="edit", id=item, title="edited by another process")
            await stream.wait(lambda _: stream.named("item_updated", item), "item_updated")
            assert stream.named("item_updated", item)[0]["title"] == "edited by another process"

            await writer.call(op="delete", id=item)
            await stream.wait(lambda _: stream.named("item_deleted", item), "item_deleted")
            assert stream.named("item_deleted", item) == [{"id": item}]
            assert len(stream.named("item_added", item)) == 1 and len(stream.named("item_updated", item)) == 1

    run_worker(cfg, scenario)


def test_a_write_through_the_workers_api_appears_once(cfg: Settings) -> None:
    async def scenario(app: Any, http: httpx.AsyncClient, writer: Writer) -> None:
        async with Stream(app) as stream:
            saved = (await http.post("/api/memory/save", json={"text": "saved through the API", "title": "Own",
                                                               "project": "demo"})).json()["id"]
            await stream.wait(lambda _: stream.named("item_added", saved), "item_added for the API save")
            # an external write after it: once that is streamed, the tailer has read past the API's write
            [marker] = await writer.call(op="add", titles=["marker"])
            await stream.wait(lambda _: stream.named("item_added", marker), "item_added for the marker")
            assert (await http.delete(f"/api/memory/{saved}")).status_code == 200
            await stream.wait(lambda _: stream.named("item_deleted", saved), "item_deleted for the API delete")
            await writer.call(op="delete", id=marker)
            await stream.wait(lambda _: stream.named("item_deleted", marker), "item_deleted for the marker")
            assert len(stream.named("item_added", saved)) == 1
            assert len(stream.named("item_deleted", saved)) == 1
            assert [e for e, d in stream.events if d.get("id") == saved] == ["item_added", "item_deleted"]

    run_worker(cfg, scenario)


def test_a_large_batch_from_another_process_ends_the_stream_once(cfg: Settings) -> None:
    count = MAX_ITEMS_PER_NOTIFY * 3

    async def scenario(app: Any, http: httpx.AsyncClient, writer: Writer) -> None:
        async with Stream(app) as stream:
            ids = await writer.call(op="add", titles=[f"imported {n}" for n in range(count)])
            assert len(ids) == count
            await asyncio.wait_for(stream.ended.wait(), timeout=EVENT_DEADLINE_S)
            assert not [e for e, _ in stream.events if e in EVENT_NAMES.values()]  # no flood, a reload
        async with Stream(app) as again:  # the page reconnects and reloads; the stream goes on live
            [after] = await writer.call(op="add", titles=["after the import"])
            await again.wait(lambda _: again.named("item_added", after), "item_added after the import")
            assert not again.ended.is_set()

    run_worker(cfg, scenario)


# -- the viewer page in a real browser ------------------------------------------------------------------
@pytest.mark.slow
def test_viewer_shows_an_item_another_process_added(tmp_path: Path) -> None:
    """A real worker and the headless Chromium of ``test_viewer_browser.py``: a memory a second process
    writes straight into the database appears on the open page, and goes when that process deletes it."""
    pytest.importorskip("playwright")
    from playwright.sync_api import expect
    from viewer_browser import browser_page, running_worker, wait_until_loaded
    from viewer_browser import row as _row

    with running_worker(tmp_path) as client, browser_page(tmp_path, timezone_id="UTC") as page:
        page.goto(str(client.base_url.join("/")))
        wait_until_loaded(page)
        db = Settings(home=tmp_path / "worker-home").db_path
        writer = Writer(db)
        try:
            [item] = writer._call(op="add", titles=["Written by another process"])
            row = _row(page, "#feed", item)
            expect(row).to_be_visible(timeout=EVENT_DEADLINE_S * 1000)
            expect(row).to_contain_text("Written by another process")
            writer._call(op="delete", id=item)
            expect(row).to_have_count(0, timeout=EVENT_DEADLINE_S * 1000)
        finally:
            writer.close()
        assert page.errors == []  # type: ignore[attr-defined]
