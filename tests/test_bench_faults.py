"""``memcairn bench faults`` run small: every scenario's table row adds up, and no acknowledged write is lost
or stored twice (the full campaign is run by hand: ``memcairn bench faults``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memcairn.bench import faults

pytestmark = pytest.mark.slow


def _consistent(row: dict) -> None:
    assert row["acknowledged"] <= row["sent"]
    assert row["acknowledged"] + row["refused"] <= row["sent"]
    assert row["lost"] == 0 and row["duplicated"] == 0, row
    assert row["unexpected 5xx"] == 0, row
    assert row["held"] == "yes", row


def test_a_small_campaign_loses_and_duplicates_nothing() -> None:
    rows = {r.scenario: r.as_dict() for r in faults.run(
        kills=1, writer_count=2, writer_items=20, items=40, searches=4, settle_seconds=2.0, model="hash",
        only=("sigkill", "writers", "corrupt", "fts", "disk"), log=lambda _m: None)}
    kill = rows["SIGKILL x 1 mid-ingest"]
    _consistent(kill)
    assert kill["acknowledged"] > 0 and kill["stored"] >= kill["acknowledged"]
    writers = rows["2 writers x 20 items"]
    _consistent(writers)
    assert writers["sent"] == writers["acknowledged"] == writers["stored"] == 40  # SQLite queues, nobody fails
    corrupt = rows["corrupted page"]
    _consistent(corrupt)
    assert corrupt["acknowledged"] == corrupt["stored"] == 0 and corrupt["refused"] == corrupt["sent"] == 20
    assert "health damaged" in corrupt["notes"]
    fts = rows["damaged keyword index"]
    _consistent(fts)
    assert fts["acknowledged"] == fts["stored"] and "0 failed" in fts["notes"]
    assert "answered by the semantic leg alone" in fts["notes"] and "repaired by the worker" in fts["notes"]
    disk = rows["3 MB disk fills"]
    if disk["held"] != "skipped":  # a 3 MB tmpfs needs the right to mount
        _consistent(disk)
        assert disk["acknowledged"] == disk["stored"] and disk["refused"] >= 5
        assert "0 pending, 0 failed" in disk["notes"]


def test_the_command_prints_a_markdown_table() -> None:
    done = subprocess.run([sys.executable, "-m", "memcairn", "bench", "faults", "--only", "writers", "--writers", "2",
                           "--writer-items", "5"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    header, rule, row = done.stdout.strip().splitlines()
    assert "acknowledged" in header and "lost" in header and rule.startswith("|--")
    assert "2 writers x 5 items" in row and row.rstrip().split("|")[-3].strip() == "yes"
