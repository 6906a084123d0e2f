"""One contract for both stores: the SQLite ``Store`` (a real file) and the team store's ``TenantStore`` (the
session's real PostgreSQL), each through the storage protocols ``Items``, ``KeywordSearch``,
``ProjectsAndSessions``, the search service's ``SearchStore`` (``TimeWindow``, ``KeywordEvidence``) and the
SessionStart context's ``ContextStore`` of ``store/protocols.py``. The team store runs the contract twice: each
call in a transaction of its own, and bound to one open transaction (``postgresql-bound``, as a server request
reads).

The PostgreSQL side shares one database per module and gives each test a tenant of its own (a tenant sees
nothing of another, which one test checks), so the suite stays fast.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import ItemFilter, NewItem
from memcairn.store import Store
from memcairn.store import protocols as p

if TYPE_CHECKING:
    from memcairn.pgstore.adapter import TenantStore

pytestmark = pytest.mark.timeout(120)

SHARED = (p.Items, p.KeywordSearch, p.ProjectsAndSessions, p.SearchStore, p.ContextStore)  # what both implement
BACKENDS = ("sqlite", "postgresql", "postgresql-bound")
_tenants = itertools.count(1)


@pytest.fixture(scope="module")
def team_database(pg_cluster: Any) -> Iterator[Any]:
    """One team database for the module: its pool and the owner's connection string."""
    from postgres_server import TEST_SECRET

    from memcairn.pgstore import db
    from memcairn.pgstore.items import TeamStore

    name = pg_cluster.create_database()
    owner = pg_cluster.owner_dsn(name)
    pool = db.Pool(db.app_conninfo(owner, TEST_SECRET), size=2)
    yield TeamStore(pool, None), owner  # no model: the contract is about the keyword leg
    pool.close()
    pg_cluster.drop_database(name)


def new_tenant(owner_dsn: str) -> int:
    from postgres_server import tenant

    return tenant(owner_dsn, f"t{next(_tenants)}")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        with Store(tmp_path / "contract.db") as store:
            yield store
        return
    from memcairn.pgstore.adapter import TenantStore

    team, owner = request.getfixturevalue("team_database")
    team_store = TenantStore(team, new_tenant(owner))
    yield team_store if request.param == "postgresql" else BoundReads(team_store)


class BoundReads:
    """A tenant's store whose writes commit on their own and whose every read runs in a store bound to a
    transaction of its own, as a server request reads (a bound store does not write)."""

    WRITES = ("add_item", "add_items", "delete_items", "ensure_session", "end_session")

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def __getattr__(self, name: str) -> Any:
        from memcairn.pgstore.adapter import TenantStore
        from memcairn.pgstore.db import tenant_transaction

        if name in self.WRITES:
            return getattr(self.writer, name)
        team, tenant_id = self.writer.team, self.writer.tenant_id

        def read(*args: Any, **kwargs: Any) -> Any:
            with team.pool.connection() as conn, tenant_transaction(conn, tenant_id) as cur:
                return getattr(TenantStore(team, tenant_id, cur=cur), name)(*args, **kwargs)

        return read


def note(project: str, title: str, text: str = "", *, epoch: int | None = None, session: str | None = None,
         kind: str = "manual") -> NewItem:
    return NewItem(project=project, kind=kind, title=title, text=text, created_at_epoch=epoch, session=session,
                   platform_source="claude-code" if session else None)


# -- the contract ---------------------------------------------------------------------------------------------
def test_the_same_content_twice_is_one_row_read_back_whole(backend: Any) -> None:
    first = backend.add_item(note("alpha", "Parser timeout fixed", "raised the read timeout to 30 s", epoch=1_000))
    again = backend.add_item(note("alpha", "Parser timeout fixed", "raised the read timeout to 30 s", epoch=1_000))
    assert first.created and first.id > 0 and not first.forgotten
    assert (again.id, again.created) == (first.id, False)
    assert len(backend.list_items(ItemFilter(projects=["alpha"]))) == 1
    item = backend.get_item(first.id)
    assert (item.id, item.project, item.kind, item.title, item.text, item.created_at_epoch) == (
        first.id, "alpha", "manual", "Parser timeout fixed", "raised the read timeout to 30 s", 1_000)
    assert item.type == "note" and item.content_hash
    batch = backend.add_items([note("alpha", "one"), note("alpha", "two"), note("alpha", "one")])
    assert [r.created for r in batch] == [True, True, False] and batch[0].id == batch[2].id
    assert [i.title for i in backend.get_items([batch[1].id, 999_999, first.id])] == ["two", "Parser timeout fixed"]
    with pytest.raises(NotFoundError):
        backend.get_item(999_999)
    with pytest.raises(ValidationError):
        backend.add_item(NewItem(project="alpha", kind="no-such-kind", title="x"))


def test_lists_newest_first_and_pages(backend: Any) -> None:
    ids = {epoch: backend.add_item(note("alpha", f"at {epoch}", epoch=epoch)).id for epoch in (1_000, 3_000, 2_000)}
    scope = ItemFilter(projects=["alpha"])
    assert [i.id for i in backend.list_items(scope)] == [ids[3_000], ids[2_000], ids[1_000]]
    assert [i.id for i in backend.list_items(scope, order="oldest")] == [ids[1_000], ids[2_000], ids[3_000]]
    assert [i.id for i in backend.list_items(scope, limit=1, offset=1)] == [ids[2_000]]
    assert [i.id for i in backend.list_items(ItemFilter(projects=["alpha"], date_start=1_500, date_end=2_500))] == [
        ids[2_000]]
    assert [i.id for i in backend.list_items()] == [ids[3_000], ids[2_000], ids[1_000]]
    prompt = backend.add_item(note("alpha", "a prompt", "what broke?", epoch=500, kind="prompt")).id
    assert [i.id for i in backend.list_items(ItemFilter(projects=["alpha"], kinds=["prompt"]))] == [prompt]
    assert [i.id for i in backend.list_items(ItemFilter(types=["note"]))] == [ids[3_000], ids[2_000], ids[1_000]]


def test_forgetting_hides_from_read_list_and_search_and_refuses_the_content_again(backend: Any) -> None:
    kept = backend.add_item(note("alpha", "kept memory about zeppelins", epoch=1_000)).id
    gone = backend.add_item(note("alpha", "forgotten memory about zeppelins", epoch=2_000)).id
    assert backend.delete_items([gone, gone, 999_999]) == [gone]
    assert backend.get_items([gone]) == []
    with pytest.raises(NotFoundError):
        backend.get_item(gone)
    assert [i.id for i in backend.list_items(ItemFilter(projects=["alpha"]))] == [kept]
    assert [i for i, _ in backend.keyword_ids("zeppelins")] == [kept]
    replayed = backend.add_item(note("alpha", "forgotten memory about zeppelins", epoch=2_000))
    assert replayed.forgotten and not replayed.created
    assert [i.id for i in backend.list_items(ItemFilter(projects=["alpha"]))] == [kept]
    revived = backend.add_item(note("alpha", "forgotten memory about zeppelins", epoch=2_000), revive=True)
    assert revived.created and revived.id != gone
    assert {i for i, _ in backend.keyword_ids("zeppelins")} == {kept, revived.id}


def test_keyword_search_finds_by_a_word_best_first(backend: Any) -> None:
    both = backend.add_item(note("alpha", "parser timeout", "the parser hit a timeout on large files")).id
    one = backend.add_item(note("alpha", "cache warmup", "the parser cache is warmed at start")).id
    backend.add_item(note("alpha", "unrelated", "nothing to see here"))
    hits = backend.keyword_ids("parser timeout")
    assert [i for i, _ in hits] == [both, one]
    assert all(isinstance(i, int) and isinstance(s, float) for i, s in hits)
    assert hits[0][1] > hits[1][1] > 0  # higher is better, best first
    assert [i for i, _ in backend.keyword_ids("warmup")] == [one]
    assert backend.keyword_ids("parser timeout", limit=1, offset=1) == hits[1:2]
    assert backend.keyword_ids("xylophone") == []
    assert backend.keyword_ids("\"*:( AND NEAR -") == []  # query syntax is only text, and matches nothing here


def test_the_context_s_totals_and_window_follow_writes_and_deletes(backend: Any) -> None:
    made = backend.add_items([note("alpha", "one", "abc", epoch=1_000), note("alpha", "two", "defg", epoch=2_000),
                              note("alpha", "three", epoch=3_000), note("beta", "four", "xy", epoch=1_500)])
    alpha, beta = backend.resolve_project_ids(["alpha"]), backend.resolve_project_ids(["beta"])
    assert backend.chain_totals(alpha) == (3, 3 + 3 + 3 + 4 + 5)  # stored characters: titles and texts
    assert backend.chain_totals(alpha + beta) == (4, 18 + 6) and backend.chain_totals([]) == (0, 0)
    assert backend.window_start(alpha, 2) == 2_000 and backend.window_start(alpha, 4) is None
    assert backend.window_start(alpha + beta, 1) == 1_500  # the earliest of each project's newest
    backend.delete_items([made[1].id])
    backend.add_item(note("alpha", "five", "z", epoch=4_000))
    assert backend.chain_totals(alpha) == (3, 18 - 7 + 5)  # counted again after a delete
    backend.add_item(note("alpha", "six", epoch=5_000))
    assert backend.chain_totals(alpha) == (4, 16 + 3)  # kept current by the new ids
    assert backend.window_start(alpha, 2) == 4_000


def test_projects_and_sessions(backend: Any) -> None:
    backend.add_item(note("beta", "in a session", session="s-1", epoch=2_000))
    backend.add_item(note("alpha", "alone", epoch=1_000))
    backend.add_item(note("alpha", "alone too", epoch=3_000))
    listed = {info.name: (info.items, info.last_epoch) for info in backend.projects()}
    assert listed == {"alpha": (2, 3_000), "beta": (1, 2_000)}
    assert backend.project_names() == ["alpha", "beta"]
    assert [name for _, name in backend.resolve_projects(["beta", "nope"])] == ["beta"]
    assert backend.resolve_project_ids(["nope"]) == []
    session = backend.ensure_session("s-1", "beta", "claude-code")
    assert backend.ensure_session("s-1", "beta", "claude-code") == session
    assert [i.title for i in backend.list_items(ItemFilter(session="s-1"))] == ["in a session"]
    assert backend.list_items(ItemFilter(session="s-1"))[0].session == "s-1"
    assert backend.end_session("s-1", "claude-code") is True
    assert backend.end_session("no-such-session", "claude-code") is False


def test_projects_are_isolated(backend: Any) -> None:
    a = backend.add_item(note("alpha", "shared words about kubernetes", epoch=1_000)).id
    b = backend.add_item(note("beta", "shared words about kubernetes", epoch=1_000)).id
    assert a != b  # dedupe is per project
    assert [i.id for i in backend.list_items(ItemFilter(projects=["alpha"]))] == [a]
    assert [i.id for i in backend.list_items(ItemFilter(projects=["beta"]))] == [b]
    assert [i for i, _ in backend.keyword_ids("kubernetes", ItemFilter(projects=["beta"]))] == [b]
    assert backend.keyword_ids("kubernetes", ItemFilter(projects=["gamma"])) == []
    assert backend.list_items(ItemFilter(projects=["gamma"])) == []
    assert backend.delete_items([a]) == [a]
    assert [i.id for i in backend.list_items(ItemFilter(projects=["beta"]))] == [b]  # forgotten in alpha only
    assert backend.add_item(note("beta", "shared words about kubernetes", epoch=1_000)).id == b


def test_the_time_window_reads_times_filters_and_neighbours(backend: Any) -> None:
    ids = [backend.add_item(note("alpha", f"step {n}", epoch=1_000 + n)).id for n in range(5)]
    beta = backend.add_item(note("beta", "elsewhere", epoch=1_002)).id
    assert backend.created_epochs([ids[0], ids[3], beta, 999_999]) == {ids[0]: 1_000, ids[3]: 1_003, beta: 1_002}
    assert backend.created_epochs([ids[0], beta], ItemFilter(projects=["alpha"])) == {ids[0]: 1_000}
    assert backend.created_epochs([ids[0]], ItemFilter(projects=["alpha"], date_start=1_001)) == {}
    assert backend.created_epochs([]) == {}
    assert backend.filter_ids([ids[1], beta], ItemFilter(projects=["beta"])) == {beta}
    assert backend.filter_ids([ids[1]], ItemFilter(projects=["gamma"])) == set()
    earlier, later = backend.neighbours(1_003, before=2, after=2, flt=ItemFilter(projects=["alpha"]),
                                        anchor_id=ids[3])
    assert [i.id for i in earlier] == ids[1:3] and [i.id for i in later] == ids[3:5]
    earlier, later = backend.neighbours(1_002, before=1, after=2)  # no anchor: every project, at or after the time
    assert [i.id for i in earlier] == [ids[1]] and [i.id for i in later] == [ids[2], beta]
    assert backend.neighbours(1_000, before=3, after=0) == ([], [])
    backend.delete_items([ids[4]])
    assert backend.created_epochs([ids[4]]) == {}
    assert [i.id for i in backend.neighbours(1_003, before=0, after=5, anchor_id=ids[3])[1]] == [ids[3]]


def test_keyword_evidence_names_the_words_and_the_candidates_holding_each(backend: Any) -> None:
    both = backend.add_item(note("alpha", "parser timeout", "the parser hit a timeout on large files")).id
    one = backend.add_item(note("alpha", "cache warmup", "the parser cache is warmed at start")).id
    none = backend.add_item(note("alpha", "unrelated", "nothing to see here")).id
    terms = backend.query_terms("the parser timeout", [both, one, none])
    assert terms.tokens == ("parser", "timeout") and terms.total == 3
    assert dict(zip(terms.tokens, terms.frequencies, strict=True)) == {"parser": 2, "timeout": 1}
    assert terms.holding == {"parser": {both, one}, "timeout": {both}}
    assert backend.query_terms("parser", [none]).holding == {"parser": set()}
    # asked after the keyword leg ran (a bound team store then reads times and evidence in one statement)
    hits = [i for i, _ in backend.keyword_ids("parser timeout", ItemFilter(projects=["alpha"]))]
    assert backend.created_epochs(hits, ItemFilter(projects=["alpha"])).keys() == {both, one}
    assert backend.query_terms("parser timeout", hits).holding == {"parser": {both, one}, "timeout": {both}}
    assert backend.created_epochs([none]).keys() == {none}  # outside the leg's hits: read as asked


# -- the team store's own bounds: tenants and pins -----------------------------------------------------------
def test_a_tenant_store_sees_nothing_of_another_tenant_nor_outside_its_pin(team_database: Any) -> None:
    from memcairn.pgstore.adapter import TenantStore

    team, owner = team_database
    acme = TenantStore(team, new_tenant(owner))
    a = acme.add_item(note("alpha", "acme's secret plan")).id
    b = acme.add_item(note("beta", "acme's other plan")).id
    other = TenantStore(team, new_tenant(owner))
    assert other.get_items([a, b]) == [] and other.list_items() == [] and other.projects() == []
    assert other.keyword_ids("plan") == [] and other.delete_items([a]) == []
    pinned = TenantStore(team, acme.tenant_id, pin=acme.resolve_project_ids(["alpha"])[0])
    assert [i.id for i in pinned.list_items()] == [a] and pinned.get_items([b]) == []
    assert [i for i, _ in pinned.keyword_ids("plan")] == [a] and pinned.project_names() == ["alpha"]
    with pytest.raises(NotFoundError):
        pinned.add_item(note("beta", "written outside the pin"))
    assert pinned.delete_items([b]) == [] and acme.get_items([b])[0].id == b


def test_a_bound_store_reads_a_search_s_candidates_as_an_unbound_one_and_does_not_write(team_database: Any) -> None:
    """A store bound to a request's transaction reads the times and keyword evidence of the candidates the legs
    found together (``pgstore/candidates.py``): the answers are those of a store reading each on its own, but for
    the words' frequencies of the search's candidates, which a bound store counts in the projects its search
    searched (as the server's search always has), an unbound one in every project of the tenant."""
    from memcairn.pgstore.adapter import TenantStore
    from memcairn.pgstore.db import tenant_transaction

    team, owner = team_database
    store = TenantStore(team, new_tenant(owner))
    ids = [store.add_item(note(project, f"parser timeout {n}", "the parser cache", epoch=1_000 + n)).id
           for n, project in enumerate(["alpha", "alpha", "beta", "alpha"])]
    store.delete_items([ids[3]])
    alpha, both = ItemFilter(projects=["alpha"]), ItemFilter(projects=["alpha", "beta"])

    def asked(reader: Any) -> list[Any]:
        hits = [i for i, _ in reader.keyword_ids("parser timeout", alpha)]
        return [hits, reader.created_epochs([*hits, ids[2], ids[3]], alpha), reader.created_epochs(hits),
                reader.created_epochs([ids[2], ids[3]]), reader.created_epochs([ids[0], ids[2]], both),
                reader.filter_ids([ids[2]], alpha), reader.query_terms("parser timeout", hits),
                reader.query_terms("parser timeout", [ids[2]]), reader.query_terms("cache", hits)]

    with team.pool.connection() as conn, tenant_transaction(conn, store.tenant_id) as cur:
        bound = TenantStore(team, store.tenant_id, cur=cur)
        within, everywhere = asked(bound), asked(store)
        assert within[:6] == everywhere[:6] and within[7:] == everywhere[7:]
        assert (within[6].tokens, within[6].holding) == (everywhere[6].tokens, everywhere[6].holding)
        assert (within[6].frequencies, within[6].total) == ((2, 2), 2)  # alpha's rows
        assert (everywhere[6].frequencies, everywhere[6].total) == ((3, 3), 3)
        with pytest.raises(RuntimeError):
            bound.add_item(note("alpha", "written in a read"))
    assert asked(store)[1] == {ids[0]: 1_000, ids[1]: 1_001}


def test_the_team_store_refuses_filters_it_cannot_honour(team_database: Any) -> None:
    from memcairn.pgstore.adapter import TenantStore

    team, owner = team_database
    store = TenantStore(team, new_tenant(owner))
    with pytest.raises(ValidationError):
        store.list_items(ItemFilter(files=["src/app.py"]))
    with pytest.raises(ValidationError):
        store.keyword_ids("x", ItemFilter(kinds=["manual"]))
    with pytest.raises(ValidationError):
        store.keyword_ids("x", order="newest")


# -- conformance ----------------------------------------------------------------------------------------------
def _members(protocol: type) -> list[str]:
    return sorted(name for name in dir(protocol) if not name.startswith("_") and name not in dir(object)
                  and getattr(protocol, name, None) is not None)


def _same_signature(protocol: type, implementation: type, name: str, instance: object = None) -> bool:
    """``implementation`` has ``name`` with the protocol's parameters (names, kinds, defaults); a property of the
    protocol may be an attribute ``instance`` sets."""
    wanted, given = getattr(protocol, name), getattr(implementation, name, None)
    if isinstance(wanted, property):
        return given is not None or hasattr(instance, name)
    if given is None or not callable(given):
        return False
    shape = [(q.name, q.kind, q.default) for q in inspect.signature(wanted).parameters.values()]
    return shape == [(q.name, q.kind, q.default) for q in inspect.signature(given).parameters.values()]


def _implementation(name: str) -> type:
    if name == "sqlite":
        return Store
    from memcairn.pgstore.adapter import TenantStore

    return TenantStore


@pytest.mark.parametrize("name,protocols", [("sqlite", (p.LocalStore,)), ("postgresql", SHARED)])
def test_each_backend_has_every_method_of_its_protocols_with_their_parameters(name: str, protocols: tuple,
                                                                              tmp_path: Path) -> None:
    """The runtime half of the check (mypy checks the static half: ``_static_conformance``)."""
    if name == "postgresql":
        pytest.importorskip("psycopg")
    implementation = _implementation(name)
    instance = Store(tmp_path / "attributes.db") if name == "sqlite" else None
    for protocol in protocols:
        members = _members(protocol)
        assert members, protocol
        mismatched = [m for m in members if not _same_signature(protocol, implementation, m, instance)]
        assert mismatched == [], f"{implementation.__name__} vs {protocol.__name__}"
    if instance is not None:
        instance.close()


def test_the_conformance_check_fails_on_a_mismatch() -> None:
    class Short:
        def get_item(self, item_id: int) -> None: ...

        def get_items(self, wanted: list[int]) -> None: ...  # another parameter name

    assert _same_signature(p.ItemReader, Short, "get_item")
    assert not _same_signature(p.ItemReader, Short, "get_items")
    assert not _same_signature(p.ItemReader, Short, "list_items")


def _static_conformance(sqlite: Store, team: TenantStore) -> None:  # pragma: no cover - read by mypy, never run
    local: p.LocalStore = sqlite
    shared: tuple[p.Items, p.KeywordSearch, p.ProjectsAndSessions, p.SearchStore, p.ContextStore] = (
        team, team, team, team, team)
    _ = (local, shared)
