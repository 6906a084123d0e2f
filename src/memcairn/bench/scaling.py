"""``memcairn bench scaling``: what one PostgreSQL node holds. Zipf-sized tenants on one bundled PostgreSQL,
under a load of writes and keyword searches; afterwards every acknowledged write is looked up.

The cluster is a bundled PostgreSQL (``pgstore/embedded.py``) with the team schema, fsync off as in the tests
(this measures the schema and the queries, not the disk). Tenants are sized by a Zipf law; ``clients`` threads
pick a tenant in proportion to its size and write a memory or run a keyword search through ``TeamStore`` (in
process: no HTTP, no embedding model). The load runs for ``phase_s`` seconds. Growing past one node is
PostgreSQL's own business (a standby, pgBouncer, then Citus by ``tenant_id``: docs/SCALING.md). Nothing here is
asserted in tests; the tables are the result.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

from memcairn.bench.synthetic import synthetic_items, synthetic_queries
from memcairn.bench.timing import percentile, render_table
from memcairn.core.models import NewItem
from memcairn.pgstore import db, keys
from memcairn.pgstore.embedded import EmbeddedPostgres
from memcairn.pgstore.items import TeamStore
from memcairn.search.request import SearchRequest
from memcairn.search.team import search_tenant

Log = Callable[[str], None]
DATABASE = "memcairn"
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}  # a throwaway cluster


def zipf_sizes(tenants: int, s: float, total: int, *, smallest: int = 5) -> list[int]:
    """Rows per tenant, largest first: the k-th tenant's share is proportional to 1 / k**s."""
    weights = [1 / (k ** s) for k in range(1, tenants + 1)]
    scale = total / sum(weights)
    return [max(smallest, round(w * scale)) for w in weights]


def _load1() -> float:
    return round(os.getloadavg()[0], 1)


@dataclass
class Tenant:
    id: int
    ordinal: int
    size: int
    projects: int
    items: Iterator[NewItem]
    project_ids: list[int] = field(default_factory=list)
    key_digest: str = ""  # the digest of its key: the application role enters a tenant through a key only


@dataclass
class Op:
    start: float
    latency_ms: float
    kind: str  # write | search
    tenant: int


class Load:
    """``clients`` threads writing and searching until ``stop``."""

    def __init__(self, store: TeamStore, tenants: list[Tenant], clients: int, write_share: float,
                 seed: int = 5) -> None:
        self.store = store
        self.tenants = tenants
        self.clients = clients
        self.write_share = write_share
        self.seed = seed
        self.ops: list[Op] = []
        self.acked: list[tuple[int, int]] = []  # (tenant, id) of every acknowledged write
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._queries = synthetic_queries(500, seed=seed)
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def next_item(self, tenant: Tenant) -> NewItem:
        with self._lock:
            return next(tenant.items)

    def write(self, tenant: Tenant) -> int:
        saved = self.store.add(tenant.id, self.next_item(tenant))
        with self._lock:
            self.acked.append((tenant.id, saved.id))
        return saved.id

    def _client(self, index: int) -> None:
        _hold_keys(self.tenants)
        rng = random.Random(self.seed * 1000 + index)
        weights = [t.size for t in self.tenants]
        while not self._stop.is_set():
            tenant = rng.choices(self.tenants, weights)[0]
            kind = "write" if rng.random() < self.write_share else "search"
            start = time.perf_counter()
            try:
                if kind == "write":
                    self.write(tenant)
                else:
                    search_tenant(self.store, tenant.id, SearchRequest(query=rng.choice(self._queries), limit=10,
                                                                       mode="keyword"))
            except Exception as exc:  # counted and shown, never hidden
                with self._lock:
                    self.errors.append(f"{kind} tenant {tenant.id}: {type(exc).__name__}: {exc}")
                continue
            with self._lock:
                self.ops.append(Op(start, (time.perf_counter() - start) * 1000, kind, tenant.id))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def _make_tenants(owner_dsn: str, sizes: list[int], secret: bytes) -> list[Tenant]:
    tenants = []
    with db.connect(owner_dsn) as conn:
        for ordinal, size in enumerate(sizes):
            name = f"tenant-{ordinal:02d}"
            made = keys.create_key(conn, secret, name, scopes=["memories:read", "memories:write"])
            row = conn.execute("SELECT id FROM tenants WHERE name = %s", (name,)).fetchone()
            assert row is not None
            projects = min(5, 1 + size // 500)
            tenants.append(Tenant(int(row[0]), ordinal, size, projects,
                                  iter(synthetic_items(10 ** 9, seed=100 + ordinal, projects=projects)),
                                  key_digest=keys.digest(secret, made["key"])))
    return tenants


def _hold_keys(tenants: list[Tenant]) -> None:
    """Hold every tenant's key in this thread's context (a thread starts with none), as requests would."""
    for tenant in tenants:
        db.hold_key(tenant.id, tenant.key_digest, alone=False)


def _preload(load: Load, tenants: list[Tenant], clients: int) -> tuple[float, float]:
    """Write every tenant's initial rows from ``clients`` threads: (seconds, rows/s)."""
    work = [t for t in tenants for _ in range(t.size)]
    random.Random(3).shuffle(work)
    todo = iter(work)
    lock = threading.Lock()

    def worker() -> None:
        _hold_keys(tenants)
        while True:
            with lock:
                tenant = next(todo, None)
            if tenant is None:
                return
            load.write(tenant)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    return seconds, len(work) / seconds


def _load_row(ops: list[Op], start: float, end: float, largest: int, errors: int) -> dict[str, Any]:
    seconds = max(end - start, 1e-9)

    def lat(kind: str, tenant: int | None = None) -> list[float]:
        return [op.latency_ms for op in ops if op.kind == kind and (tenant is None or op.tenant == tenant)]

    writes, searches = lat("write"), lat("search")
    return {"seconds": round(seconds, 1), "ops/s": round(len(ops) / seconds, 1),
            "writes/s": round(len(writes) / seconds, 1), "searches/s": round(len(searches) / seconds, 1),
            "write p50 ms": round(percentile(writes, 50), 1), "write p95 ms": round(percentile(writes, 95), 1),
            "search p50 ms": round(percentile(searches, 50), 1), "search p95 ms": round(percentile(searches, 95), 1),
            "largest tenant's search p95 ms": round(percentile(lat("search", largest), 95), 1), "errors": errors,
            "load1": _load1()}


def _integrity(owner_dsn: str, load: Load) -> dict[str, Any]:
    """Every acknowledged write looked up."""
    with db.connect(owner_dsn) as conn:
        rows = conn.execute("SELECT tenant_id, id FROM items").fetchall()
        stored = {int(item_id): int(tenant_id) for tenant_id, item_id in rows}
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    acked = Counter(item_id for _, item_id in load.acked)
    return {"acknowledged writes": len(load.acked), "acknowledged twice": sum(n - 1 for n in acked.values()),
            "rows": len(stored), "lost": sum(1 for item_id in acked if item_id not in stored),
            "under another tenant": sum(1 for tenant, item_id in load.acked if stored.get(item_id, tenant) != tenant),
            "database MB": round(int(size[0]) / 2 ** 20, 1) if size else None}


def run(*, tenants: int = 50, zipf_s: float = 1.1, items: int = 20_000, clients: int = 12, phase_s: float = 20.0,
        write_share: float = 0.3, log: Log = lambda _m: None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="memcairn-scaling-"))
    root.chmod(0o755)  # the unprivileged user PostgreSQL runs as (when we are root) must reach the cluster
    secret = secrets.token_bytes(32)
    server = EmbeddedPostgres(root / "cluster", password=secrets.token_hex(12), config=FAST)
    pool: db.Pool | None = None
    try:
        dsn = server.start()
        with db.connect(dsn) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        owner = make_conninfo(dsn, dbname=DATABASE)
        db.prepare(owner, secret)
        pool = db.Pool(db.app_conninfo(owner, secret), size=clients + 4)
        store = TeamStore(pool)
        sizes = zipf_sizes(tenants, zipf_s, items)
        people = _make_tenants(owner, sizes, secret)
        load = Load(store, people, clients, write_share)
        log(f"preloading {sum(sizes)} memories over {tenants} tenants (largest {sizes[0]}, smallest {sizes[-1]})")
        preload_s, preload_rate = _preload(load, people, clients)
        log(f"load: {clients} clients, {int(write_share * 100)}% writes, {phase_s:.0f} s")
        errors_before = len(load.errors)
        load.start()
        start = time.perf_counter()
        time.sleep(phase_s)
        load.stop()
        end = time.perf_counter()
        ops = [op for op in load.ops if start <= op.start < end]
        return {"setup": {"tenants": tenants, "zipf_s": zipf_s, "items": sum(sizes), "largest": sizes[0],
                          "smallest": sizes[-1], "clients": clients, "write_share": write_share, "phase_s": phase_s,
                          "cores": os.cpu_count(), "preload_s": round(preload_s, 1),
                          "preload_rows_per_s": round(preload_rate, 1), "errors": load.errors[:5]},
                "load": _load_row(ops, start, end, people[0].id, len(load.errors) - errors_before),
                "integrity": _integrity(owner, load)}
    finally:
        if pool is not None:
            pool.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def render(result: dict[str, Any]) -> str:
    setup = result["setup"]
    parts = [f"one embedded PostgreSQL, {setup['tenants']} tenants (Zipf s={setup['zipf_s']}: {setup['items']} rows,"
             f" largest {setup['largest']}, smallest {setup['smallest']}), {setup['clients']} client threads,"
             f" {int(setup['write_share'] * 100)}% writes / keyword searches, {setup['cores']} cores;"
             f" preload {setup['preload_rows_per_s']} rows/s",
             "", render_table([result["load"]]), "", render_table([result["integrity"]])]
    if setup["errors"]:
        parts += ["", "errors (first 5): " + "; ".join(setup["errors"])]
    return "\n".join(parts)
