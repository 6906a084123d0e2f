"""The tenant router: which PostgreSQL cluster holds a tenant, and the gate a tenant's move closes.

Every row of the team schema carries ``tenant_id`` and no query joins two tenants, so tenants can live on
different clusters: the router maps each tenant to the name of the cluster that holds it (``route``) and hands
out that cluster's handle (a ``TeamStore``, a pool, a DSN: whatever ``clusters`` maps names to). A tenant
without an entry is placed by rendezvous hashing over the cluster names (stable: adding a cluster moves only
the tenants that hash to it); an explicit entry wins, which is how a moved tenant is found.

Writes go through ``writing(tenant)`` and reads through ``reading(tenant)``: both count as in flight on the
cluster they were handed. A move (``tenant_move.move_tenant``) closes the tenant's gate with ``frozen``: new
writes of that tenant wait, the ones in flight finish, and only then does the freeze begin; reads go on (the
rows do not change while writes wait). ``switch`` points the tenant at its new cluster, and
``wait_idle(tenant, old)`` waits for the reads and writes still using the old cluster before its rows are
deleted there, so a read handed the old cluster just before the switch never finds them gone.

The routes and the gate live in this process: a server run as several processes needs them shared (a
directory table the processes read, and a fence on the source cluster that refuses writes of a moved tenant);
docs/SCALING.md describes that part, which is not built.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownCluster(KeyError):
    """A route names a cluster the router does not have."""


@dataclass
class _Gate:
    """One tenant's writers in flight, its readers and writers per cluster, and whether a move froze it."""

    frozen: bool = False
    writers: int = 0
    using: dict[str, int] = field(default_factory=dict)  # cluster -> reads and writes in flight there


def rendezvous(tenant_id: int, names: list[str]) -> str:
    """The cluster with the highest hash of (tenant, cluster): the same answer in every process, and adding a
    cluster takes tenants only from the others to itself."""
    def weight(name: str) -> bytes:
        return hashlib.blake2b(f"{tenant_id}\x00{name}".encode(), digest_size=8).digest()

    return max(sorted(names), key=weight)


class TenantRouter(Generic[T]):
    """Tenant -> cluster name -> handle, with a per-tenant write gate for moves."""

    def __init__(self, clusters: Mapping[str, T], routes: Mapping[int, str] | None = None) -> None:
        if not clusters:
            raise ValueError("a router needs at least one cluster")
        self.clusters = dict(clusters)
        self._routes: dict[int, str] = {}
        self._lock = threading.Condition()
        self._gates: dict[int, _Gate] = {}
        for tenant_id, name in (routes or {}).items():
            self.assign(tenant_id, name)

    # -- routes -------------------------------------------------------------------------------------------
    def route(self, tenant_id: int) -> str:
        """The name of the cluster that holds the tenant (its entry, else where rendezvous hashing puts it)."""
        with self._lock:
            return self._routes.get(tenant_id) or rendezvous(tenant_id, list(self.clusters))

    def assign(self, tenant_id: int, cluster: str) -> None:
        """Record where a tenant lives (a new tenant placed by other means than hashing, e.g. least loaded)."""
        if cluster not in self.clusters:
            raise UnknownCluster(cluster)
        with self._lock:
            self._routes[tenant_id] = cluster

    def routes(self) -> dict[int, str]:
        """The explicit entries (what a directory table would hold)."""
        with self._lock:
            return dict(self._routes)

    def handle(self, tenant_id: int) -> T:
        """The tenant's cluster's handle, for a caller that needs no gate (administration)."""
        return self.clusters[self.route(tenant_id)]

    # -- the gate -----------------------------------------------------------------------------------------
    def _gate(self, tenant_id: int) -> _Gate:
        return self._gates.setdefault(tenant_id, _Gate())

    @contextmanager
    def _using(self, tenant_id: int, *, write: bool) -> Iterator[T]:
        with self._lock:
            gate = self._gate(tenant_id)
            while write and gate.frozen:
                self._lock.wait()
            name = self._routes.get(tenant_id) or rendezvous(tenant_id, list(self.clusters))
            gate.using[name] = gate.using.get(name, 0) + 1
            gate.writers += write
        try:
            yield self.clusters[name]
        finally:
            with self._lock:
                gate.using[name] -= 1
                gate.writers -= write
                self._lock.notify_all()

    def writing(self, tenant_id: int) -> AbstractContextManager[T]:
        """The handle to write the tenant's rows through, held until the write committed; waits while the
        tenant is frozen."""
        return self._using(tenant_id, write=True)

    def reading(self, tenant_id: int) -> AbstractContextManager[T]:
        """The handle to read the tenant's rows through (never waits for a freeze)."""
        return self._using(tenant_id, write=False)

    @contextmanager
    def frozen(self, tenant_id: int) -> Iterator[None]:
        """No write of the tenant runs inside this block: new ones wait, those in flight are waited for first.
        One freeze per tenant at a time."""
        with self._lock:
            gate = self._gate(tenant_id)
            while gate.frozen:
                self._lock.wait()
            gate.frozen = True
            while gate.writers:
                self._lock.wait()
        try:
            yield
        finally:
            with self._lock:
                gate.frozen = False
                self._lock.notify_all()

    def switch(self, tenant_id: int, cluster: str) -> None:
        """Point the tenant at ``cluster``; meant for inside ``frozen`` (no write sees half a move)."""
        self.assign(tenant_id, cluster)

    def wait_idle(self, tenant_id: int, cluster: str) -> None:
        """Wait until no read or write of the tenant still uses ``cluster``."""
        with self._lock:
            gate = self._gate(tenant_id)
            while gate.using.get(cluster, 0):
                self._lock.wait()

    def in_flight(self, tenant_id: int, cluster: str) -> int:
        with self._lock:
            return self._gate(tenant_id).using.get(cluster, 0)
