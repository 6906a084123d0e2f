"""Fair embedding on a real PostgreSQL 18 + pgvector: while one tenant's upload waits in the backlog, another
tenant's new memory is embedded in the next batch (round robin over tenants, oldest first within each), the
backlog is reported per tenant, and several workers of the leader take disjoint batches, each item once."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from pg_server_process import running_server
from postgres_server import search, tenant

from memcairn.core.models import NewItem
from memcairn.pgstore import backlog, db
from memcairn.pgstore.items import TeamStore
from memcairn.server.embedding import EmbeddingTask

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class Recording:
    """The real model, recording each call's documents (thread-safe: several workers may share the record)."""

    def __init__(self, model, record: list[list[str]], lock: threading.Lock) -> None:
        self.model, self.record, self.lock = model, record, lock

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        with self.lock:
            self.record.append(list(texts))
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.model.embed_query(text)


def upload(team: TeamStore, tenant_id: int, count: int, project: str = "import") -> list[int]:
    return [team.add(tenant_id, NewItem(project=project, kind="observation", title=f"imported change {n}",
                                        text=f"bulk upload entry number {n} of tenant {tenant_id}")).id
            for n in range(count)]


def pending(pool: db.Pool) -> dict[int, int]:
    with pool.connection() as conn:
        return {t: lag.pending for t, lag in backlog.lag_by_tenant(conn).items()}


def test_a_quiet_tenants_item_is_in_the_next_batch_however_long_another_tenants_upload(
        pg_database: str, pool: db.Pool, embedder) -> None:
    busy, quiet, third = tenant(pg_database, "busy"), tenant(pg_database, "quiet"), tenant(pg_database, "third")
    writer = TeamStore(pool, None)
    uploaded = upload(writer, busy, 120)
    mine = writer.add(quiet, NewItem(project="api", kind="manual", title="Rotate the signing key every 90 days")).id
    later = [writer.add(third, NewItem(project="web", kind="manual", title=f"third's note {n}")).id for n in range(2)]
    assert pending(pool) == {busy: 120, quiet: 1, third: 2}
    with pool.connection() as conn:
        # round robin: each tenant's oldest, then each tenant's next; the busy tenant fills the rest in order
        assert backlog.pick(conn, 6) == [(uploaded[0], busy), (mine, quiet), (later[0], third),
                                         (uploaded[1], busy), (later[1], third), (uploaded[2], busy)]
        assert backlog.pick(conn, 3, busy=[uploaded[0], mine]) == [(uploaded[1], busy), (later[0], third),
                                                                   (uploaded[2], busy)]
    record: list[list[str]] = []
    assert backlog.embed_batch(pool, Recording(embedder, record, threading.Lock()), limit=16) == 16
    assert "Rotate the signing key every 90 days" in record[0]  # in the first batch, not after 120 others
    assert pending(pool) == {busy: 120 - 13}
    with pool.connection() as conn:
        summary = backlog.tenant_lag_summary(backlog.lag_by_tenant(conn))
    assert summary["tenants_waiting"] == 1 and summary["largest_tenant_pending"] == 107
    assert summary["oldest_tenant_wait_seconds"] > 0
    hits = search(TeamStore(pool, embedder), quiet, "how often is the signing key rotated", ["api"], mode="semantic")
    assert [h["id"] for h in hits] == [mine]


def test_the_running_task_makes_a_quiet_tenants_memory_searchable_before_the_upload_is_embedded(
        pg_database: str, pool: db.Pool, embedder) -> None:
    busy, quiet = tenant(pg_database, "busy"), tenant(pg_database, "quiet")
    team = TeamStore(pool, embedder)
    upload(team, busy, 400)
    task = EmbeddingTask(team, embedder, batch=16, nice=0)
    task.start()
    try:
        while pending(pool).get(busy, 0) > 360:  # the upload is being embedded
            time.sleep(0.02)
        written = time.perf_counter()
        mine = team.add(quiet, NewItem(project="api", kind="manual", title="Deploys freeze on Friday afternoons",
                                       text="No production deploys after 14:00 on Fridays")).id
        while not search(team, quiet, "when are we not allowed to ship to production", ["api"], mode="semantic"):
            assert time.perf_counter() - written < 60, "the quiet tenant's memory was never embedded"
            time.sleep(0.02)
        searchable_s = time.perf_counter() - written
        left = pending(pool).get(busy, 0)
    finally:
        task.stop()
    hits = search(team, quiet, "when are we not allowed to ship to production", ["api"], mode="semantic")
    assert [h["id"] for h in hits] == [mine]
    # FIFO would have embedded the 360-odd items queued before it first; fair, it waited for a batch or two
    assert left > 200, f"searchable after {searchable_s:.2f} s with {left} of the upload still waiting"


def test_several_workers_take_disjoint_batches_and_embed_every_item_once(pg_database: str, pool: db.Pool,
                                                                          embedder) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    team = TeamStore(pool, embedder)
    ids = upload(team, acme, 150) + upload(team, other, 50)
    record: list[list[str]] = []
    lock = threading.Lock()
    models = iter([Recording(embedder, record, lock)])
    task = EmbeddingTask(team, Recording(embedder, record, lock), batch=8, nice=0, workers=2,
                         make_embedder=lambda: next(models))
    task.start()
    try:
        for _ in range(1200):  # a wait, not a timed assertion
            if not pending(pool):
                break
            time.sleep(0.05)
    finally:
        task.stop()
    documents = [doc for call in record for doc in call]
    assert len(documents) == len(set(documents)) == 200  # each item embedded once: no two workers took it
    assert task.embedded == 200
    with db.connect(pg_database, autocommit=True) as conn:
        embedded = {int(i) for (i,) in conn.execute("SELECT DISTINCT item_id FROM item_vectors")}
    assert embedded == set(ids)
    with pytest.raises(ValueError, match="make_embedder"):
        EmbeddingTask(team, embedder, workers=2)


def test_a_real_server_embeds_a_quiet_tenants_memory_while_another_tenants_upload_waits(
        tmp_path: Path, pg_database: str) -> None:
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        busy, quiet = server.make_key("busy"), server.make_key("quiet")
        events = [{"project": "import", "kind": "observation", "title": f"imported change {n}",
                   "text": f"bulk upload entry number {n} of the migration"} for n in range(1500)]
        for n in range(0, len(events), 100):
            posted = httpx.post(f"{server.url}/v1/events", json={"events": events[n:n + 100]}, timeout=60,
                                headers={"Authorization": f"Bearer {busy}", "Idempotency-Key": f"upload-{n}"})
            assert posted.status_code == 202, posted.text
        while (health := httpx.get(f"{server.url}/v1/health", timeout=30).json())["ingest"]["pending"]:
            time.sleep(0.05)  # the consumers store the upload; the embedding task runs behind them
        assert health["embedding"]["tenants_waiting"] == 1 and health["embedding"]["pending"] > 300
        saved = httpx.post(f"{server.url}/v1/memories", headers={"Authorization": f"Bearer {quiet}"}, timeout=30,
                           json={"project": "api", "title": "Deploys freeze on Friday afternoons",
                                 "text": "No production deploys after 14:00 on Fridays"})
        assert saved.status_code == 201, saved.text
        written = time.perf_counter()
        query = {"query": "when are we not allowed to ship to production", "project": "api", "mode": "semantic"}
        while not httpx.get(f"{server.url}/v1/search", params=query, timeout=30,
                            headers={"Authorization": f"Bearer {quiet}"}).json()["results"]:
            assert time.perf_counter() - written < 60, "the quiet tenant's memory was never embedded"
            time.sleep(0.05)
        searchable_s = time.perf_counter() - written
        left = httpx.get(f"{server.url}/v1/health", timeout=30).json()["embedding"]
    # FIFO would have embedded what the busy tenant queued first; fair, the next batch took it
    assert left["pending"] > 100 and left["tenants_waiting"] == 1, (searchable_s, left)
    assert left["largest_tenant_pending"] == left["pending"]
