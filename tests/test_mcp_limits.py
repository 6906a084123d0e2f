"""``get_observations`` stays bounded whatever a record holds, ``ids`` may come as one text, and the session start
context's budget with many long project names; through the SDK's own client, as in ``test_mcp_server``."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import IDENTITY, MEMCAIRN, BatchClient, call_in_process, recorded, start_worker, worker_env

from memcairn.core.models import TEXT_FIELDS
from memcairn.mcp.records import MAX_DEPTH, MAX_ENTRIES, MAX_FIELD_CHARS, MAX_RECORDS_CHARS
from memcairn.mcp.server import WorkerGateway
from memcairn.mcp.tools import MAX_IDS, MemoryTools
from memcairn.wire.client import WorkerClient
from memcairn.wire.config import load_settings


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A home, a free port and the hash embedder; its worker stopped after (mcp_helpers.worker_env)."""
    yield from worker_env(isolated_home, monkeypatch)


@pytest.fixture
def worker(env: dict[str, str]) -> WorkerClient:
    return start_worker(env)


# Room for the cut markers and the answer's own notes past the records' characters.
SLACK = 3_000


def _observations(records: dict[int, dict[str, Any]], ids: Any) -> tuple[bool, str]:
    client = BatchClient(records)
    tools = MemoryTools(WorkerGateway(lambda: client), IDENTITY)  # type: ignore[arg-type, return-value]
    return anyio.run(call_in_process, tools, "get_observations", {"ids": ids})


# -- 1. every record is bounded ---------------------------------------------------------------------------
def test_a_record_with_thousands_of_short_facts_is_cut_to_a_bounded_list() -> None:
    """Each fact is short, so cutting long texts alone let 20,000 of them (~270,000 characters) through."""
    facts = [f"fact {i}" for i in range(20_000)]
    metadata = {f"key{i}": i for i in range(5_000)}
    records = {7: {"id": 7, "kind": "manual", "title": "many facts", "facts": facts, "metadata": metadata},
               8: {"id": 8, "kind": "manual", "title": "small", "text": "short"}}
    error, text = _observations(records, [7, 8])
    out = json.loads(text)
    assert not error and len(text) < 10_000, len(text)
    first = out["items"][0]
    assert first["facts"] == [*facts[:MAX_ENTRIES], f"… [cut: {20_000 - MAX_ENTRIES:,} more entries]"]
    assert list(first["metadata"])[:MAX_ENTRIES] == [f"key{i}" for i in range(MAX_ENTRIES)]
    assert first["metadata"]["…"] == f"[cut: {5_000 - MAX_ENTRIES:,} more keys]"
    assert out["items"][1] == records[8]  # the record after it is shown, whole
    assert out["truncated"] == [7] and "not_included" not in out
    assert f"lists past {MAX_ENTRIES} entries" in out["note"] and "`memcairn show 7 --json`" in out["note"]


def _enormous(item_id: int) -> dict[str, Any]:
    """As much as one record can hold: every text field full, long lists of long entries, a deep and wide
    metadata, and text JSON escapes six times over (``\\u0001``)."""
    record: dict[str, Any] = {"id": item_id, "kind": "summary", "project": "demo"}
    record |= {name: f"{name} " + "word " * 50_000 for name in TEXT_FIELDS}
    record["narrative"] = "\x01" * 250_000
    record |= {name: [f"{name} {i} " + "x" * 3_000 for i in range(5_000)]
               for name in ("facts", "concepts", "files_read", "files_modified")}
    nested: dict[str, Any] = {"leaf": "y" * 100_000}
    for level in range(50):
        nested = {f"level{level}": nested, "wide": ["z" * 2_000] * 500}
    record["metadata"] = nested
    return record


def test_the_first_record_is_bounded_and_the_note_says_how_to_read_it_whole() -> None:
    """The first record was always shown whole but for its long texts: ten text fields and four lists of
    256 KiB each could reach the agent at over a million characters."""
    records = {3: _enormous(3), 4: _enormous(4)}
    error, text = _observations(records, [3, 4])
    assert not error and len(text) < MAX_RECORDS_CHARS + SLACK, len(text)
    out = json.loads(text)
    first = out["items"][0]
    assert (first["id"], first["kind"], first["project"]) == (3, "summary", "demo")
    assert set(first) == set(records[3])  # every field is there, cut where marked
    assert first["title"].startswith("title word") and first["title"].endswith("more characters]")
    assert len(first["title"]) < MAX_FIELD_CHARS + 40
    assert first["narrative"].endswith("more characters]")
    assert out["truncated"] == [3] and out["not_included"] == [4]
    assert "`memcairn show 3 --json` prints one in full" in out["note"]
    assert "call get_observations again with the not_included ids" in out["note"]

    error, text = _observations(records, [4])  # the next call shows the next one, bounded the same way
    assert not error and len(text) < MAX_RECORDS_CHARS + SLACK and json.loads(text)["items"][0]["id"] == 4


def test_metadata_nested_past_the_depth_limit_is_marked_not_followed() -> None:
    nested: dict[str, Any] = {"leaf": 1}
    for _ in range(200):
        nested = {"down": nested}
    error, text = _observations({5: {"id": 5, "kind": "manual", "text": "t", "metadata": nested}}, [5])
    out = json.loads(text)
    assert not error and out["truncated"] == [5]
    inner = out["items"][0]["metadata"]
    for _ in range(MAX_DEPTH - 2):  # the record is level 0, its metadata level 1
        inner = inner["down"]
    assert inner["down"] == f"… [cut: nested deeper than {MAX_DEPTH} levels]"


async def _save_and_read(item_id: int) -> tuple[bool, str]:
    tools = MemoryTools(identity=IDENTITY)  # the real gateway: the worker of the ``worker`` fixture
    return await call_in_process(tools, "get_observations", {"ids": f"#{item_id}"})


def test_a_stored_record_with_thousands_of_facts_is_cut_and_memcairn_show_reads_it_whole(
        env: dict[str, str], worker: WorkerClient) -> None:
    """The real worker's record, and the way out the note names (``memcairn show <id> --json``) exists."""
    facts = [f"fact number {i}" for i in range(10_000)]
    saved = worker.post_json("/api/memory/save", {"project": "demo", "title": "many facts", "text": "facts below",
                                                  "facts": facts})
    error, text = anyio.run(_save_and_read, saved["id"])
    out = json.loads(text)
    assert not error and len(text) < 10_000, len(text)
    assert out["items"][0]["facts"][-1] == f"… [cut: {10_000 - MAX_ENTRIES:,} more entries]"
    command = f"memcairn show {saved['id']} --json"
    assert f"`{command}`" in out["note"]
    shown = subprocess.run([MEMCAIRN, *command.split()[1:]], env={**os.environ, **env}, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)[0]["facts"] == facts


# -- 2. ids given as one text -------------------------------------------------------------------------------
@pytest.mark.parametrize(("ids", "expected"), [
    ("12,15", [12, 15]),
    ("#12, #15", [12, 15]),
    ("12 15\n", [12, 15]),
    ("12; 15", [12, 15]),
    ("[12, 15]", [12, 15]),
    ("#12", [12]),
    (["12,15", 16], [12, 15, 16]),
    ("15, 12, 15", [15, 12]),
])
def test_ids_given_as_text_are_split_into_ids(ids: Any, expected: list[int]) -> None:
    error, _, sent = recorded("get_observations", {"ids": ids})
    assert not error and [(path, body["ids"]) for path, body in sent] == [("/api/observations/batch", expected)]


@pytest.mark.parametrize(("ids", "expected"), [
    ("12,abc", 'ids must be memory ids (whole numbers such as 12), got "abc"'),
    ("twelve", 'ids must be memory ids (whole numbers such as 12), got "twelve"'),
    ("12, 0", 'ids must be memory ids (whole numbers such as 12), got "0"'),
    ("12.5", 'ids must be memory ids (whole numbers such as 12), got "12.5"'),
    (" , ", "ids is required: call search first to find ids"),
    (",".join(map(str, range(1, MAX_IDS + 2))), f"at most {MAX_IDS} ids per call"),
])
def test_text_that_is_not_ids_is_still_refused_clearly(ids: str, expected: str) -> None:
    error, text, sent = recorded("get_observations", {"ids": ids})
    assert error and text.startswith(expected) and not sent, text


# -- 3. the session start context's budget ------------------------------------------------------------------
LONG_NAMES = [f"p{i:03d}-" + "n" * 75 for i in range(120)]  # 80 characters each: SCOPE_CHARS in memcairn.context.build


async def _context(arguments: dict[str, Any]) -> tuple[bool, str]:
    return await call_in_process(MemoryTools(identity=IDENTITY), "session_start_context", arguments)


def test_the_context_of_many_long_project_names_stays_within_its_budget(env: dict[str, str],
                                                                         worker: WorkerClient) -> None:
    """120 projects of 80 characters, none with a memory yet: the one line said "no memories yet for project
    p000-... (with p001-..., ...)" at about 9,900 characters, past the default 2,000-token (8,000-character)
    budget. The MCP server passes the worker's text through unchanged (the tool's own text, NO_CONTEXT, is
    only used for an empty answer)."""
    error, text = anyio.run(_context, {"project": ",".join(LONG_NAMES)})
    budget = load_settings().context_token_budget * 4
    assert not error
    assert len(text) <= budget, f"{len(text):,} characters for a budget of {budget:,}"
