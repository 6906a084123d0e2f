"""Read audit: every read (search, context, timeline, a memory, projects, a stream) is recorded with the key,
the route, the projects and the result count, never the query or the content; `GET /v1/audit` gives an
unpinned admin key its tenant's log, newest first, paged and filtered. A real server on a real PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from pg_server_process import MEMCAIRN, RunningServer, running_server  # noqa: E402

from memcairn.pgstore import db  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
SECRET_QUERY = "zebra-crossing retry uploads"


def make_key(server: RunningServer, *args: str) -> dict[str, Any]:
    done = subprocess.run([MEMCAIRN, "server", "keys", "create", *args, "--database", server.database, "--json"],
                          env=server.env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def auth(key: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key['key']}"}


def test_reads_are_audited_without_their_content_and_admins_page_through_them(tmp_path: Path,
                                                                              pg_database: str) -> None:
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        url = server.url
        writer = make_key(server, "--tenant", "acme")
        reader = make_key(server, "--tenant", "acme", "--scope", "memories:read")
        admin = make_key(server, "--tenant", "acme", "--scope", "admin")
        pinned_admin = make_key(server, "--tenant", "acme", "--scope", "admin", "--project", "api")
        outsider = make_key(server, "--tenant", "other", "--scope", "admin")
        ids = {}
        for project, title in (("api", "Retry uploads with backoff"), ("web", "Retry uploads from the browser")):
            saved = httpx.post(f"{url}/v1/memories", headers=auth(writer), json={
                "project": project, "title": title, "text": "the confidential body of the memory"})
            assert saved.status_code == 201
            ids[project] = saved.json()["id"]
        started = datetime.now(UTC) - timedelta(seconds=5)

        found = httpx.get(f"{url}/v1/search", headers=auth(reader),
                          params={"query": SECRET_QUERY, "project": "api", "mode": "keyword"})
        assert found.status_code == 200 and len(found.json()["results"]) == 1
        everywhere = httpx.get(f"{url}/v1/search", headers=auth(reader), params={"query": "retry uploads",
                                                                                  "mode": "keyword"})
        assert len(everywhere.json()["results"]) == 2
        assert httpx.get(f"{url}/v1/context", headers=auth(reader), params={"project": "web"}).status_code == 200
        assert httpx.get(f"{url}/v1/memories/{ids['web']}", headers=auth(reader)).status_code == 200
        assert httpx.get(f"{url}/v1/timeline", headers=auth(reader), params={"anchor": ids["api"]}).status_code == 200
        assert httpx.get(f"{url}/v1/projects", headers=auth(reader)).status_code == 200

        page = httpx.get(f"{url}/v1/audit", headers=auth(admin), params={"key": reader["id"]})
        assert page.status_code == 200, page.text
        entries = page.json()["entries"]
        assert [e["action"] for e in entries] == ["read.projects", "read.timeline", "read.memory", "read.context",
                                                  "read.search", "read.search"]  # newest first
        assert all(e["key_id"] == reader["id"] and e["actor"] == f"key:{reader['id']}" for e in entries)
        by_action = {e["action"]: e for e in entries}  # the oldest of each kept: the first search
        assert by_action["read.search"] == {**by_action["read.search"], "route": "/v1/search",
                                            "projects": ["api"], "results": 1}
        assert entries[-2]["projects"] == ["api", "web"] and entries[-2]["results"] == 2  # where the hits were
        assert by_action["read.memory"]["projects"] == ["web"] and by_action["read.memory"]["item"] == str(ids["web"])
        assert by_action["read.context"]["projects"] == ["web"]
        assert all(e["request_id"] and datetime.fromisoformat(e["at"]) >= started for e in entries)
        # never the query or the content: not in the answer, nor in the table
        assert "zebra" not in page.text and "confidential" not in page.text
        with db.connect(pg_database) as conn:
            stored = conn.execute("SELECT string_agg(coalesce(target, ''), ' ') FROM audit_log").fetchone()[0]
        assert "zebra" not in stored and "confidential" not in stored and "read.search" not in stored

        # filters: a project's reads, every read, one action; writes are in the log too
        web = httpx.get(f"{url}/v1/audit", headers=auth(admin), params={"project": "web"}).json()["entries"]
        assert {e["action"] for e in web} == {"read.search", "read.context", "read.memory"}
        assert all("web" in e["projects"] for e in web)
        reads = httpx.get(f"{url}/v1/audit", headers=auth(admin), params={"action": "read"}).json()["entries"]
        assert {e["key_id"] for e in reads} == {reader["id"]}
        saves = httpx.get(f"{url}/v1/audit", headers=auth(admin), params={"key": writer["id"]}).json()["entries"]
        assert saves and all(not e["action"].startswith("read.") for e in saves)
        later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
        assert httpx.get(f"{url}/v1/audit", headers=auth(admin), params={"since": later}).json()["entries"] == []
        assert httpx.get(f"{url}/v1/audit", headers=auth(admin),
                         params={"until": started.isoformat(), "action": "read"}).json()["entries"] == []

        # pages: newest first, each continuing below the last id of the one before
        seen: list[int] = []
        before = None
        while True:
            answer = httpx.get(f"{url}/v1/audit", headers=auth(admin), params={
                "key": reader["id"], "limit": 4, **({"before": before} if before else {})}).json()
            seen += [e["id"] for e in answer["entries"]]
            before = answer["next_before"]
            if before is None:
                break
        assert seen == [e["id"] for e in entries] and seen == sorted(seen, reverse=True)

        # who may read it: an unpinned admin of the tenant only
        assert httpx.get(f"{url}/v1/audit", headers=auth(reader)).status_code == 403
        pinned = httpx.get(f"{url}/v1/audit", headers=auth(pinned_admin))
        assert pinned.status_code == 403 and "not pinned" in pinned.json()["detail"]
        theirs = httpx.get(f"{url}/v1/audit", headers=auth(outsider)).json()["entries"]
        assert all(e["key_id"] in (None, outsider["id"]) for e in theirs)
        bad = httpx.get(f"{url}/v1/audit", headers=auth(admin), params={"since": "last week"})
        assert bad.status_code == 400 and "ISO" in bad.json()["detail"]
        assert httpx.get(f"{url}/v1/audit", headers=auth(admin), params={"key": "x'; drop"}).status_code == 400
        assert "/v1/audit" in httpx.get(f"{url}/v1/openapi.json").json()["paths"]
