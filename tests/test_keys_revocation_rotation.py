"""Keys in production: an open change feed stops at its key's revocation (or expiry), and a rotation may leave
the old key working for an overlap window. A real `memcairn server --database URL` process, keys made and
changed with `memcairn server keys`."""

from __future__ import annotations

import json
import subprocess
import threading
import time
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


def keys_cli(server: RunningServer, *args: str) -> Any:
    as_json = () if args[0] == "revoke" else ("--json",)
    done = subprocess.run([MEMCAIRN, "server", "keys", *args, "--database", server.database, *as_json],
                          env=server.env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if as_json else None


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Feed:
    """An open /v1/stream read on a thread: the memory events it delivered (with when) and how it ended."""

    def __init__(self, url: str, key: str) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.errors: list[dict[str, Any]] = []
        self.ended = threading.Event()
        self.first = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url, key), daemon=True)
        self._thread.start()

    def _read(self, url: str, key: str) -> None:
        kind = None
        try:
            with httpx.stream("GET", f"{url}/v1/stream", headers=auth(key),
                              timeout=httpx.Timeout(5.0, read=30.0)) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        kind = line[len("event: "):]
                    elif line.startswith("data: "):
                        data = json.loads(line[len("data: "):])
                        (self.events.append((time.monotonic(), data)) if kind == "memory"
                         else self.errors.append(data))
                        self.first.set()
        except httpx.ReadTimeout:
            pass
        finally:
            self.ended.set()


def save(server: RunningServer, key: str, title: str) -> None:
    saved = httpx.post(f"{server.url}/v1/memories", headers=auth(key),
                       json={"project": "api", "title": title, "text": f"{title}, as decided"})
    assert saved.status_code == 201, saved.text


def test_a_revoked_keys_open_stream_delivers_nothing_more_and_ends(tmp_path: Path, pg_database: str) -> None:
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        reader = keys_cli(server, "create", "--tenant", "acme", "--scope", "memories:read")
        writer = keys_cli(server, "create", "--tenant", "acme")
        feed = Feed(server.url, reader["key"])
        time.sleep(1.5)  # the feed starts from now
        save(server, writer["key"], "Before the revocation")
        assert feed.first.wait(20), "the stream delivered nothing"
        assert [e["op"] for _, e in feed.events] == ["stored"]

        keys_cli(server, "revoke", reader["id"])
        revoked_at = time.monotonic()
        for n in range(3):
            save(server, writer["key"], f"After the revocation {n}")
        assert feed.ended.wait(20), "the stream of a revoked key stayed open"
        after = [e for at, e in feed.events if at >= revoked_at]
        print(f"events delivered after revocation: {len(after)} of 3")
        assert after == []
        assert feed.errors and feed.errors[-1]["error"] == "unauthorized"
        assert "revoked" in feed.errors[-1]["detail"]


def test_an_idle_stream_ends_within_seconds_of_its_keys_revocation(tmp_path: Path, pg_database: str) -> None:
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        reader = keys_cli(server, "create", "--tenant", "acme", "--scope", "memories:read")
        feed = Feed(server.url, reader["key"])
        time.sleep(1.5)
        keys_cli(server, "revoke", reader["id"])
        revoked_at = time.monotonic()
        assert feed.ended.wait(20)
        took = time.monotonic() - revoked_at
        print(f"idle stream ended {took:.2f} s after the revocation")
        assert took < 5 and feed.errors and "revoked" in feed.errors[-1]["detail"]


def test_rotation_with_grace_keeps_the_old_key_until_it_ends(tmp_path: Path, pg_database: str) -> None:
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        old = keys_cli(server, "create", "--tenant", "acme")
        writer = keys_cli(server, "create", "--tenant", "acme")
        search = {"query": "anything", "project": "api"}
        new = keys_cli(server, "rotate", old["id"], "--grace", "24h")
        assert new["replaces"] == old["id"] and new["key"] != old["key"]
        until = datetime.fromisoformat(new["replaced_works_until"])
        assert abs(until - (datetime.now(UTC) + timedelta(hours=24))) < timedelta(minutes=5)
        for key in (old["key"], new["key"]):  # both work during the overlap
            assert httpx.get(f"{server.url}/v1/search", params=search, headers=auth(key)).status_code == 200
        listed = {k["id"]: k for k in keys_cli(server, "list")}
        assert listed[old["id"]]["status"] == "active" and listed[old["id"]]["replaced_by"] == new["id"]
        assert listed[old["id"]]["expires_at"] == new["replaced_works_until"]

        # the overlap ends (the clock moved on): the old key is refused, and its open stream ends with it
        feed = Feed(server.url, old["key"])
        time.sleep(1.5)
        with db.connect(pg_database) as conn:
            conn.execute("UPDATE api_keys SET expires_at = now() WHERE id = %s", (old["id"],))
        save(server, writer["key"], "After the overlap")
        assert feed.ended.wait(20) and feed.events == []
        assert "expired" in feed.errors[-1]["detail"]
        refused = httpx.get(f"{server.url}/v1/search", params=search, headers=auth(old["key"]))
        assert refused.status_code == 401 and "expired" in refused.json()["detail"]
        assert httpx.get(f"{server.url}/v1/search", params=search, headers=auth(new["key"])).status_code == 200

        # over HTTP, by an admin key; and the default grace 0 revokes at once, as before
        admin = keys_cli(server, "create", "--tenant", "acme", "--scope", "admin")
        rotated = httpx.post(f"{server.url}/v1/keys/{new['id']}/rotate", json={"grace": "90m"},
                             headers=auth(admin["key"]))
        assert rotated.status_code == 200 and rotated.json()["replaced_works_until"]
        assert httpx.get(f"{server.url}/v1/search", params=search, headers=auth(new["key"])).status_code == 200
        bad = httpx.post(f"{server.url}/v1/keys/{new['id']}/rotate", json={"grace": "a day"},
                         headers=auth(admin["key"]))
        assert bad.status_code == 400 and "24h" in bad.json()["detail"]
        latest = keys_cli(server, "rotate", rotated.json()["id"])
        assert latest["replaced_works_until"] is None
        gone = httpx.get(f"{server.url}/v1/search", params=search, headers=auth(rotated.json()["key"]))
        assert gone.status_code == 401 and "revoked" in gone.json()["detail"]
