"""The application role's time limits: a statement, a lock wait and an idle transaction end instead of holding a
request; a read behind a locked table is answered 503 within the lock timeout while other routes go on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from pg_server_process import running_server  # noqa: E402
from postgres_server import TEST_SECRET  # noqa: E402

from memcairn.core.errors import ConfigError  # noqa: E402
from memcairn.pgstore import db  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
LIMITS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")


def _app_limits(owner_dsn: str) -> dict[str, str]:
    with db.connect(db.app_conninfo(owner_dsn, TEST_SECRET)) as conn:
        return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in LIMITS}  # type: ignore[index]


def test_the_app_role_has_time_limits_and_they_can_be_changed(pg_database: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    db.prepare(pg_database, TEST_SECRET)
    assert _app_limits(pg_database) == {"statement_timeout": "15s", "lock_timeout": "2s",
                                        "idle_in_transaction_session_timeout": "1min"}
    monkeypatch.setenv("MEMCAIRN_PG_LOCK_TIMEOUT", "750ms")
    monkeypatch.setenv("MEMCAIRN_PG_STATEMENT_TIMEOUT", "1min")
    db.prepare(pg_database, TEST_SECRET)
    assert _app_limits(pg_database) == {"statement_timeout": "1min", "lock_timeout": "750ms",
                                        "idle_in_transaction_session_timeout": "1min"}
    monkeypatch.setenv("MEMCAIRN_PG_LOCK_TIMEOUT", "two seconds")
    with pytest.raises(ConfigError, match="MEMCAIRN_PG_LOCK_TIMEOUT='two seconds'.*such as 2s"):
        db.prepare(pg_database, TEST_SECRET)
    assert _app_limits(pg_database)["lock_timeout"] == "750ms"  # a bad value changes nothing


def test_a_read_behind_a_locked_table_fails_fast_and_health_is_unaffected(tmp_path: Path, pg_database: str) -> None:
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        headers = {"Authorization": f"Bearer {server.make_key()}"}
        saved = httpx.post(f"{server.url}/v1/memories", headers=headers,
                           json={"project": "api", "title": "Retry budget", "text": "three retries then give up"})
        assert saved.status_code == 201
        search = {"query": "retry budget", "project": "api", "mode": "keyword"}
        assert httpx.get(f"{server.url}/v1/search", params=search, headers=headers).status_code == 200

        locked, release = threading.Event(), threading.Event()

        def hold_lock() -> None:  # another connection holds the keys' table for 8 s
            with db.connect(pg_database) as conn, conn.transaction():
                conn.execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
                locked.set()
                release.wait(8)

        health: list[tuple[int, float]] = []

        def poll_health() -> None:
            with httpx.Client(timeout=10) as client:
                while not release.is_set():
                    start = time.monotonic()
                    status = client.get(f"{server.url}/v1/health").status_code
                    health.append((status, time.monotonic() - start))
                    time.sleep(0.05)

        holder = threading.Thread(target=hold_lock)
        holder.start()
        assert locked.wait(10)
        poller = threading.Thread(target=poll_health)
        poller.start()
        try:
            answers = []
            for method, path, kwargs in [("GET", "/v1/search", {"params": search}),
                                         ("GET", "/v1/context", {"params": {"project": "api"}}),
                                         ("POST", "/v1/memories", {"json": {"project": "api", "title": "t",
                                                                           "text": "written while locked"}})]:
                start = time.monotonic()
                answer = httpx.request(method, f"{server.url}{path}", headers=headers, timeout=30, **kwargs)
                answers.append((path, answer.status_code, answer.json().get("error"), time.monotonic() - start))
            still_locked = holder.is_alive()
        finally:
            release.set()
            holder.join()
            poller.join()
        for path, status, error, seconds in answers:
            assert seconds < 2 + 1.5, f"{path} took {seconds:.2f} s behind the lock (lock_timeout 2 s): {answers}"
            assert (status, error) == (503, "database_unavailable"), path
        assert still_locked
        assert health and all(status == 200 for status, _ in health)
        assert max(seconds for _, seconds in health) < 1.0, health
        # the lock gone, the same read is answered again
        assert httpx.get(f"{server.url}/v1/search", params=search, headers=headers).status_code == 200
