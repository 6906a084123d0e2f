"""A memory's anchors on the team store (migration 14): kept with the row by a save and by the ingest queue's
batch insert, scrubbed like its text, read back by the API's records and the tenant store; rows without any read
back empty."""

from __future__ import annotations

from dataclasses import replace

import pytest
from postgres_server import event, tenant

from memcairn.pgstore.adapter import TenantStore
from memcairn.pgstore.items import TeamStore
from memcairn.server import queue as ingest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ANCHORS = {"root": "/home/dev/ledger", "commit": "a" * 40, "branch": "trunk",
           "files": [{"path": "billing.py", "id": "3b18e512dba79e4c8300dd08aeb37f8e728b8dad", "by": "git"}],
           "identifiers": ["settle_invoice_batch"]}


def test_a_saved_and_a_queued_memory_keep_their_anchors(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    secret = {**ANCHORS, "branch": "fix-AKIAIOSFODNN7EXAMPLE"}
    saved = team.add(acme, replace(event("api", "settle_invoice_batch skips paid invoices"), anchors=secret))
    bare = team.add(acme, event("api", "a note resting on nothing"))
    ingest.enqueue(team.pool, acme, [replace(event("api", "billing batches settle nightly"), anchors=ANCHORS)])
    queued = ingest.consume(team).stored
    assert len(queued) == 1 and queued[0].created

    records = {r["title"]: r for r in team.get_many(acme, [saved.id, bare.id, queued[0].id])}
    kept = records["settle_invoice_batch skips paid invoices"]["anchors"]
    assert kept["files"] == ANCHORS["files"] and kept["identifiers"] == ["settle_invoice_batch"]
    assert "AKIAIOSFODNN7EXAMPLE" not in str(kept)  # scrubbed as the text is
    assert records["billing batches settle nightly"]["anchors"] == ANCHORS
    assert records["a note resting on nothing"]["anchors"] == {}
    items = {i.title: i for i in TenantStore(team, acme).get_items([saved.id, queued[0].id])}
    assert items["billing batches settle nightly"].anchors == ANCHORS


def test_a_correction_is_kept_with_the_row_and_the_memory_leaves_the_digest(pg_database: str,
                                                                            team: TeamStore) -> None:
    from memcairn.context.gather import gather
    from memcairn.core.errors import NotFoundError, ValidationError
    from memcairn.pgstore import corrections
    from memcairn.pgstore.db import read_as
    from memcairn.pgstore.item_numbers import numbers_of
    from memcairn.wire.config import load_settings

    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    old = team.add(acme, event("api", "the port is 8000"))
    new = team.add(acme, event("api", "the port is 8080"))
    elsewhere = team.add(other, event("api", "their note"))
    number = read_as(team.pool, acme, lambda cur: numbers_of(cur, acme, [old.id, new.id]))
    said = corrections.correct(team, acme, number[old.id], by=number[new.id], why="moved in the last release")
    assert said.id == number[old.id] and said.correction["state"] == "superseded"
    assert said.correction["by"] == number[new.id]
    shown = gather(TenantStore(team, acme, numbered=True), load_settings(), ["api"])
    assert [i.title for i in shown.observations] == ["the port is 8080"]  # the corrected one left the digest
    undone = corrections.correct(team, acme, number[old.id], undo=True)
    assert "state" not in undone.correction and undone.correction["undone"][0]["state"] == "superseded"
    wrong = corrections.correct(team, acme, number[old.id], why="never true")
    assert wrong.correction["state"] == "wrong" and len(wrong.correction["undone"]) == 1
    assert team.get_many(acme, [old.id])[0]["correction"]["why"] == "never true"  # kept, readable by id
    theirs = read_as(team.pool, other, lambda cur: numbers_of(cur, other, [elsewhere.id]))[elsewhere.id]
    corrections.correct(team, other, theirs, why="their own call")
    assert team.get_many(acme, [old.id])[0]["correction"]["why"] == "never true"  # untouched by another tenant's
    with pytest.raises(NotFoundError):
        corrections.correct(team, acme, 999, why="no such memory")
    with pytest.raises(ValidationError):
        corrections.correct(team, acme, number[new.id])  # neither why nor by
