"""Connections PostgreSQL ended (``pg_terminate_backend``, a restart, an idle timeout) are not handed to a request:
the pool checks a connection before it lends it, and a read whose connection died under it is run once more with a
new one (on the event loop: on a thread; on a thread: there again)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from pg_server_process import running_server  # noqa: E402
from postgres_server import TEST_SECRET  # noqa: E402
from postgres_server import tenant as new_tenant  # noqa: E402

from memcairn.core.errors import WouldWait  # noqa: E402
from memcairn.pgstore import db  # noqa: E402
from memcairn.pgstore.waits import no_waiting  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
APP_BACKENDS = ("SELECT pid FROM pg_stat_activity WHERE usename = (SELECT name FROM app_role)"
                " AND datname = current_database() AND backend_type = 'client backend'")
# the embedding leader's own connection, which holds its advisory lock, is no pooled one
POOLED = " AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')"


def _terminate(owner_dsn: str, count: int, *, pooled_only: bool = False) -> int:
    """End ``count`` of the application role's backends; how many were ended."""
    which = APP_BACKENDS + (POOLED if pooled_only else "")
    with db.connect(owner_dsn) as conn:
        return len(conn.execute(f"SELECT pg_terminate_backend(pid) FROM ({which} LIMIT %s) AS b", (count,)).fetchall())


def test_the_pool_lends_no_connection_postgresql_ended(pg_database: str) -> None:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=2)  # the two ended below
    try:
        with pool.connection() as first, pool.connection() as second:
            before = {first.info.backend_pid, second.info.backend_pid}
        assert _terminate(pg_database, 2) == 2
        with db.connect(pg_database) as conn:  # pg_terminate_backend only signals: wait until both have exited
            while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                               (list(before),)).fetchone() != (0,):
                time.sleep(0.01)
        # on the event loop only a connection open now is lent: both ended, so none is (as for a busy pool)
        with pytest.raises(WouldWait), no_waiting(), pool.connection():
            pass
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert conn.info.backend_pid not in before
    finally:
        pool.close()


def _end_own_backend(pg_database: str, conn: object) -> None:
    with db.connect(pg_database) as owner:
        owner.execute("SELECT pg_terminate_backend(%s, 5000)", (conn.info.backend_pid,))  # type: ignore[attr-defined]


def test_a_read_whose_connection_dies_under_it_runs_again(pg_database: str) -> None:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=2)
    tenant = new_tenant(pg_database)
    attempts: list[int] = []

    def read(cur: object) -> int:
        attempts.append(cur.connection.info.backend_pid)  # type: ignore[attr-defined]
        if len(attempts) == 1:
            _end_own_backend(pg_database, cur.connection)  # type: ignore[attr-defined]
        return int(cur.execute("SELECT 41 + 1").fetchone()[0])  # type: ignore[attr-defined]

    try:
        assert db.read_as(pool, tenant, read) == 42
        assert len(attempts) == 2 and attempts[0] != attempts[1]
        # on the event loop the pool says "run it again on a thread" instead of failing the read
        with pytest.raises(WouldWait), no_waiting(), pool.connection() as conn:
            _end_own_backend(pg_database, conn)
            conn.execute("SELECT 1")
    finally:
        pool.close()


def test_no_request_fails_when_backends_are_terminated(tmp_path: Path, pg_database: str) -> None:
    """A stream of 120 reads (search, timeline, context) from 5 clients in 8 rounds; after each of the first 7
    rounds one of the server's pooled backends is ended while it waits for the next request. (Backends ended in
    the middle of a read: ``test_no_read_fails_when_backends_are_killed_in_the_middle_of_reads``.)"""
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        headers = {"Authorization": f"Bearer {server.make_key()}"}
        ids = []
        for n in range(12):
            saved = httpx.post(f"{server.url}/v1/memories", headers=headers,
                               json={"project": "api", "title": f"Decision {n} about retries",
                                     "text": f"retry budget number {n}: back off and give up after {n} tries"})
            assert saved.status_code == 201
            ids.append(saved.json()["id"])
        requests = [("/v1/search", {"query": "retry budget", "project": "api", "mode": "keyword"}),
                    ("/v1/search", {"query": "when to give up", "project": "api"}),
                    ("/v1/timeline", {"anchor": str(ids[5]), "project": "api"}),
                    ("/v1/context", {"project": "api"})]
        results: Counter[int] = Counter()
        failures: list[str] = []
        lock = threading.Lock()
        killed: list[int] = []

        def kill_one() -> None:  # run by the barrier between two rounds, every client waiting
            if len(killed) < 7:
                killed.append(_terminate(pg_database, 1, pooled_only=True))

        rounds = threading.Barrier(5, action=kill_one)

        def client(offset: int) -> None:
            with httpx.Client(headers=headers, timeout=30) as http:
                for n in range(24):  # 5 clients, 3 requests a round: 120 in 8 rounds
                    path, params = requests[(offset + n) % len(requests)]
                    answer = http.get(f"{server.url}{path}", params=params)
                    with lock:
                        results[answer.status_code] += 1
                        if answer.status_code != 200:
                            failures.append(f"{path} {answer.status_code} {answer.text[:200]}")
                    if n % 3 == 2:
                        rounds.wait()

        clients = [threading.Thread(target=client, args=(k,)) for k in range(5)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        assert sum(killed) == 7, killed
        assert results == Counter({200: 120}), failures


# a request's backend in the middle of its transaction (the key checked, the read going on), not the ingest
# consumer's or the embedding task's
IN_A_READ = (APP_BACKENDS + POOLED + " AND state IN ('active', 'idle in transaction')"
             " AND query NOT ILIKE '%ingest_jobs%' AND query NOT ILIKE '%embedding_backlog%'")


def test_no_read_fails_when_backends_are_killed_in_the_middle_of_reads(tmp_path: Path, pg_database: str) -> None:
    """10 clients send 120 reads (semantic searches of new queries, which run on a request thread, and keyword
    searches, timelines and contexts, which run on the event loop) while 7 of the server's backends are ended,
    each one caught in the middle of a read's transaction when one is there to catch (else an idle pooled one):
    a read whose connection died is run once more on another, and every answer is a 200."""
    with running_server(tmp_path, pg_database, "--workers", "1") as server:
        headers = {"Authorization": f"Bearer {server.make_key()}"}
        ids = []
        for n in range(12):
            saved = httpx.post(f"{server.url}/v1/memories", headers=headers,
                               json={"project": "api", "title": f"Decision {n} about retries",
                                     "text": f"retry budget number {n}: back off and give up after {n} tries"})
            assert saved.status_code == 201
            ids.append(saved.json()["id"])
        with db.connect(pg_database) as owner:  # the embedding task done: its transactions are not requests
            while owner.execute("SELECT count(*) FROM embedding_backlog").fetchone() != (0,):
                time.sleep(0.05)
        plan = [("/v1/search", lambda n: {"query": f"how many tries before giving up, case {n}", "project": "api"}),
                ("/v1/search", lambda n: {"query": "retry budget", "project": "api", "mode": "keyword"}),
                ("/v1/search", lambda n: {"query": f"backing off after failure {n}", "project": "api"}),
                ("/v1/timeline", lambda n: {"anchor": str(ids[n % len(ids)]), "project": "api"}),
                ("/v1/context", lambda n: {"project": "api"})]
        total, kills = 120, 7
        results: Counter[int] = Counter()
        failures: list[str] = []
        lock = threading.Lock()
        answered = threading.Semaphore(0)  # one release per answer: the killer paces itself by them
        killed: list[str] = []  # the state each ended backend was in
        numbers = iter(range(total))

        def kill_one(owner: object) -> None:
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:  # a backend in the middle of a read, when one is there to catch
                row = owner.execute(f"SELECT pid, state FROM ({IN_A_READ} LIMIT 1) AS b "  # type: ignore[attr-defined]
                                    "JOIN pg_stat_activity USING (pid)").fetchone()
                if row and owner.execute("SELECT pg_terminate_backend(%s)",  # type: ignore[attr-defined]
                                         (row[0],)).fetchone() == (True,):
                    killed.append(str(row[1]))
                    return
                time.sleep(0.001)
            if _terminate(pg_database, 1, pooled_only=True):
                killed.append("idle")

        def killer() -> None:
            with db.connect(pg_database) as owner:
                owner.execute("SET application_name = 'killer'")
                for _ in range(kills):
                    for _ in range(total // (kills + 2)):  # a kill every 13 answers, the first after 13
                        answered.acquire()
                    kill_one(owner)

        def client() -> None:
            with httpx.Client(headers=headers, timeout=60) as http:
                for n in numbers:  # shared: 120 requests in all
                    path, params = plan[n % len(plan)]
                    answer = http.get(f"{server.url}{path}", params=params(n))
                    with lock:
                        results[answer.status_code] += 1
                        if answer.status_code != 200:
                            failures.append(f"{path} {answer.status_code} {answer.text[:200]}")
                    answered.release()

        threads = [threading.Thread(target=killer)] + [threading.Thread(target=client) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(killed) == kills, killed
        assert sum(state != "idle" for state in killed) >= 3, killed  # most in the middle of a read
        assert results == Counter({200: total}), (failures, killed)
