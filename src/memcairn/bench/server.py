"""``memcairn bench server``: a real ``memcairn server`` process (embedded PostgreSQL, or ``--database``) under
concurrent loopback clients, each holding one keep-alive connection (all on one event loop: ``bench/loadgen.py``).

Scenarios, in order:

- ingest: ``clients`` simulated agents post synthetic observations over ``projects`` projects to
  ``POST /v1/events`` (``batch`` events a request, each request with its ``Idempotency-Key`` as the forwarder
  sends), offered at ``rate`` events/s in all (latency counted from when each request was due) or as fast as
  they are answered; the server queues them and answers 202;
- the ingest queue: how many events were still queued when the last was acknowledged, and how long the
  consumers took to store them (polled on ``/v1/health``); then the embedding backlog likewise (up to
  ``embed_timeout``: the model is the slow part, about 70 items/s on one thread);
- reads with ``read_clients`` clients: keyword search; fused search with the query's embedding (queries
  never asked before); fused search with the query vector cached (the same queries asked once before,
  unmeasured), which leaves the model out; context;
- kill -9 under ingest: the server's process group is killed once a third of ``crash_events`` new events are
  acknowledged, started again; every acknowledged event must be stored once the queue drained (each is found by
  a word of its own), then every event is sent again with its key and none may be stored twice;
- a quiet tenant during another's upload: a second tenant uploads ``quiet_uploads`` events (100 a request); once
  half are acknowledged a third tenant saves one memory (``POST /v1/memories``) and then posts one event
  (``POST /v1/events``, through the ingest queue), and each is timed until a semantic search of that tenant
  finds it, with the busy tenant's backlog at that moment (the embedding task takes its batches round robin over
  the tenants: ``pgstore/backlog.py``).

With ``preload`` (``--preload 100000``) that many memories, with vectors, are written straight into PostgreSQL
before the server starts (``bench/server_preload.py``), so the reads run at that size without waiting for the
model to embed them; every request measured still goes through the HTTP API.

Rows give throughput, median, p95 and max, and the 1-minute load average when the scenario ended (the machine
is shared: the clients run on the same cores as the server). Nothing here is asserted in tests.
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.bench.loadgen import Reply, Request, run_clients
from memcairn.bench.synthetic import synthetic_items, synthetic_queries
from memcairn.bench.timing import percentile, render_table
from memcairn.core.models import NewItem
from memcairn.pgstore.embedded import free_port

Log = Callable[[str], None]
REQUEST_TIMEOUT = 60.0


@dataclass
class Outcome:
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    sample_errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    acked: dict[int, Any] = field(default_factory=dict)  # request index -> the answer to an acknowledged POST


def drive(port: int, key: str, requests: Sequence[Request], clients: int,
          on_ack: Callable[[Outcome], None] | None = None, rate: float | None = None) -> Outcome:
    """Send every request once from ``clients`` keep-alive connections (``bench/loadgen.py``); ``on_ack`` is
    called after each acknowledged POST. With ``rate`` the requests are offered at that many per second in all
    (request n is due at n / rate), like agents that each write now and then, and a latency counts from when its
    request was due, so a server falling behind shows as waiting, not as fewer requests."""
    outcome = Outcome()

    def answered(index: int, latency: float, reply: Reply | str) -> None:
        path = requests[index][1]
        if isinstance(reply, Reply) and reply.status in (200, 201, 202):
            outcome.latencies_ms.append(latency)
            if requests[index][0] == "POST":
                outcome.acked[index] = json.loads(reply.body)
                if on_ack is not None:
                    on_ack(outcome)
            return
        outcome.errors += 1
        if len(outcome.sample_errors) < 5:
            outcome.sample_errors.append(reply if isinstance(reply, str) else
                                         f"{path}: {reply.status} {reply.body[:200]!r}")

    outcome.wall_s = run_clients(port, requests, clients, answered, rate=rate, timeout=REQUEST_TIMEOUT,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    return outcome


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _row(scenario: str, clients: int, outcome: Outcome, *, events: int = 0) -> dict[str, Any]:
    done = len(outcome.latencies_ms)
    per_s = round(done / outcome.wall_s, 1) if outcome.wall_s else 0.0
    row: dict[str, Any] = {"scenario": scenario, "clients": clients, "requests": done, "errors": outcome.errors,
                           "req/s": per_s}
    if events:
        row["events/s"] = round(per_s * events, 1)
    return {**row, "median_ms": round(percentile(outcome.latencies_ms, 50), 2),
            "p95_ms": round(percentile(outcome.latencies_ms, 95), 2),
            "max_ms": round(max(outcome.latencies_ms, default=float("nan")), 2), "load1": _load()}


def _memcairn() -> list[str]:
    return [sys.executable, "-m", "memcairn"]


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log_path: Path, timeout: float = 120.0) -> None:
    for _ in range(int(timeout * 10)):
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
    raise RuntimeError(f"the server did not answer /v1/health in {timeout:g} s: "
                       f"{log_path.read_text(errors='replace')[-2000:]}")


def run(*, items: int = 2_000, clients: int = 200, read_clients: int = 50, requests: int = 400, projects: int = 10,
        database_url: str | None = None, workers: int | None = None, rate: float | None = None, batch: int = 1,
        crash_events: int = 3_000, embed_timeout: float = 3_600.0, quiet_uploads: int = 10_000, preload: int = 0,
        log: Log = lambda _m: None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="memcairn-bench-server-"))
    root.chmod(0o755)  # the embedded PostgreSQL's user must reach its folder under it
    home = root / "home"
    env = {**os.environ, "MEMCAIRN_HOME": str(home)}
    database = ["--database", database_url] if database_url else []
    key, busy, quiet = (_make_key(f"{name}-{os.getpid()}", database, env) for name in ("bench", "busy", "quiet"))
    preloaded: dict[str, Any] = {}
    if preload:
        if database_url:
            raise ValueError("--preload writes into the embedded cluster; it cannot be given with --database")
        from memcairn.bench.server_preload import preload as preload_rows

        log(f"preloading {preload:,} memories over {projects} projects straight into PostgreSQL")
        preloaded = preload_rows(home, f"bench-{os.getpid()}", preload, projects, log=log)
        log(f"preloaded: {preloaded}")
    port = free_port()
    from memcairn.server.run import default_workers

    workers = workers or default_workers()  # the server's own default, named in the report
    argv = [*_memcairn(), "server", *(database or ["--embedded"]), "--port", str(port), "--workers", str(workers)]
    log_path = root / "server.log"
    with log_path.open("wb") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=sink, start_new_session=True)
    rows: list[dict[str, Any]] = []
    try:
        _wait_ready(proc, port, log_path)
        log(f"server ready on port {port}; ingesting {items:,} events over {projects} projects with {clients} "
            f"agents, {batch} a request{f', offered at {rate:g}/s' if rate else ''}")
        posts = event_posts(synthetic_items(items, projects=projects), batch, "bench")
        ingest = drive(port, key, posts, clients, rate=rate)
        offered = f", offered {rate * batch:g} events/s" if rate else ""
        rows.append(_row(f"ingest (POST /v1/events, {batch} a request{offered})", clients, ingest, events=batch))
        log(f"{rows[-1]}")
        queue = _drain_queue(port, ingest.wall_s, items)
        log(f"ingest queue: {queue}")
        backlog = _drain(port, ingest.wall_s + queue["drained_after_ingest_s"], items, embed_timeout)
        log(f"embedding backlog: {backlog}")
        names = [f"project-{i % projects:02d}" for i in range(requests)]
        rows += _reads(port, key, names, requests, read_clients, log, workers)
        errors = ingest.sample_errors
        crash: dict[str, Any] = {}
        if crash_events:
            log("kill -9 under ingest, then a restart")
            try:
                proc, crash = _crash_and_restart(proc, port, key, clients, crash_events, projects, argv, env,
                                                 log_path, rate)
            except (RuntimeError, OSError, http.client.HTTPException) as exc:  # the rows above still count
                crash = {"error": str(exc)[-1500:]}
                log(f"the kill -9 scenario failed: {exc}")
        fairness: dict[str, Any] = {}
        if quiet_uploads:
            log(f"a quiet tenant's memories while another tenant uploads {quiet_uploads:,} events")
            try:
                fairness = quiet_tenant(port, busy, quiet, quiet_uploads, clients=min(clients, 10), log=log)
            except (RuntimeError, OSError, http.client.HTTPException) as exc:
                fairness = {"error": str(exc)[-1500:]}
                log(f"the quiet tenant scenario failed: {exc}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)
    return {"items": items, "projects": projects, "clients": clients, "read_clients": read_clients,
            "workers": workers, "rate": rate, "batch": batch,
            "database": "given" if database_url else "embedded", "preloaded": preloaded, "rows": rows,
            "queue": queue, "backlog": backlog,
            "crash": crash, "fairness": fairness, "sample_errors": errors}


def _make_key(tenant: str, database: list[str], env: dict[str, str]) -> str:
    made = subprocess.run([*_memcairn(), "server", "keys", "create", "--tenant", tenant, "--json", *database],
                          env=env, capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise RuntimeError(f"keys create failed: {made.stderr.strip()}")
    return str(json.loads(made.stdout)["key"])


def _request(port: int, key: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        reply = conn.getresponse()
        answer = json.loads(reply.read())
        if reply.status not in (200, 201, 202):
            raise RuntimeError(f"{method} {path}: {reply.status} {answer}")
        return dict(answer)
    finally:
        conn.close()


# What the quiet tenant writes, and a question about it in other words (found only by the semantic leg).
QUIET_MEMORIES = (
    ("Deploys freeze on Friday afternoons", "No production deploys after 14:00 on Fridays",
     "when are we not allowed to ship to production"),
    ("The staging database is wiped every Monday", "A cron job resets staging to last week's snapshot",
     "how often is the test environment's data reset"),
)


def quiet_tenant(port: int, busy: str, quiet: str, uploads: int, *, clients: int = 10, timeout: float = 600.0,
                 log: Log = lambda _m: None) -> dict[str, Any]:
    """The busy tenant uploads ``uploads`` events (100 a request, from ``clients`` connections); once half are
    acknowledged the quiet tenant saves one memory, then posts one event, and each is timed from its answer until
    a semantic search of the quiet tenant finds it; the backlogs are read from ``/v1/health`` at that moment."""
    items = [NewItem(project=f"upload-{i % 10}", kind="observation", title=f"uploaded change {i}",
                     text=f"bulk import entry {i} of the busy tenant's history") for i in range(uploads)]
    posts = event_posts(items, 100, "upload")
    half = threading.Event()
    upload: dict[str, Outcome] = {}

    def acked(outcome: Outcome) -> None:
        if len(outcome.acked) * 2 >= len(posts):
            half.set()

    sender = threading.Thread(target=lambda: upload.update(done=drive(port, busy, posts, clients, on_ack=acked)),
                              daemon=True)
    sender.start()
    if not half.wait(timeout):
        raise RuntimeError("half the upload was not acknowledged in time")
    rows = []
    for route, (title, text, question) in zip(("POST /v1/memories", "POST /v1/events"), QUIET_MEMORIES,
                                              strict=True):
        memory = {"project": "quiet", "kind": "manual", "title": title, "text": text}
        if route == "POST /v1/memories":
            _request(port, quiet, "POST", "/v1/memories", memory)
        else:
            _request(port, quiet, "POST", "/v1/events", {"events": [memory]})
        written = time.perf_counter()
        search = "/v1/search?" + urllib.parse.urlencode({"query": question, "project": "quiet", "mode": "semantic"})
        while not any(hit.get("title") == title for hit in _request(port, quiet, "GET", search).get("results", [])):
            if time.perf_counter() - written > timeout:
                raise RuntimeError(f"the quiet tenant's memory ({route}) was not searchable in {timeout:g} s")
            time.sleep(0.1)
        searchable_s = time.perf_counter() - written
        health = _health(port)
        rows.append({"quiet tenant wrote by": route, "searchable_after_s": round(searchable_s, 2),
                     "embedding_pending": health["embedding"]["pending"],
                     "tenants_waiting": health["embedding"].get("tenants_waiting"),
                     "ingest_pending": health["ingest"]["pending"], "load1": _load()})
        log(f"{rows[-1]}")
    sender.join(timeout)
    done = upload.get("done")
    return {"uploads": uploads, "upload_requests_acknowledged": len(done.acked) if done else None,
            "upload_errors": done.errors if done else None, "rows": rows}


def event_posts(items: Iterable[NewItem], batch: int, prefix: str) -> list[Request]:
    """POST /v1/events requests of ``batch`` events each, with an Idempotency-Key each (as the forwarder sends)."""
    events = [{"project": it.project, "title": it.title, "text": it.narrative or it.text, "kind": it.kind,
               "type": it.type, "session": it.session, "platform": it.platform_source} for it in items]
    return [("POST", "/v1/events", json.dumps({"events": events[n:n + batch]}).encode(),
             {"Idempotency-Key": f"{prefix}-{n}"}) for n in range(0, len(events), batch)]


def _reads(port: int, key: str, names: list[str], requests: int, clients: int, log: Log,
           workers: int = 1) -> list[dict[str, Any]]:
    """Keyword search; then, once the warm-up below has read every project's vectors into the server's copies
    (so the first row with the model does not also pay for reading them), fused search with the query's embedding
    (queries never asked before) and fused search with the query vector cached (the same queries asked before,
    unmeasured: each server process keeps the vectors of
    the queries it answered, and a client's connection stays with one process, so the queries are asked four times
    per process, leaving about one in 2^(4 * workers) to a process that has not seen it: 1 in 256 with two
    processes, where twice per process left 1 in 16, enough to be the p95 of a row that says it excludes the
    model); context."""
    def searches(queries: list[str], mode: str) -> list[Request]:
        return [("GET", "/v1/search?" + urllib.parse.urlencode({"query": q, "project": p, "mode": mode,
                                                                "limit": 10}), None, {})
                for q, p in zip(queries, names, strict=True)]

    # a number makes each fresh query one the server has never embedded (the vocabulary repeats otherwise)
    fresh = [f"{q} {n}" for n, q in enumerate(synthetic_queries(requests, seed=23))]
    repeated = synthetic_queries(requests)
    rows = []
    log(f"search keyword: {requests} requests, {clients} clients")
    rows.append(_row("search keyword", clients, drive(port, key, searches(repeated, "keyword"), clients)))
    log(f"{rows[-1]}")
    warmed = 0
    for _ in range(4 * workers):  # computes and keeps each query's vector in the process that answers it
        warmed += len(drive(port, key, searches(repeated, "semantic"), clients).latencies_ms)
    log(f"query vectors and the projects' vectors in memory ({warmed} warm-up searches); fused search")
    rows.append(_row("search fused (query embedding included)", clients,
                     drive(port, key, searches(fresh, "auto"), clients)))
    rows.append(_row("search fused (query vector cached: embedding excluded)", clients,
                     drive(port, key, searches(repeated, "auto"), clients)))
    log(f"{rows[-2]}\n{rows[-1]}")
    context: list[Request] = [("GET", "/v1/context?" + urllib.parse.urlencode({"project": p}), None, {})
                              for p in names]
    rows.append(_row("context", clients, drive(port, key, context, clients)))
    log(f"{rows[-1]}")
    return rows


def _health(port: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        conn.request("GET", "/v1/health")
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def _wait_queue(port: int) -> None:
    while _health(port)["ingest"]["pending"]:
        time.sleep(0.05)


def _drain_queue(port: int, ingest_s: float, events: int) -> dict[str, Any]:
    """Wait for the ingest queue to empty; how much was queued when the last event was acknowledged, how long
    the consumers took after that, and the events stored per second over ingest and drain."""
    t0 = time.perf_counter()
    left = int(_health(port)["ingest"]["pending"])
    _wait_queue(port)
    drain_s = time.perf_counter() - t0
    failed = int(_health(port)["ingest"]["failed"])
    return {"events": events, "queued_when_ingest_ended": left, "ingest_s": round(ingest_s, 1),
            "drained_after_ingest_s": round(drain_s, 1),
            "stored_per_s": round(events / (ingest_s + drain_s), 1) if ingest_s + drain_s else 0.0,
            "failed": failed, "load1": _load()}


def _drain(port: int, before_s: float, items: int, timeout: float) -> dict[str, Any]:
    """Wait (up to ``timeout`` s) for the embedding backlog to empty; how much was left when the queue was
    stored, how long it took, and what was still waiting when the reads began."""
    t0 = time.perf_counter()
    left = int(_health(port)["embedding"]["pending"])
    pending = left
    while pending and time.perf_counter() - t0 < timeout:
        time.sleep(0.5)
        pending = int(_health(port)["embedding"]["pending"])
    drain_s = time.perf_counter() - t0
    return {"items": items, "pending_when_stored": left, "drained_after_s": round(drain_s, 1),
            "still_pending": pending, "embedded_per_s": round((items - pending) / (before_s + drain_s), 1)
            if before_s + drain_s else 0.0, "load1": _load()}


def _crash_and_restart(proc: subprocess.Popen[bytes], port: int, key: str, clients: int, count: int, projects: int,
                       argv: list[str], env: dict[str, str], log_path: Path, rate: float | None
                       ) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """SIGKILL the server (its process group) once a third of ``count`` new events are acknowledged (202:
    queued), start it again and let the queue drain; look up every acknowledged event (each has a word of its
    own), then send every event again with its Idempotency-Key (a client retries what it has no answer for, and
    may retry what it had) and count what was stored twice."""
    items = [NewItem(project=f"crash-{i % projects:02d}", kind="observation", title=f"crash event kx{i:05d}q",
                     text=f"written while the server may be killed ({i})") for i in range(count)]
    posts = event_posts(items, 1, "crash")
    killed = threading.Event()

    def kill_at_a_third(outcome: Outcome) -> None:
        if not killed.is_set() and len(outcome.acked) >= count // 3:
            killed.set()
            os.killpg(proc.pid, signal.SIGKILL)  # the server and its worker processes, as a crash takes them

    first = drive(port, key, posts, clients, on_ack=kill_at_a_third, rate=rate)
    proc.wait(timeout=60)
    with log_path.open("ab") as sink:
        restarted = subprocess.Popen(argv, env=env, stdout=sink, stderr=sink, start_new_session=True)
    try:  # PostgreSQL's crash recovery and the server's start on a large database: allow ten minutes
        _wait_ready(restarted, port, log_path, timeout=600.0)
    except RuntimeError:
        os.killpg(restarted.pid, signal.SIGTERM)
        restarted.wait(timeout=60)
        raise
    _wait_queue(port)
    lookups: list[Request] = [("GET", "/v1/search?" + urllib.parse.urlencode(
        {"query": f"kx{i:05d}q", "project": items[i].project, "mode": "keyword", "limit": 5}), None, {})
        for i in sorted(first.acked)]
    found = _answers(port, key, lookups, clients=50)
    lost = sum(1 for i, hits in zip(sorted(first.acked), found, strict=True)
               if not any(h["title"] == items[i].title for h in hits.get("results", [])))
    again = drive(port, key, posts, clients, rate=rate)
    _wait_queue(port)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    conn.request("GET", "/v1/projects", headers={"Authorization": f"Bearer {key}"})
    listed = json.loads(conn.getresponse().read())
    conn.close()
    if "projects" not in listed:
        raise RuntimeError(f"GET /v1/projects after the restart: {listed}")
    stored = sum(p["items"] for p in listed["projects"] if p["name"].startswith("crash-"))
    return restarted, {"sent": count, "acknowledged_before_kill": len(first.acked), "unanswered": first.errors,
                       "acknowledged_then_lost": lost, "stored_after_resend": stored, "duplicates": stored - count,
                       "resend_unanswered": again.errors, "load1": _load()}


def _answers(port: int, key: str, requests: Sequence[Request], clients: int) -> list[dict[str, Any]]:
    """The JSON answers of GET requests, in order (a lookup pass, not measured)."""
    answers: list[dict[str, Any]] = [{} for _ in requests]

    def answered(index: int, _latency: float, reply: Reply | str) -> None:
        if isinstance(reply, str):
            raise RuntimeError(f"lookup failed: {reply}")
        answers[index] = json.loads(reply.body)

    run_clients(port, requests, clients, answered, headers={"Authorization": f"Bearer {key}"},
                timeout=REQUEST_TIMEOUT)
    return answers


def render(result: dict[str, Any]) -> str:
    head = (f"memcairn server on {result['database']} PostgreSQL: {result['items']:,} events over "
            f"{result['projects']} projects from {result['clients']} simulated agents ({result['batch']} event(s) a "
            f"request), reads from {result['read_clients']} clients, {result.get('workers', 1)} server worker "
            f"process(es); load1: the 1-minute load average when the row ended")
    if result.get("preloaded"):
        head += (f"; {result['preloaded']['memories']:,} memories written straight into PostgreSQL before the server "
                 f"started (bench/server_preload.py)")
    parts = [head, render_table(result["rows"])]
    fairness = result.get("fairness") or {}
    for title, name in (("ingest queue after the last event was acknowledged", "queue"),
                        ("embedding backlog after the queue was stored", "backlog"),
                        ("kill -9 under ingest, restarted, acknowledged events looked up, everything sent again",
                         "crash")):
        if result.get(name):
            parts += [f"{title}:", render_table([result[name]])]
    if fairness.get("rows"):
        parts += [f"a quiet tenant's memory while another tenant uploads {fairness['uploads']:,} events (time from "
                  "its write's answer until a semantic search finds it; the backlogs at that moment):",
                  render_table(fairness["rows"])]
    elif fairness:
        parts += [f"a quiet tenant during another's upload: {fairness}"]
    return "\n\n".join(parts)
