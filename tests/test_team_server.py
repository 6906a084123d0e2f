"""`memcairn server` end to end, as outside checks use it: a real `memcairn server --embedded` process on a
free loopback port with its data under MEMCAIRN_HOME, keys made with `memcairn server keys`, and the /v1 API
over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from team_server_cli import MEMCAIRN, cli, make_key, wait_ready  # noqa: E402

from memcairn.pgstore.embedded import EmbeddedPostgres, free_port  # noqa: E402
from memcairn.pgstore.secret import load_or_create_password  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_the_outside_check_interface_end_to_end(tmp_path: Path) -> None:
    home = tmp_path / "home"
    acme = make_key(home, "--tenant", "acme")  # before the server ever ran: the CLI starts the cluster itself
    assert acme["key"].startswith("mck_") and set(acme) >= {"id", "key"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        server = subprocess.Popen([MEMCAIRN, "server", "--embedded", "--port", str(port)],
                                  env={**os.environ, "MEMCAIRN_HOME": str(home)}, stdout=sink, stderr=sink)
    try:
        # a key made while the server is still starting: the command waits for the server's cluster or goes
        # first, and never stops the cluster under the server
        other = make_key(home, "--tenant", "other", "--scope", "memories:read,memories:write")
        wait_ready(url, server, log)
        reader = make_key(home, "--tenant", "acme", "--scope", "memories:read")
        pinned = make_key(home, "--tenant", "acme", "--project", "web")

        def auth(key: dict[str, str]) -> dict[str, str]:
            return {"Authorization": f"Bearer {key['key']}"}

        memory = {"project": "api", "title": "Retry uploads with exponential backoff",
                  "text": "The S3 client retries failed uploads, doubling the wait each time"}
        saved = httpx.post(f"{url}/v1/memories", json=memory, headers=auth(acme))
        assert saved.status_code == 201, saved.text
        item_id = saved.json()["id"]
        again = httpx.post(f"{url}/v1/memories", json=memory, headers=auth(acme))
        assert again.status_code == 200 and again.json() == {"id": item_id, "created": False}

        found = httpx.get(f"{url}/v1/search", params={"query": "retry uploads backoff", "project": "api"},
                          headers=auth(acme)).json()["results"]
        assert found[0]["id"] == item_id and found[0]["title"] == memory["title"]
        assert httpx.get(f"{url}/v1/memories/{item_id}", headers=auth(reader)).json()["text"] == memory["text"]
        context = httpx.get(f"{url}/v1/context", params={"project": "api"}, headers=auth(acme)).json()
        assert memory["title"] in context["context"] and context["context"].startswith("<memcairn-memory")

        # another tenant never sees it, whatever it asks
        assert httpx.get(f"{url}/v1/search", params={"query": "retry uploads backoff", "project": "api"},
                         headers=auth(other)).json()["results"] == []
        assert httpx.get(f"{url}/v1/search", params={"query": "retry uploads backoff"},
                         headers=auth(other)).json()["results"] == []
        assert httpx.get(f"{url}/v1/memories/{item_id}", headers=auth(other)).status_code == 404
        assert httpx.delete(f"{url}/v1/memories/{item_id}", headers=auth(other)).status_code == 404
        assert httpx.get(f"{url}/v1/projects", headers=auth(other)).json()["projects"] == []
        # the change feed (server-sent events) of each tenant holds its own memories only
        def first_change(key: dict[str, str]) -> dict[str, object]:
            with httpx.stream("GET", f"{url}/v1/stream", params={"after": 0}, headers=auth(key), timeout=60) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        return json.loads(line[len("data: "):])
            raise AssertionError("the stream ended")

        theirs = httpx.post(f"{url}/v1/memories", json={**memory, "title": "their own"}, headers=auth(other))
        assert first_change(acme)["id"] == item_id and first_change(acme)["op"] == "stored"
        assert first_change(other)["id"] == theirs.json()["id"]
        # nor does a key pinned to another project of the same tenant
        assert httpx.get(f"{url}/v1/memories/{item_id}", headers=auth(pinned)).status_code == 404
        assert httpx.post(f"{url}/v1/memories", json=memory, headers=auth(pinned)).status_code == 403
        # scopes, missing and broken keys
        assert httpx.post(f"{url}/v1/memories", json=memory, headers=auth(reader)).status_code == 403
        assert httpx.get(f"{url}/v1/search", params={"query": "retry"}).status_code == 401
        assert httpx.get(f"{url}/v1/search", params={"query": "retry"},
                         headers={"Authorization": "Bearer mck_000000000000_" + "x" * 43}).status_code == 401
        bad = httpx.post(f"{url}/v1/memories", content=b"{not json", headers=auth(acme))
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_json"
        assert httpx.get(f"{url}/v1/openapi.json").json()["openapi"].startswith("3.")

        # revoked while the server runs: refused from the next request on
        done = cli(home, "server", "keys", "revoke", acme["id"])
        assert done.returncode == 0, done.stderr
        refused = httpx.get(f"{url}/v1/search", params={"query": "retry", "project": "api"}, headers=auth(acme))
        assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
        listed = {k["id"]: k for k in json.loads(cli(home, "server", "keys", "list", "--json").stdout)}
        assert listed[acme["id"]]["status"] == "revoked" and listed[acme["id"]]["last_used_at"]
        assert listed[other["id"]]["tenant"] == "other"

        # a batch of events is answered once queued, before it is stored or embedded; killed outright right
        # after it, the server leaves its PostgreSQL running and the batch queued or stored but unembedded; a new
        # one (two worker processes, whose consumers share the queue and one of which leads the embedding) takes
        # it over, the data intact, stores what was queued and embeds the rest of the backlog, each once
        batch = [{"project": "ops", "title": f"Rotate the on-call pager {n}", "text": f"handover note {n}"}
                 for n in range(40)]
        posted = httpx.post(f"{url}/v1/events", json={"events": batch}, headers=auth(other))
        assert posted.status_code == 202, posted.text  # queued: the consumer may not have stored it yet
        server.kill()
        server.wait(timeout=60)
        with log.open("ab") as sink:
            server = subprocess.Popen([MEMCAIRN, "server", "--embedded", "--port", str(port), "--workers", "2"],
                                      env={**os.environ, "MEMCAIRN_HOME": str(home)}, stdout=sink, stderr=sink)
        wait_ready(url, server, log)
        assert httpx.get(f"{url}/v1/memories/{item_id}", headers=auth(reader)).json()["title"] == memory["title"]
        for _ in range(600):  # a wait for the queue and the backlog to drain, not a timed assertion
            health = httpx.get(f"{url}/v1/health").json()
            if health["ingest"]["pending"] == 0 and health["embedding"]["pending"] == 0:
                break
            time.sleep(0.1)
        assert health["embedding"] == {"pending": 0, "oldest_pending_seconds": 0, "tenants_waiting": 0,
                                       "largest_tenant_pending": 0, "oldest_tenant_wait_seconds": 0.0}
        assert health["ingest"] == {"pending": 0, "oldest_pending_seconds": 0, "failed": 0}
        ops = [p for p in httpx.get(f"{url}/v1/projects", headers=auth(other)).json()["projects"]
               if p["name"] == "ops"]
        assert ops[0]["items"] == len(batch)  # nothing stored twice
        semantic = httpx.get(f"{url}/v1/search", params={"query": "rotating the on-call pager at handover",
                                                         "project": "ops", "mode": "semantic", "limit": 50},
                             headers=auth(other)).json()["results"]
        assert semantic and all(h["title"].startswith("Rotate the on-call pager") for h in semantic)
        assert httpx.get(f"{url}/v1/search", params={"query": "pager", "mode": "semantic"},
                         headers=auth(reader)).json()["results"] == []  # acme's reader: none of other's vectors
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    assert code == 0, log.read_text(errors="replace")
    cluster = EmbeddedPostgres(home / "postgres", password=load_or_create_password(home, "postgres-password"))
    assert cluster.info().get("running") is False  # the server stopped the PostgreSQL it ran on
    if (home / "postgres").is_symlink():  # the cluster was kept where its user can reach it: remove it too
        shutil.rmtree((home / "postgres").resolve(), ignore_errors=True)


def test_the_server_says_how_to_choose_a_database(tmp_path: Path) -> None:
    done = cli(tmp_path / "home", "server")
    assert done.returncode != 0 and "--embedded" in done.stderr
    done = cli(tmp_path / "home", "server", "keys", "create", "--tenant", "acme", "--scope", "memories:delete",
               "--database", "postgresql://nobody@127.0.0.1:1/none")
    assert done.returncode == 2 and "unknown scope memories:delete" in done.stderr
    # a --database given before `keys` is the one the keys command uses (no embedded cluster is made)
    done = cli(tmp_path / "home", "server", "--database", "postgresql://nobody@127.0.0.1:1/none", "keys", "list")
    assert done.returncode == 2 and "127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "home" / "postgres").exists()


def test_the_server_on_an_existing_postgresql(tmp_path: Path, pg_database: str) -> None:
    """`memcairn server --database URL` (and `keys --database URL`) on a PostgreSQL it did not start."""
    from postgres_server import TEST_SECRET

    home = tmp_path / "home"
    (home / "server").mkdir(parents=True, mode=0o700)
    # memcairn_app is one role of the whole cluster: this home derives the same password as the other tests'
    (home / "server" / "secret").write_text(TEST_SECRET.hex() + "\n")
    made = make_key(home, "--tenant", "acme", "--database", pg_database)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        server = subprocess.Popen([MEMCAIRN, "server", "--database", pg_database, "--port", str(port)],
                                  env={**os.environ, "MEMCAIRN_HOME": str(home)}, stdout=sink, stderr=sink)
    try:
        wait_ready(url, server, log)
        headers = {"Authorization": f"Bearer {made['key']}"}
        saved = httpx.post(f"{url}/v1/memories", json={"project": "api", "title": "Use pgbouncer in transaction mode",
                                                       "text": "the tenant is set per transaction"}, headers=headers)
        assert saved.status_code == 201
        hits = httpx.get(f"{url}/v1/search", params={"query": "pgbouncer", "project": "api"}, headers=headers)
        assert [h["id"] for h in hits.json()["results"]] == [saved.json()["id"]]
        # keyword mode finds a word of an identifier or a path, as the local store does
        path = httpx.post(f"{url}/v1/memories", json={"project": "api", "title": "Wrote the retry module",
                                                      "text": "created /work/api/retry_module_3.py"}, headers=headers)
        hits = httpx.get(f"{url}/v1/search", params={"query": "retry_module_3", "project": "api", "mode": "keyword"},
                         headers=headers)
        assert [h["id"] for h in hits.json()["results"]] == [path.json()["id"]]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, log.read_text(errors="replace")
    assert not (home / "postgres").exists()  # nothing embedded was started
