"""The team server refuses numbers JSON cannot carry by name (400, not a 500 from jsonb), and a queued job that
cannot be stored (a number that overflows when read back) is set aside alone: the other jobs are stored.
In process on a real PostgreSQL, as the other /v1 tests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from postgres_server import TEST_SECRET, hold
from starlette.testclient import TestClient

from memcairn.core.models import NewItem
from memcairn.pgstore import db, keys
from memcairn.pgstore.items import TeamStore
from memcairn.server import queue as ingest
from memcairn.server.app import ServerState, make_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def server(pg_database: str, team: TeamStore) -> Iterator[tuple[TestClient, dict[str, str], int]]:
    with db.connect(pg_database) as conn:
        made = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read", "memories:write"])
        tenant_id = conn.execute("SELECT id FROM tenants WHERE name = 'acme'").fetchone()[0]
    hold(tenant_id, made["key"])  # the test enqueues for the tenant as a request holding its key would
    with TestClient(make_app(ServerState(pool=team.pool, team=team, secret=TEST_SECRET))) as client:
        yield client, {"Authorization": f"Bearer {made['key']}", "Content-Type": "application/json"}, tenant_id


def hook_event(n: int) -> dict[str, object]:
    return {"project": "api", "session": "s1", "platform": "claude-code", "event": "tool_use", "tool_name": "Bash",
            "tool_use_id": f"call-{n}", "tool_input": {"command": f"pytest tests/test_{n}.py", "timeout": 600},
            "tool_response": {"stdout": f"{n} passed in 0.2s", "stderr": ""}}


@pytest.mark.parametrize("number", ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "7E+400"])
def test_events_with_a_number_json_cannot_carry_are_refused_by_name(server, number: str) -> None:
    client, headers, _ = server
    first = hook_event(1)
    first["tool_input"] = {"command": "pytest", "timeout": "POISON"}
    poisoned = json.dumps({"events": [first, hook_event(2)]}).replace('"POISON"', f'[1, {{"after": {number}}}]')
    body = json.dumps({"events": [hook_event(1), hook_event(2)]})
    answer = client.post("/v1/events", content=poisoned, headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_json"
    assert f"the number {number} at events[0].tool_input.timeout[1].after" in answer.json()["detail"]
    saved = client.post("/v1/memories", content=f'{{"project": "api", "text": "x", "n": {number}}}', headers=headers)
    assert saved.status_code == 400 and f"the number {number} at n" in saved.json()["detail"]
    assert client.post("/v1/events", content=body, headers=headers).status_code == 202  # the door stays open


def test_a_job_that_cannot_be_stored_is_set_aside_and_the_others_stored(server, pg_database: str,
                                                                      team: TeamStore) -> None:
    """A queue row the consumer cannot read (a hook event whose body is no object: an AttributeError, which no
    handler expected) must fail alone, with its reason, not keep the batch queued for ever."""
    client, headers, tenant_id = server
    with db.connect(pg_database) as conn:
        conn.execute("INSERT INTO ingest_queue (tenant_id, payload) VALUES (%s, %s::jsonb)",
                     (tenant_id, '{"hook": {"event": "tool_use", "project": "api", "session": "s1", "platform": '
                                 '"claude-code", "body": "no object"}, "hash": "x", "epoch": 1}'))
        conn.execute("INSERT INTO ingest_jobs (queue_id, tenant_id) SELECT max(id), %s FROM ingest_queue",
                     (tenant_id,))
        conn.commit()
    good = [NewItem(project="api", kind="manual", title=f"note {n}", text=f"healthy note {n}") for n in range(3)]
    ingest.enqueue(team.pool, tenant_id, good)
    settled = ingest.drain(team)
    assert settled == 4
    with db.connect(pg_database) as conn:
        titles = sorted(r[0] for r in conn.execute("SELECT title FROM items"))
        failed = conn.execute("SELECT error FROM ingest_jobs WHERE failed_at IS NOT NULL").fetchall()
    assert titles == ["note 0", "note 1", "note 2"]
    assert len(failed) == 1 and "AttributeError" in failed[0][0]
    health = client.get("/v1/health").json()
    assert health["ingest"]["failed"] == 1 and health["ingest"]["pending"] == 0


def test_the_jsonb_payload_never_holds_an_infinity(pg_database: str, team: TeamStore) -> None:
    from memcairn.capture.single_event import HookEvent
    from memcairn.core.errors import ValidationError

    with db.connect(pg_database) as conn:
        keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:write"])
        tenant_id = conn.execute("SELECT id FROM tenants WHERE name = 'acme'").fetchone()[0]
    body = dict(hook_event(1))
    body["tool_input"] = {"command": "pytest", "ratio": float("inf")}
    event = HookEvent("tool_use", "api", "s1", "claude-code", body, 0)
    with pytest.raises(ValidationError, match="tool_input.ratio"):
        ingest.enqueue(team.pool, tenant_id, [event])
