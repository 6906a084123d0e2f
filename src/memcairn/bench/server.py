"""``memcairn bench server``: a real ``memcairn server`` process (embedded PostgreSQL, or ``--database``) under
concurrent loopback clients.

Scenarios: ingest (POST /v1/memories of synthetic observations over several projects; the server commits each
one and answers, its embedding task embeds them in batches behind the writes), the embedding backlog (how long
it took to drain after the last write was answered, polled on /v1/health), keyword search, hybrid search (the
query's embedding included), and context, both after the backlog drained. Each client holds one keep-alive
connection; rows give throughput, median, p95 and max. Nothing here is asserted in tests.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.bench.synthetic import synthetic_items, synthetic_queries
from memcairn.bench.timing import percentile, render_table
from memcairn.pgstore.embedded import free_port

Log = Callable[[str], None]
REQUEST_TIMEOUT = 60.0


@dataclass
class Outcome:
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    sample_errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    acked: dict[int, int] = field(default_factory=dict)  # request index -> the id a POST was answered with


Request = tuple[str, str, bytes | None]  # method, path, body


def drive(port: int, key: str, requests: Sequence[Request], clients: int,
          on_ack: Callable[[Outcome], None] | None = None, rate: float | None = None) -> Outcome:
    """Send every request once, from ``clients`` threads each holding one keep-alive connection; ``on_ack`` is
    called (under the lock) after each acknowledged POST. With ``rate`` the requests are offered at that many
    per second in all (request n is due at n / rate), like agents that each write now and then, and a latency
    counts from when its request was due, so a server falling behind shows as waiting, not as fewer requests."""
    outcome = Outcome()
    lock = threading.Lock()
    work = iter(enumerate(requests))
    start = threading.Barrier(clients + 1)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
        try:
            start.wait()
            while True:
                with lock:
                    numbered = next(work, None)
                if numbered is None:
                    return
                index, (method, path, body) = numbered
                try:
                    if rate:
                        due = started[0] + index / rate
                        time.sleep(max(0.0, due - time.perf_counter()))
                    t0 = due if rate else time.perf_counter()
                    conn.request(method, path, body=body, headers=headers)
                    response = conn.getresponse()
                    answer = response.read()
                    latency = (time.perf_counter() - t0) * 1000
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    error: str | None = f"{path}: {type(exc).__name__}: {exc}"
                else:
                    error = None if response.status in (200, 201) else f"{path}: {response.status} {answer[:200]!r}"
                with lock:
                    if error is None:
                        outcome.latencies_ms.append(latency)
                        if method == "POST":
                            outcome.acked[index] = int(json.loads(answer)["id"])
                            if on_ack is not None:
                                on_ack(outcome)
                    else:
                        outcome.errors += 1
                        if len(outcome.sample_errors) < 5:
                            outcome.sample_errors.append(error)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    started = [0.0]
    for t in threads:
        t.start()
    started[0] = t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    outcome.wall_s = time.perf_counter() - t0
    return outcome


def _row(scenario: str, clients: int, outcome: Outcome, unit: str = "req/s") -> dict[str, Any]:
    done = len(outcome.latencies_ms)
    return {"scenario": scenario, "clients": clients, "requests": done, "errors": outcome.errors,
            unit: round(done / outcome.wall_s, 1) if outcome.wall_s else 0.0,
            "median_ms": round(percentile(outcome.latencies_ms, 50), 2),
            "p95_ms": round(percentile(outcome.latencies_ms, 95), 2),
            "max_ms": round(max(outcome.latencies_ms, default=float("nan")), 2)}


def _memcairn() -> list[str]:
    return [sys.executable, "-m", "memcairn"]


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/v1/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not answer /v1/health in 120 s")


def run(*, items: int = 2_000, clients: int = 16, requests: int = 400, projects: int = 10,
        database_url: str | None = None, workers: int = 1, rate: float | None = None,
        log: Log = lambda _m: None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="memcairn-bench-server-"))
    root.chmod(0o755)  # the embedded PostgreSQL's user must reach its folder under it
    home = root / "home"
    env = {**os.environ, "MEMCAIRN_HOME": str(home)}
    database = ["--database", database_url] if database_url else []
    made = subprocess.run([*_memcairn(), "server", "keys", "create", "--tenant", f"bench-{os.getpid()}", "--json",
                           *database], env=env, capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise RuntimeError(f"keys create failed: {made.stderr.strip()}")
    key = json.loads(made.stdout)["key"]
    port = free_port()
    argv = [*_memcairn(), "server", *(database or ["--embedded"]), "--port", str(port), "--workers", str(workers)]
    log_path = root / "server.log"
    with log_path.open("wb") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=sink, start_new_session=True)
    rows = []
    try:
        _wait_ready(proc, port, log_path)
        log(f"server ready on port {port}; ingesting {items:,} memories with {clients} clients")
        posts: list[Request] = [
            ("POST", "/v1/memories", json.dumps({"project": it.project, "title": it.title,
                                                 "text": it.narrative, "kind": "observation",
                                                 "type": it.type}).encode())
            for it in synthetic_items(items, projects=projects)]
        ingest = drive(port, key, posts, clients, rate=rate)
        offered = f", offered at {rate:g}/s" if rate else ""
        rows.append(_row(f"ingest (POST /v1/memories, embedded behind{offered})", clients, ingest, "req/s"))
        backlog = _drain(port, ingest.wall_s, items)
        log(f"embedding backlog: {backlog}")
        queries = synthetic_queries(requests)
        names = [f"project-{i % projects:02d}" for i in range(requests)]
        for label, mode in (("search keyword", "keyword"), ("search hybrid (query embedding included)", "auto")):
            paths: list[Request] = [("GET", "/v1/search?" + urllib.parse.urlencode(
                {"query": q, "project": p, "mode": mode, "limit": 10}), None) for q, p in zip(queries, names,
                                                                                        strict=True)]
            log(f"{label}: {len(paths)} requests")
            rows.append(_row(label, clients, drive(port, key, paths, clients)))
        context: list[Request] = [("GET", "/v1/context?" + urllib.parse.urlencode({"project": p}), None)
                                  for p in names]
        rows.append(_row("context", clients, drive(port, key, context, clients)))
        errors = [e for r in (ingest,) for e in r.sample_errors]
        log("kill -9 under ingest, then a restart")
        proc, crash = _crash_and_restart(proc, port, key, clients, max(60, items // 2), projects,
                                         argv, env, log_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)
    return {"items": items, "projects": projects, "clients": clients, "workers": workers, "rate": rate,
            "database": "given" if database_url else "embedded", "rows": rows, "backlog": backlog, "crash": crash,
            "sample_errors": errors}


def _health(port: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        conn.request("GET", "/v1/health")
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def _drain(port: int, ingest_s: float, items: int) -> dict[str, Any]:
    """Wait for the embedding backlog to empty; how much was left when the writes ended and how long it took."""
    t0 = time.perf_counter()
    left = int(_health(port)["embedding"]["pending"])
    while _health(port)["embedding"]["pending"]:
        time.sleep(0.1)
    drain_s = time.perf_counter() - t0
    return {"items": items, "pending_when_ingest_ended": left, "ingest_s": round(ingest_s, 1),
            "drained_after_ingest_s": round(drain_s, 1),
            "embedded_per_s": round(items / (ingest_s + drain_s), 1) if ingest_s + drain_s else 0.0}


def _crash_and_restart(proc: subprocess.Popen[bytes], port: int, key: str, clients: int, count: int, projects: int,
                       argv: list[str], env: dict[str, str], log_path: Path
                       ) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """SIGKILL the server (its process group) once a third of ``count`` new memories are acknowledged, start it
    again, send every memory again (a client retries what it has no answer for, and may retry what it had), and
    count the acknowledged memories that are gone and the memories stored twice."""
    posts: list[Request] = [("POST", "/v1/memories", json.dumps({
        "project": f"crash-{i % projects:02d}", "title": f"crash test memory {i}",
        "text": f"written while the server may be killed ({i})"}).encode()) for i in range(count)]
    killed = threading.Event()

    def kill_at_a_third(outcome: Outcome) -> None:
        if not killed.is_set() and len(outcome.acked) >= count // 3:
            killed.set()
            os.killpg(proc.pid, signal.SIGKILL)  # the server and its worker processes, as a crash takes them

    first = drive(port, key, posts, clients, on_ack=kill_at_a_third)
    proc.wait(timeout=60)
    with log_path.open("ab") as sink:
        restarted = subprocess.Popen(argv, env=env, stdout=sink, stderr=sink, start_new_session=True)
    _wait_ready(restarted, port, log_path)
    again = drive(port, key, posts, clients)
    while _health(port)["embedding"]["pending"]:  # the backlog the crash left, and the retries', drains
        time.sleep(0.1)
    lost = sum(1 for index, item_id in first.acked.items() if again.acked.get(index) != item_id)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    conn.request("GET", "/v1/projects", headers={"Authorization": f"Bearer {key}"})
    listed = json.loads(conn.getresponse().read())
    if "projects" not in listed:
        raise RuntimeError(f"GET /v1/projects after the restart: {listed}")
    stored = sum(p["items"] for p in listed["projects"] if p["name"].startswith("crash-"))
    conn.close()
    return restarted, {"sent": count, "acknowledged_before_kill": len(first.acked), "unanswered": first.errors,
                       "acknowledged_then_lost": lost, "stored": stored, "duplicates": stored - count,
                       "retries_unanswered": again.errors}


def render(result: dict[str, Any]) -> str:
    head = (f"memcairn server on {result['database']} PostgreSQL: {result['items']:,} memories over "
            f"{result['projects']} projects, {result['clients']} concurrent loopback clients, "
            f"{result.get('workers', 1)} server worker process(es)")
    crash = result.get("crash")
    tail = ("\n\nkill -9 under ingest, restarted, everything sent again:\n\n" + render_table([crash])) if crash else ""
    backlog = result.get("backlog")
    middle = ("\n\nembedding backlog after the ingest:\n\n" + render_table([backlog])) if backlog else ""
    return head + "\n\n" + render_table(result["rows"]) + middle + tail
