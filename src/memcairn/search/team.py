"""The search service over one tenant of the team store: ``search.SearchService`` (fusion, the relevance floor,
ordering, paging, hydration and the timeline, as every door of the local store runs them) on a ``TenantStore``,
with pgvector as its vector mirror.

``TenantVectors`` is what the service asks of a mirror: ``query(text, projects=, limit=)`` giving hits with
``item_id`` and cosine ``distance`` (each item at its best chunk: ``TeamStore.semantic_leg``, the query's cached
embedding), ``available`` (a model is loaded) and ``embedder.model_id`` for the relevance floor. It reads in the
store's transaction, so a bound store's search runs both legs and the hydration on one connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from memcairn.pgstore.adapter import TenantStore
from memcairn.pgstore.db import tenant_transaction
from memcairn.pgstore.items import TeamStore
from memcairn.search.request import SearchRequest
from memcairn.search.result import SearchResult
from memcairn.search.service import SearchService
from memcairn.search.telemetry import Telemetry


class Nearest(NamedTuple):
    item_id: int
    distance: float  # cosine distance of the item's best chunk: 0 = identical


class TenantVectors:
    """The item vectors of one tenant's projects (within its pin) as the search service's mirror."""

    def __init__(self, store: TenantStore) -> None:
        self.store = store
        self.embedder = store.team.embedder

    @property
    def available(self) -> bool:
        return self.embedder is not None

    def query(self, text: str, *, projects: Sequence[str] | None = None, limit: int = 10) -> list[Nearest]:
        return [Nearest(item_id, 1.0 - similarity) for item_id, similarity in self.store.nearest(text, projects,
                                                                                                 limit)]


class TenantSearch(SearchService):
    """``SearchService`` over ``store`` and its vectors, with the team store's fusion. Project names a request
    gives are checked through the team store's cache of name to id (no read of every project's name unless one
    of them is unknown). The semantic leg asks for its pool only, as the team store's own search did:
    ``TeamStore.nearest`` ranks the projects' vectors exactly (in this process's copies, or an exact scan), or asks
    the HNSW graph for ``CHUNKS_PER_ITEM`` chunks an item and sorts its hits again."""

    mirror_overfetch = 1

    def __init__(self, store: TenantStore, *, telemetry: Telemetry | None = None) -> None:
        super().__init__(store, TenantVectors(store), fusion=store.team.fusion, telemetry=telemetry)
        self.tenant = store

    def unknown_projects(self, names: Sequence[str]) -> tuple[list[str], list[str]]:
        if len(self.tenant.project_ids(names)) == len(set(names)):  # names are unique within a tenant
            return [], []
        return super().unknown_projects(names)


def search_tenant(team: TeamStore, tenant_id: int, request: SearchRequest, *, pin: int | None = None,
                  telemetry: Telemetry | None = None) -> SearchResult:
    """One search of the tenant's memories (within ``pin``) in a transaction of its own, on one connection: the
    path a server request takes in its own transaction (the benches and tests that search without a server)."""
    with team.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
        return TenantSearch(TenantStore(team, tenant_id, pin=pin, cur=cur), telemetry=telemetry).search(request)
