"""The tenant router alone: placement, explicit routes, and the write gate a move closes (no database)."""

from __future__ import annotations

import threading

import pytest

from memcairn.pgstore.router import TenantRouter, UnknownCluster, rendezvous


def test_placement_is_stable_and_spreads_tenants():
    names = ["a", "b", "c"]
    placed = [rendezvous(t, names) for t in range(300)]
    assert placed == [rendezvous(t, list(reversed(names))) for t in range(300)]  # order of the list is no input
    assert all(placed.count(n) > 60 for n in names)  # about 100 each
    # a fourth cluster takes tenants only to itself
    moved = [(old, rendezvous(t, [*names, "d"])) for t, old in enumerate(placed)]
    assert all(new in (old, "d") for old, new in moved) and any(new == "d" for _, new in moved)


def test_explicit_routes_win_and_must_name_a_cluster():
    router = TenantRouter({"a": "A", "b": "B"})
    tenant = next(t for t in range(100) if rendezvous(t, ["a", "b"]) == "a")
    assert router.route(tenant) == "a" and router.handle(tenant) == "A"
    router.assign(tenant, "b")
    assert router.route(tenant) == "b" and router.routes() == {tenant: "b"}
    with router.reading(tenant) as handle:
        assert handle == "B"
    with pytest.raises(UnknownCluster):
        router.assign(tenant, "z")
    with pytest.raises(ValueError):
        TenantRouter({})


def test_a_freeze_waits_for_writes_in_flight_and_holds_new_ones_until_the_switch():
    router = TenantRouter({"a": "A", "b": "B"}, routes={7: "a"})
    in_write, release_write = threading.Event(), threading.Event()
    frozen, release_freeze = threading.Event(), threading.Event()
    late_handle: list[str] = []

    def early_writer() -> None:
        with router.writing(7):
            in_write.set()
            release_write.wait(10)

    def mover() -> None:
        with router.frozen(7):
            frozen.set()
            release_freeze.wait(10)
            router.switch(7, "b")

    def late_writer() -> None:
        with router.writing(7) as handle:
            late_handle.append(handle)

    first = threading.Thread(target=early_writer)
    first.start()
    assert in_write.wait(10)
    moving = threading.Thread(target=mover)
    moving.start()
    assert not frozen.wait(0.3)  # the write in flight holds the freeze off
    with router.reading(7) as handle:  # reads never wait
        assert handle == "A"
    release_write.set()
    first.join(10)
    assert frozen.wait(10)
    late = threading.Thread(target=late_writer)
    late.start()
    late.join(0.3)
    assert late.is_alive() and not late_handle  # held at the gate while frozen
    release_freeze.set()
    moving.join(10)
    late.join(10)
    assert late_handle == ["B"]  # let through after the switch, to the new cluster
    assert router.in_flight(7, "a") == 0 and router.in_flight(7, "b") == 0


def test_wait_idle_waits_for_reads_still_on_the_old_cluster():
    router = TenantRouter({"a": "A", "b": "B"}, routes={3: "a"})
    reading, done_reading = threading.Event(), threading.Event()
    idle = threading.Event()

    def reader() -> None:
        with router.reading(3):
            reading.set()
            done_reading.wait(10)

    def cleaner() -> None:
        router.wait_idle(3, "a")
        idle.set()

    threading.Thread(target=reader).start()
    assert reading.wait(10)
    router.switch(3, "b")
    threading.Thread(target=cleaner).start()
    assert not idle.wait(0.3)
    done_reading.set()
    assert idle.wait(10)
