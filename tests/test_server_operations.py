"""The team server's operations routes on a real PostgreSQL, in process: ``/v1/ready`` (database reachable,
migrations current), Prometheus ``/metrics`` (who may scrape, what it counts, no tenant content) and the JSON
access log line per request."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from postgres_server import TEST_SECRET
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from starlette.testclient import TestClient

from memcairn.pgstore import db, keys
from memcairn.pgstore.embedded import free_port
from memcairn.pgstore.items import TeamStore
from memcairn.pgstore.schema import LATEST
from memcairn.server.app import ServerState, make_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
LOOPBACK = ("127.0.0.1", 40123)
ELSEWHERE = ("192.0.2.7", 40123)
SECRET_TITLE = "zebra migration runbook for the billing cluster"


@pytest.fixture
def server(pg_database: str) -> Iterator[dict[str, Any]]:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=4)
    team = TeamStore(pool, None)
    with db.connect(pg_database) as conn:
        acme = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read", "memories:write", "admin"])
        other = keys.create_key(conn, TEST_SECRET, "other", scopes=["memories:read", "memories:write"])
        tenants = dict(conn.execute("SELECT name, id FROM tenants").fetchall())
    state = ServerState(pool=pool, team=team, secret=TEST_SECRET)
    yield {"state": state, "dsn": pg_database, "acme": acme["key"], "other": other["key"], "tenants": tenants}
    pool.close()


def client(state: ServerState, peer: tuple[str, int] = LOOPBACK) -> TestClient:
    return TestClient(make_app(state), client=peer)


def app_role(server: dict[str, Any]) -> sql.Identifier:
    """The role the server's pool connects as."""
    return sql.Identifier(conninfo_to_dict(server["state"].pool.dsn)["user"])


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page, by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_ready_answers_200_when_migrations_are_current_and_503_with_the_reason_otherwise(server) -> None:
    with db.connect(server["dsn"]) as conn:  # as this version's migrations grant it (a no-op where they did)
        conn.execute(sql.SQL("GRANT SELECT ON schema_migrations TO {}").format(app_role(server)))
    with client(server["state"]) as c:
        answer = c.get("/v1/ready")
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"status": "ready", "schema_version": LATEST}
        with db.connect(server["dsn"]) as conn:  # as an older schema: the newest migration not applied
            conn.execute("DELETE FROM schema_migrations WHERE version = %s", (LATEST,))
        behind = c.get("/v1/ready")
        assert behind.status_code == 503
        assert behind.json()["status"] == "not_ready" and f"migrations {LATEST} are not applied" in \
            behind.json()["reason"]
        with db.connect(server["dsn"]) as conn:  # newer than this code knows
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, 'x'), (%s, 'future')",
                         (LATEST, LATEST + 1))
        ahead = c.get("/v1/ready")
        assert ahead.status_code == 503 and "upgrade memcairn" in ahead.json()["reason"]


def test_ready_without_read_access_to_the_migrations_record_says_they_are_unchecked(server) -> None:
    with db.connect(server["dsn"]) as conn:
        conn.execute(sql.SQL("REVOKE SELECT ON schema_migrations FROM {}").format(app_role(server)))
    with client(server["state"]) as c:
        answer = c.get("/v1/ready")
    assert answer.status_code == 200, answer.text
    assert answer.json()["schema_version"] is None and "migrations unchecked" in answer.json()["note"]


def test_ready_answers_503_when_the_database_cannot_be_reached(server) -> None:
    nowhere = db.Pool(f"host=127.0.0.1 port={free_port()} dbname=x user=x password=x connect_timeout=2", size=2)
    state = ServerState(pool=nowhere, team=TeamStore(nowhere, None), secret=TEST_SECRET)
    with client(state) as c:
        answer = c.get("/v1/ready")
        page = c.get("/metrics")  # still scraped: the database is down, not the metrics
    assert answer.status_code == 503
    assert answer.json()["status"] == "not_ready" and "cannot be reached" in answer.json()["reason"]
    assert page.status_code == 200 and samples(page.text)[("memcairn_database_up", ())] == 0


def test_metrics_count_requests_queues_and_backlog_per_tenant_and_the_pool(server) -> None:
    acme, other = server["tenants"]["acme"], server["tenants"]["other"]
    with client(server["state"]) as c:
        for n in range(3):
            saved = c.post("/v1/memories", json={"project": "api", "title": f"{SECRET_TITLE} {n}", "text": "t"},
                           headers=auth(server["acme"]))
            assert saved.status_code == 201, saved.text
        assert c.get("/v1/memories/999999", headers=auth(server["acme"])).status_code == 404
        queued = c.post("/v1/events", json={"events": [{"project": "web", "title": SECRET_TITLE, "text": "x"}] * 2},
                        headers=auth(server["other"]))
        assert queued.status_code == 202, queued.text
        for n in range(3):  # methods a client made up: one series, not one each
            assert c.request(f"BREW{n}", "/v1/health").status_code == 405
        page = c.get("/metrics")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    assert "BREW" not in page.text
    assert "zebra" not in page.text and "billing" not in page.text and "api" not in page.text  # counts only
    got = samples(page.text)
    assert got[("memcairn_http_requests_total",
                (("method", "POST"), ("route", "/v1/memories"), ("status", "201")))] == 3
    assert got[("memcairn_http_requests_total",
                (("method", "GET"), ("route", "/v1/memories/{item_id}"), ("status", "404")))] == 1
    assert got[("memcairn_http_request_duration_seconds_count",
                (("method", "POST"), ("route", "/v1/memories")))] == 3
    assert got[("memcairn_http_requests_total",
                (("method", "OTHER"), ("route", "/v1/health"), ("status", "405")))] == 3
    assert got[("memcairn_embedding_backlog", (("tenant", str(acme)),))] == 3  # no embedding task runs here
    assert ("memcairn_embedding_backlog", (("tenant", str(other)),)) not in got
    assert got[("memcairn_ingest_queue_depth", (("tenant", str(other)),))] == 2  # no consumer runs here
    assert got[("memcairn_ingest_queue_oldest_seconds", (("tenant", str(other)),))] >= 0
    assert got[("memcairn_pool_connections", (("state", "size"),))] == 4
    assert got[("memcairn_pool_connections", (("state", "in_use"),))] == 0  # the scrape's own is back
    assert got[("memcairn_pool_connections", (("state", "idle"),))] >= 1
    assert got[("memcairn_database_up", ())] == 1


def test_metrics_are_served_to_loopback_or_the_metrics_token_only(server, monkeypatch) -> None:
    with client(server["state"], ELSEWHERE) as c:
        refused = c.get("/metrics")
        assert refused.status_code == 403 and "MEMCAIRN_SERVER_METRICS_TOKEN" in refused.json()["detail"]
        assert c.get("/metrics", headers=auth(server["acme"])).status_code == 403  # a tenant's admin key is not it
    with client(server["state"]) as c:  # loopback, but through a proxy
        assert c.get("/metrics", headers={"X-Forwarded-For": "198.51.100.4"}).status_code == 403
    monkeypatch.setenv("MEMCAIRN_SERVER_METRICS_TOKEN", "scrape-me-7f3a")
    state = ServerState(pool=server["state"].pool, team=server["state"].team, secret=TEST_SECRET)
    with client(state, ELSEWHERE) as c:
        assert c.get("/metrics", headers=auth("scrape-me-7f3a")).status_code == 200
        assert c.get("/metrics", headers=auth("scrape-me-7f3b")).status_code == 403
    monkeypatch.setenv("MEMCAIRN_SERVER_METRICS", "off")
    state = ServerState(pool=server["state"].pool, team=server["state"].team, secret=TEST_SECRET)
    with client(state) as c:
        assert c.get("/metrics").status_code == 404


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_one_json_access_line_per_request_with_the_route_template(server) -> None:
    lines = Lines()
    logger = logging.getLogger("memcairn.server.access")
    with client(server["state"]) as c:
        logger.addHandler(lines)
        try:
            c.get("/v1/memories/424242", headers={**auth(server["acme"]), "X-Request-Id": "trace-1"})
            c.get("/v1/search", params={"query": "zebra"}, headers={"Authorization": "Bearer mck_nope"})
            c.get("/v1/no/such/route")
            c.get("/v1/health")
        finally:
            logger.removeHandler(lines)
    records = [json.loads(line) for line in lines.lines]
    assert len(records) == 4
    first, second, third, fourth = records
    assert {k: first[k] for k in ("request_id", "tenant_id", "method", "route", "status")} == {
        "request_id": "trace-1", "tenant_id": server["tenants"]["acme"], "method": "GET",
        "route": "/v1/memories/{item_id}", "status": 404}
    assert isinstance(first["ms"], float) and first["ms"] >= 0
    assert "424242" not in lines.lines[0]  # the template, not the raw path
    assert second["route"] == "/v1/search" and second["status"] == 401 and second["tenant_id"] is None
    assert third["route"] == "unmatched" and third["status"] == 404 and third["request_id"]
    assert fourth["route"] == "/v1/health" and fourth["status"] == 200
