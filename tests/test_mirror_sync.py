from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from memcairn.core.errors import VectorIndexUnavailableError
from memcairn.core.models import NewItem
from memcairn.mirror.documents import documents_for, parse_doc_id
from memcairn.mirror.sync import MirrorSync
from memcairn.store import Store
from memcairn.vectors.base import VectorRecord
from memcairn.vectors.factory import open_index
from memcairn.vectors.fake import HashEmbedder
from memcairn.vectors.memory import InMemoryIndex


class CountingEmbedder:
    """Wraps an embedder and counts the texts it embeds."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.embedded = 0

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


class FlakyIndex:
    """A real index whose upserts fail on chosen call numbers (1-based)."""

    def __init__(self, inner, fail_on: set[int], error: type[Exception] = RuntimeError) -> None:  # noqa: ANN001
        self.inner = inner
        self.fail_on = fail_on
        self.error = error
        self.calls = 0
        self.name = inner.name
        self.dimension = inner.dimension

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        self.calls += 1
        if self.calls in self.fail_on:
            raise self.error(f"injected failure on upsert {self.calls}")
        self.inner.upsert(records)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)


def _items(n: int, project: str = "alpha", facts: int = 2) -> list[NewItem]:
    return [NewItem(project=project, kind="observation", type="discovery", title=f"note {i}",
                    narrative=f"narrative number {i} about topic {i % 7}",
                    facts=[f"fact {j} of {i}" for j in range(facts)]) for i in range(n)]


def _doc_ids(index) -> list[str]:  # noqa: ANN001
    vec = [1.0] + [0.0] * (index.dimension - 1)
    return [m.id for m in index.query(vec, projects=None, limit=4096)]


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder(HashEmbedder())


def test_documents_per_field_with_ids_that_name_the_row(store: Store) -> None:
    r = store.add_item(_items(1)[0])
    s = store.add_item(NewItem(project="alpha", kind="summary", title="t", learned="L", next_steps="N"))
    p = store.add_item(NewItem(project="alpha", kind="prompt", text="please fix the bug", session="s1"))
    docs = documents_for(store.get_item(r.id)) + documents_for(store.get_item(s.id)) + documents_for(
        store.get_item(p.id))
    ids = [d.id for d in docs]
    assert ids == [f"obs_{r.id}_narrative", f"obs_{r.id}_fact_0", f"obs_{r.id}_fact_1",
                   f"summary_{s.id}_learned", f"summary_{s.id}_next_steps", f"prompt_{p.id}"]
    assert all(d.metadata["sqlite_id"] in {r.id, s.id, p.id} and d.metadata["project"] == "alpha" for d in docs)
    assert parse_doc_id(f"obs_{r.id}_fact_1") == ("observation", r.id)
    assert parse_doc_id("summary_7_learned_c2") == ("summary", 7)
    assert parse_doc_id("something_else") is None


def test_sync_mirrors_new_items_and_advances_the_watermark(store: Store, embedder: CountingEmbedder) -> None:
    ids = [r.id for r in store.add_items(_items(30))]
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t", batch_docs=10)
    result = mirror.sync_pending()
    assert result.failed_batches == 0 and result.items == 30 and result.documents == 90
    assert mirror.status()["rows"] == [{"project": "alpha", "kind": "observation", "watermark": ids[-1],
                                        "max_id": ids[-1], "lag": 0}]
    assert mirror.sync_pending().documents == 0  # nothing new: nothing embedded


def test_a_failing_batch_leaves_the_watermark_before_the_gap_and_a_second_run_closes_it(
        store: Store, embedder: CountingEmbedder) -> None:
    ids = [r.id for r in store.add_items(_items(40))]
    index = FlakyIndex(InMemoryIndex(embedder.dimension), fail_on={3})
    mirror = MirrorSync(store, index, embedder, index_key="t", batch_docs=15)  # 5 items per batch
    first = mirror.backfill()
    assert first.failed_batches == 1
    row = mirror.status()["rows"][0]
    assert row["watermark"] == ids[9]  # batches 1-2 landed; batch 3 failed; later batches did not move it
    assert row["lag"] == 30
    second = mirror.backfill()
    assert second.failed_batches == 0
    docs = _doc_ids(index.inner)
    assert len(docs) == len(set(docs)) == 120
    assert mirror.status()["rows"][0]["lag"] == 0


def test_a_missing_watermark_is_bootstrapped_from_the_index_without_re_embedding(
        store: Store, embedder: CountingEmbedder) -> None:
    store.add_items(_items(20))
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    mirror.backfill()
    before = embedder.embedded
    store.clear_watermarks("t")
    fresh = MirrorSync(store, mirror.index, embedder, index_key="t")
    result = fresh.backfill()
    assert embedder.embedded == before and result.documents == 0
    assert fresh.status()["rows"][0]["lag"] == 0


def test_a_watermark_above_what_the_index_holds_is_lowered(store: Store, embedder: CountingEmbedder) -> None:
    store.add_items(_items(10))
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    mirror.backfill()
    mirror.index.reset()  # the index lost everything behind our back
    fresh = MirrorSync(store, mirror.index, embedder, index_key="t")
    fresh.backfill()
    assert len(_doc_ids(fresh.index)) == 30


def test_edits_and_deletes_propagate(store: Store, embedder: CountingEmbedder) -> None:
    a, b = (r.id for r in store.add_items(_items(2, facts=3)))
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    mirror.sync_pending()
    store.update_item(a, facts=["only one fact now"], narrative="rewritten narrative")
    store.delete_items([b])
    mirror.sync_pending()
    docs = sorted(_doc_ids(mirror.index))
    assert docs == sorted([f"obs_{a}_narrative", f"obs_{a}_fact_0"])
    hit = mirror.query("rewritten narrative", projects=["alpha"], limit=5)[0]
    assert hit.item_id == a and hit.kind == "observation"
    assert store.outbox_size() == 0


def test_query_maps_documents_to_items_once_each_at_their_best_rank(store: Store, embedder: CountingEmbedder) -> None:
    store.add_items(_items(5, facts=4))
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    mirror.sync_pending()
    hits = mirror.query("narrative number 3 about topic 3", projects=["alpha"], limit=10)
    assert len({h.item_id for h in hits}) == len(hits) == 5
    assert hits[0].item_id == store.list_items(order="oldest")[3].id
    assert [h.distance for h in hits] == sorted(h.distance for h in hits)


def test_merged_projects_are_queried_through_their_new_name(store: Store, embedder: CountingEmbedder) -> None:
    store.add_items(_items(2, project="old-name"))
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    mirror.sync_pending()
    store.merge_project("old-name", "new-name")
    assert {h.item_id for h in mirror.query("narrative", projects=["new-name"])} == {
        i.id for i in store.list_items()}
    assert mirror.query("narrative", projects=["unknown"]) == []


def test_an_unreachable_index_degrades_without_failing_writes_and_catches_up(
        store: Store, embedder: CountingEmbedder) -> None:
    index = FlakyIndex(InMemoryIndex(embedder.dimension), fail_on={1, 2}, error=VectorIndexUnavailableError)
    mirror = MirrorSync(store, index, embedder, index_key="t")
    store.add_items(_items(5))
    assert mirror.sync_pending().failed_batches == 1
    assert mirror.status()["state"] == "degraded"
    store.add_items(_items(3, project="beta"))  # SQLite writes go on regardless
    assert mirror.backfill().failed_batches >= 1
    result = mirror.backfill()
    assert result.failed_batches == 0 and mirror.status()["state"] == "ok"
    assert all(r["lag"] == 0 for r in mirror.status()["rows"])


def test_backfill_runs_once_at_a_time_and_at_most_three_projects_at_once(
        store: Store, embedder: CountingEmbedder) -> None:
    for p in range(6):
        store.add_items(_items(4, project=f"p{p}"))
    active: set[str] = set()
    peak = 0
    lock = threading.Lock()
    gate = threading.Event()

    class SlowIndex(InMemoryIndex):
        def upsert(self, records):  # noqa: ANN001, ANN202
            nonlocal peak
            project = records[0].project
            with lock:
                active.add(project)
                peak = max(peak, len(active))
            gate.wait(0.05)
            super().upsert(records)
            with lock:
                active.discard(project)

    mirror = MirrorSync(store, SlowIndex(embedder.dimension), embedder, index_key="t", batch_docs=3)
    results = []
    runner = threading.Thread(target=lambda: results.append(mirror.backfill()))
    runner.start()
    while not active and runner.is_alive():
        gate.wait(0.005)
    assert mirror.backfill().skipped  # re-entrancy guard
    runner.join(timeout=60)
    assert results[0].failed_batches == 0 and 1 < peak <= 3


@pytest.fixture(scope="module")
def real_embedder():  # noqa: ANN201
    from memcairn.vectors.embedder import load_embedder

    return load_embedder("all-MiniLM-L6-v2-int8")


@pytest.mark.parametrize("backend", ["sqlite-vec", "chroma"])
def test_switching_backend_and_rebuilding_gives_the_same_results(
        tmp_path: Path, store: Store, real_embedder, backend: str) -> None:  # noqa: ANN001
    from memcairn.bench.synthetic import synthetic_items, synthetic_queries

    store.add_items(list(synthetic_items(20, projects=1)))
    reference = MirrorSync(store, InMemoryIndex(real_embedder.dimension), real_embedder, index_key="memory")
    reference.rebuild()
    index = open_index(backend, home=tmp_path / backend, dimension=real_embedder.dimension)
    try:
        mirror = MirrorSync(store, index, real_embedder, index_key=backend)
        mirror.rebuild()
        for q in synthetic_queries(5):
            want = [h.item_id for h in reference.query(q, projects=["project-00"], limit=5)]
            got = [h.item_id for h in mirror.query(q, projects=["project-00"], limit=5)]
            assert got == want
    finally:
        index.close()


@pytest.mark.slow
def test_a_chroma_server_killed_mid_backfill_then_restarted_converges(
        tmp_path: Path, store: Store, embedder: CountingEmbedder) -> None:
    from chroma_server import chroma_server

    from memcairn.vectors.chroma import ChromaIndex

    for p in range(3):
        store.add_items(_items(30, project=f"p{p}"))
    with chroma_server(tmp_path / "chroma-data") as server:
        index = ChromaIndex(embedder.dimension, url=server.url)
        mirror = MirrorSync(store, index, embedder, index_key="chroma:server", batch_docs=30)
        written = 0

        def kill_after_first_batches(_project: str, n: int) -> None:
            nonlocal written
            written += n
            if written >= 60 and server.pid is not None:
                server.kill()

        first = mirror.backfill(kill_after_first_batches)
        assert first.failed_batches >= 1 and mirror.status()["state"] == "degraded"
        assert any(r["lag"] > 0 for r in mirror.status()["rows"])
        store.add_items(_items(5, project="p-late"))  # writes go on while the server is down
        server.start()
        second = mirror.backfill()
        assert second.failed_batches == 0, second.sample_errors
        status = mirror.status()
        assert status["state"] == "ok" and all(r["lag"] == 0 for r in status["rows"])
        assert index.count() == 3 * 30 * 3 + 5 * 3
        index.close()


def test_the_runner_mirrors_writes_off_the_request_path(store: Store, embedder: CountingEmbedder) -> None:
    from memcairn.mirror.background import MirrorRunner

    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    runner = MirrorRunner(mirror, retry_seconds=0.05)
    store.add_listener(runner.nudge)
    runner.start()
    try:
        assert runner.wait_idle(30)
        store.add_items(_items(3))
        deadline = 100
        while mirror.status()["rows"][0]["lag"] and deadline:
            runner.wait_idle(0.1)
            deadline -= 1
        assert mirror.status()["rows"][0]["lag"] == 0
    finally:
        runner.stop()


def test_idle_looks_pass_only_after_a_commit(store: Store, embedder: CountingEmbedder) -> None:
    from memcairn.mirror.background import MirrorRunner

    if store.path is None:
        pytest.skip("needs a database file another connection can write")
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    passes: list[int] = []
    original = mirror.sync_pending

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        passes.append(1)
        return original(*args, **kwargs)

    mirror.sync_pending = counted  # type: ignore[method-assign]
    runner = MirrorRunner(mirror, idle_seconds=0.02)
    runner.start()
    try:
        assert runner.wait_idle(30)
        time.sleep(0.3)  # ~15 idle looks: the first pass after the backfill, then nothing committed
        assert len(passes) <= 1
        other = Store(store.path)  # a writer that does not nudge this runner (another process, say)
        try:
            other.add_items(_items(2, project="beta"))
        finally:
            other.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and mirror.status()["rows"][-1]["lag"]:
            time.sleep(0.02)
        assert {r["project"]: r["lag"] for r in mirror.status()["rows"]}["beta"] == 0
        assert len(passes) >= 1
    finally:
        runner.stop()


def _wait(condition, seconds: float = 60.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_chroma_server_down_when_the_worker_starts_is_caught_up_once_it_answers(
        tmp_path: Path, store: Store, embedder: CountingEmbedder) -> None:
    from chroma_server import ChromaServer

    from memcairn.mirror.background import MirrorRunner
    from memcairn.vectors.chroma import ChromaIndex

    store.add_items(_items(4))
    server = ChromaServer(tmp_path / "chroma-data")  # not started: the server is down
    index = ChromaIndex(embedder.dimension, url=server.url)  # the worker opens its mirror anyway
    mirror = MirrorSync(store, index, embedder, index_key="chroma:server")
    runner = MirrorRunner(mirror, retry_seconds=0.1)
    runner.start()
    try:
        assert runner.wait_idle(30)
        assert mirror.status()["state"] == "degraded" and "is a Chroma server running" in mirror.last_error
        assert mirror.status()["rows"][0]["lag"] == 4  # the watermark never ran ahead of the mirror
        server.start()
        assert _wait(lambda: mirror.available and mirror.status()["rows"][0]["lag"] == 0)
        assert {h.item_id for h in mirror.query("narrative number 2", limit=4)} <= {1, 2, 3, 4}
        assert index.count() == 4 * 3
    finally:
        runner.stop()
        index.close()
        server.stop()


def test_a_chroma_server_that_comes_back_empty_is_refilled(
        tmp_path: Path, store: Store, embedder: CountingEmbedder) -> None:
    import shutil

    from chroma_server import chroma_server

    from memcairn.vectors.chroma import ChromaIndex

    store.add_items(_items(4))
    with chroma_server(tmp_path / "chroma-data") as server:
        index = ChromaIndex(embedder.dimension, url=server.url)
        try:
            mirror = MirrorSync(store, index, embedder, index_key="chroma:server")
            assert mirror.sync_pending().failed_batches == 0 and index.count() == 12
            server.kill()
            store.add_items(_items(1, project="beta"))
            assert mirror.sync_pending().failed_batches == 1 and not mirror.available
            shutil.rmtree(server.path)  # a container restarted without its volume
            server.start()
            assert mirror.sync_pending().failed_batches == 0 and mirror.available
            assert index.count() == 5 * 3  # the earlier items too, not only the one written meanwhile
        finally:
            index.close()


class PoisonEmbedder(CountingEmbedder):
    """Refuses any text naming the poison (a model that fails on one input, again and again)."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if any("poison" in t for t in texts):
            raise RuntimeError("the model failed on this text")
        return super().embed_documents(texts)


def test_an_edit_that_cannot_be_embedded_stays_queued_without_stopping_the_rest(store: Store) -> None:
    """An edit replayed from the outbox that fails is retried next pass, like a failed batch; it must not end the
    pass with an exception that keeps every later write (here another project's) out of the mirror."""
    embedder = PoisonEmbedder(HashEmbedder())
    a, b = (r.id for r in store.add_items(_items(2)))
    mirror = MirrorSync(store, InMemoryIndex(embedder.dimension), embedder, index_key="t")
    mirror.sync_pending()
    store.update_item(a, narrative="poison narrative")
    store.update_item(b, narrative="a fine new narrative")
    store.add_items(_items(2, project="beta"))
    result = mirror.sync_pending()
    assert result.failed_batches == 1 and f"item {a}" in result.sample_errors[0]
    assert {r["project"]: r["lag"] for r in mirror.status()["rows"]} == {"alpha": 0, "beta": 0}
    assert f"obs_{b}_narrative" in _doc_ids(mirror.index) and store.outbox_size() == 1  # a's edit waits
    store.update_item(a, narrative="an antidote narrative")
    assert mirror.sync_pending().failed_batches == 0 and store.outbox_size() == 0
    hit = mirror.query("an antidote narrative", projects=["alpha"], limit=1)[0]
    assert hit.item_id == a
