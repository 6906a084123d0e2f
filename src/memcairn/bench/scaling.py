"""``memcairn bench scaling``: several embedded PostgreSQL clusters behind the tenant router, Zipf-sized
tenants under a load of writes and keyword searches, the largest tenant moved to another cluster under that
load, and (optionally) read-your-writes against a streaming replica.

Each cluster is a bundled PostgreSQL (``pgstore/embedded.py``; pg0 runs it with fsync off) with the team schema
and its own residue of ids (``identities.interleave``). Tenants are placed by rendezvous hashing and sized by
a Zipf law; ``clients`` threads pick a tenant in proportion to its size and write a memory or run a keyword
search, through ``TenantRouter.writing``/``reading`` and ``TeamStore`` (in process: no HTTP, no embedding
model). The load runs for ``phase_s`` seconds, then while ``tenant_move.move_tenant`` moves the largest tenant
to the least loaded other cluster, then ``phase_s`` seconds more. Afterwards every acknowledged write is looked
up on every cluster: found once, on its tenant's cluster, or counted lost or duplicated.

The replica part copies the first cluster with ``pg_basebackup`` into a hot standby and, with the load still
running, writes to a tenant of that cluster and reads the write back from the standby: straight away (how often
it is missing), or after waiting for the standby to replay the write's WAL position (how long that takes, and
that no read then misses it). Nothing here is asserted in tests; the tables are the result.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

from memcairn.bench.synthetic import synthetic_items, synthetic_queries
from memcairn.bench.timing import percentile, render_table
from memcairn.models import NewItem
from memcairn.pgstore import db
from memcairn.pgstore.embedded import EmbeddedPostgres
from memcairn.pgstore.identities import interleave
from memcairn.pgstore.items import TeamStore
from memcairn.pgstore.replica import Replica, start_replica, wait_replayed, wal_position
from memcairn.pgstore.router import TenantRouter, rendezvous
from memcairn.pgstore.search import search_tenant
from memcairn.pgstore.tenant_move import MoveReport, move_tenant, tenant_fingerprint
from memcairn.search.request import SearchRequest

Log = Callable[[str], None]
DATABASE = "memcairn"
RYW_BUDGET_S = 0.1  # how long a read waits for the standby before it goes to the primary


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


@dataclass
class Op:
    start: float
    latency_ms: float
    kind: str  # write | search
    tenant: int


@dataclass
class Cluster:
    name: str
    server: EmbeddedPostgres
    port: int
    owner_dsn: str
    pool: db.Pool


class Load:
    """``clients`` threads writing and searching through the router until ``stop``."""

    def __init__(self, router: TenantRouter[TeamStore], tenants: list[Tenant], clients: int, write_share: float,
                 seed: int = 5) -> None:
        self.router = router
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
        item = self.next_item(tenant)
        with self.router.writing(tenant.id) as store:
            saved = store.add(tenant.id, item)
        with self._lock:
            self.acked.append((tenant.id, saved.id))
        return saved.id

    def _client(self, index: int) -> None:
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
                    with self.router.reading(tenant.id) as store:
                        search_tenant(store, tenant.id, SearchRequest(query=rng.choice(self._queries), limit=10,
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


def _start_clusters(root: Path, count: int, clients: int, secret: bytes, log: Log) -> list[Cluster]:
    password = secrets.token_hex(12)
    clusters = []
    for index in range(count):
        server = EmbeddedPostgres(root / f"cluster-{index}", password=password)
        dsn = server.start()
        port = int(str(server.info().get("port") or dsn.rsplit(":", 1)[1].split("/")[0]))
        with db.connect(dsn) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        owner = make_conninfo(dsn, dbname=DATABASE)
        db.prepare(owner, secret)
        with db.connect(owner) as conn:
            interleave(conn, index, count)
        pool = db.Pool(db.app_conninfo(owner, secret), size=clients + 4)
        clusters.append(Cluster(f"pg{index}", server, port, owner, pool))
        log(f"cluster pg{index} on port {port}")
    return clusters


def _make_tenants(clusters: list[Cluster], router: TenantRouter[TeamStore], sizes: list[int]) -> list[Tenant]:
    names = [c.name for c in clusters]
    by_name = {c.name: c for c in clusters}
    tenants = []
    for ordinal, size in enumerate(sizes):
        home = by_name[rendezvous(ordinal, names)]
        with db.connect(home.owner_dsn) as conn:
            row = conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING id", (f"tenant-{ordinal:02d}",)
                               ).fetchone()
        assert row is not None
        router.assign(int(row[0]), home.name)
        projects = min(5, 1 + size // 500)
        tenants.append(Tenant(int(row[0]), ordinal, size, projects,
                              iter(synthetic_items(10 ** 9, seed=100 + ordinal, projects=projects))))
    return tenants


def _preload(load: Load, tenants: list[Tenant], clients: int) -> tuple[float, float]:
    """Write every tenant's initial rows through the router from ``clients`` threads: (seconds, rows/s)."""
    work = [t for t in tenants for _ in range(t.size)]
    random.Random(3).shuffle(work)
    todo = iter(work)
    lock = threading.Lock()

    def worker() -> None:
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


def _phase_row(name: str, ops: list[Op], start: float, end: float, moved: int, errors: int) -> dict[str, Any]:
    inside = [op for op in ops if start <= op.start < end]
    seconds = max(end - start, 1e-9)

    def lat(kind: str, tenant: int | None = None, *, besides: int | None = None) -> list[float]:
        return [op.latency_ms for op in inside if op.kind == kind and (tenant is None or op.tenant == tenant)
                and op.tenant != besides]

    writes, searches, moved_writes = lat("write"), lat("search"), lat("write", moved)
    others = lat("write", besides=moved)
    return {"phase": name, "seconds": round(seconds, 1), "ops/s": round(len(inside) / seconds, 1),
            "writes/s": round(len(writes) / seconds, 1), "searches/s": round(len(searches) / seconds, 1),
            "write p50 ms": round(percentile(writes, 50), 1), "write p95 ms": round(percentile(writes, 95), 1),
            "search p50 ms": round(percentile(searches, 50), 1), "search p95 ms": round(percentile(searches, 95), 1),
            "other tenants' write p95 ms": round(percentile(others, 95), 1), "moved tenant writes": len(moved_writes),
            "its write p95 ms": round(percentile(moved_writes, 95), 1),
            "its write max ms": round(max(moved_writes, default=float("nan")), 1), "errors": errors,
            "load1": _load1()}


def _integrity(clusters: list[Cluster], router: TenantRouter[TeamStore], load: Load, moved: int,
               source: str) -> dict[str, Any]:
    """Every acknowledged write looked up on every cluster."""
    found: dict[int, list[tuple[str, int]]] = defaultdict(list)  # id -> (cluster, tenant)
    for cluster in clusters:
        with db.connect(cluster.owner_dsn) as conn:
            for tenant_id, item_id in conn.execute("SELECT tenant_id, id FROM items"):
                found[int(item_id)].append((cluster.name, int(tenant_id)))
    acked_ids = Counter(item_id for _, item_id in load.acked)
    lost = sum(1 for item_id in acked_ids if item_id not in found)
    duplicated = sum(len(where) - 1 for where in found.values() if len(where) > 1)
    misplaced = sum(1 for item_id, where in found.items()
                    if any(cluster != router.route(tenant) for cluster, tenant in where))
    unexpected = sum(1 for item_id in found if item_id not in acked_ids)
    with db.connect(next(c.owner_dsn for c in clusters if c.name == source)) as conn:
        left = sum(rows for rows, _ in tenant_fingerprint(conn, moved).values())
    return {"acknowledged writes": len(load.acked), "acknowledged twice": sum(n - 1 for n in acked_ids.values()),
            "rows on all clusters": sum(len(w) for w in found.values()), "lost": lost, "duplicated": duplicated,
            "on another cluster than its tenant's route": misplaced, "not acknowledged": unexpected,
            "moved tenant's rows left on the source": left}


def _replica_probe(cluster: Cluster, replica: Replica, router: TenantRouter[TeamStore], load: Load,
                   tenants: list[Tenant], probes: int, secret: bytes) -> dict[str, Any]:
    """Write, then read the write back from the standby: every other probe straight away, the others after
    waiting for the standby to replay the write's WAL position (falling back to the primary after the budget)."""
    standby_pool = db.Pool(db.app_conninfo(replica.dsn(DATABASE), secret), size=2)
    standby = TeamStore(standby_pool)
    mine = [t for t in tenants if router.route(t.id) == cluster.name]
    rng = random.Random(9)
    stale = naive = 0
    waits: list[float] = []
    fallbacks = missed = 0
    with db.connect(cluster.owner_dsn) as primary, db.connect(replica.dsn(DATABASE)) as watcher:
        for probe in range(probes):
            tenant = rng.choices(mine, [t.size for t in mine])[0]
            item_id = load.write(tenant)
            if probe % 2 == 0:
                naive += 1
                stale += not standby.get_many(tenant.id, [item_id])
                continue
            lsn = wal_position(primary)
            start = time.perf_counter()
            if wait_replayed(watcher, lsn, RYW_BUDGET_S):
                waits.append((time.perf_counter() - start) * 1000)
                missed += not standby.get_many(tenant.id, [item_id])
            else:
                fallbacks += 1
                with router.reading(tenant.id) as store:
                    missed += not store.get_many(tenant.id, [item_id])
    standby_pool.close()
    checked = probes - naive
    return {"probes": probes, "read at once": naive, "missing at once": stale,
            "missing at once %": round(100 * stale / naive, 1) if naive else 0.0,
            "read after WAL wait": checked, "served by standby": len(waits), "fell back to primary": fallbacks,
            "wait p50 ms": round(percentile(waits, 50), 2), "wait p95 ms": round(percentile(waits, 95), 2),
            "wait max ms": round(max(waits, default=float("nan")), 2), "missing after wait": missed,
            "load1": _load1()}


def run(*, clusters: int = 3, tenants: int = 50, zipf_s: float = 1.1, items: int = 20_000, clients: int = 12,
        phase_s: float = 20.0, write_share: float = 0.3, replica: bool = True, probes: int = 400,
        log: Log = lambda _m: None) -> dict[str, Any]:
    if clusters < 2:
        raise ValueError("the simulation needs at least two clusters")
    root = Path(tempfile.mkdtemp(prefix="memcairn-scaling-"))
    root.chmod(0o755)  # the unprivileged user PostgreSQL runs as (when we are root) must reach the clusters
    secret = secrets.token_bytes(32)
    started: list[Cluster] = []
    standby: Replica | None = None
    try:
        started = _start_clusters(root, clusters, clients, secret, log)
        router: TenantRouter[TeamStore] = TenantRouter({c.name: TeamStore(c.pool) for c in started})
        sizes = zipf_sizes(tenants, zipf_s, items)
        people = _make_tenants(started, router, sizes)
        load = Load(router, people, clients, write_share)
        log(f"preloading {sum(sizes)} memories over {tenants} tenants (largest {sizes[0]}, smallest {sizes[-1]})")
        preload_s, preload_rate = _preload(load, people, clients)
        for tenant in people:
            with router.reading(tenant.id) as store:
                tenant.project_ids = store.project_ids(tenant.id, [])
        rows_before: Counter[str] = Counter()
        for tenant in people:
            rows_before[router.route(tenant.id)] += tenant.size
        largest = people[0]
        source = router.route(largest.id)
        target = min((c.name for c in started if c.name != source), key=lambda name: rows_before[name])

        log(f"load: {clients} clients, {int(write_share * 100)}% writes; {phase_s:.0f} s before the move")
        load.start()
        t0 = time.perf_counter()
        time.sleep(phase_s)
        errors_before = len(load.errors)
        log(f"moving tenant {largest.id} ({largest.size} rows) from {source} to {target}")
        move_start = time.perf_counter()
        report: MoveReport = move_tenant(router, largest.id, target, {c.name: c.owner_dsn for c in started},
                                         on_phase=lambda name: log(f"  move: {name}"))
        move_end = time.perf_counter()
        errors_during = len(load.errors) - errors_before
        time.sleep(phase_s)
        after_end = time.perf_counter()
        errors_after = len(load.errors) - errors_before - errors_during
        replica_row: dict[str, Any] | None = None
        if replica:
            log("starting a streaming replica of pg0 (pg_basebackup), probing read-your-writes under the load")
            standby = start_replica(started[0].server, started[0].port, root / "replica-0")
            replica_row = _replica_probe(started[0], standby, router, load, people, probes, secret)
        load.stop()
        ops = list(load.ops)
        phases = [_phase_row("before the move", ops, t0, move_start, largest.id, errors_before),
                  _phase_row("during the move", ops, move_start, move_end, largest.id, errors_during),
                  _phase_row("after the move", ops, move_end, after_end, largest.id, errors_after)]
        integrity = _integrity(started, router, load, largest.id, source)
        placement = [{"cluster": c.name, "tenants": sum(1 for t in people if router.route(t.id) == c.name),
                      "rows at the start": rows_before[c.name],
                      "preload rows of its tenants now": sum(t.size for t in people if router.route(t.id) == c.name)}
                     for c in started]
        move_row = {"tenant": largest.id, "its rows (preload)": largest.size, "from": source, "to": target,
                    "snapshot pause ms": report.snapshot_pause_ms,
                    **{f"{name} s": seconds for name, seconds in report.phase_s.items()},
                    "catch-up rounds": report.rounds, "changes caught up": report.caught_up,
                    "changes in freeze": report.in_freeze,
                    "differed at the check": ", ".join(report.resynced) or "none", "freeze ms": report.freeze_ms,
                    **{f"freeze: {name} ms": ms for name, ms in report.freeze_parts_ms.items()},
                    "rows moved (verified)": report.rows_moved, "items moved": report.verified["items"][0],
                    "rows deleted at source": report.deleted}
        return {"setup": {"clusters": clusters, "tenants": tenants, "zipf_s": zipf_s, "items": sum(sizes),
                          "largest": sizes[0], "smallest": sizes[-1], "clients": clients,
                          "write_share": write_share, "phase_s": phase_s, "cores": os.cpu_count(),
                          "preload_s": round(preload_s, 1), "preload_rows_per_s": round(preload_rate, 1),
                          "errors": load.errors[:5]},
                "placement": placement, "phases": phases, "move": move_row, "integrity": integrity,
                "replica": replica_row}
    finally:
        if standby is not None:
            standby.stop()
        for cluster in started:
            cluster.pool.close()
            cluster.server.stop()
        shutil.rmtree(root, ignore_errors=True)


def render(result: dict[str, Any]) -> str:
    setup = result["setup"]
    parts = [f"{setup['clusters']} embedded PostgreSQL clusters, {setup['tenants']} tenants (Zipf s={setup['zipf_s']}:"
             f" {setup['items']} rows, largest {setup['largest']}, smallest {setup['smallest']}), {setup['clients']}"
             f" client threads, {int(setup['write_share'] * 100)}% writes / keyword searches, {setup['cores']} cores;"
             f" preload {setup['preload_rows_per_s']} rows/s",
             "", render_table(result["placement"]), "", render_table(result["phases"]), "",
             render_table([result["move"]]), "", render_table([result["integrity"]])]
    if result.get("replica"):
        parts += ["", f"read-your-writes on a streaming standby (wait budget {int(RYW_BUDGET_S * 1000)} ms)",
                  render_table([result["replica"]])]
    if setup["errors"]:
        parts += ["", "errors (first 5): " + "; ".join(setup["errors"])]
    return "\n".join(parts)
