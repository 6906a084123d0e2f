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
