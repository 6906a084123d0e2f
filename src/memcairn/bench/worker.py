"""``memcairn bench worker``: the real worker under a load of concurrent loopback clients.

- **Store**: ``items`` synthetic observations over ``projects`` projects (``synthetic_items``), built once in
  ``home`` and reused by later runs. The sqlite-vec mirror is filled through ``MirrorSync`` under the index
  key the worker uses, with document vectors from the embedding cache (only texts never seen are embedded).
- **Worker**: ``python -m memcairn worker run`` on a free loopback port with ``MEMCAIRN_HOME=home``; the
  bench waits for readiness and for a mirror lag of 0, then warms every scenario up (the first query also
  loads the model) before measuring.
- **Load**: ``clients`` threads, each with its own keep-alive connection, take requests from one shared work
  list until it is empty; each request's latency is the time from sending it to having read the whole answer.
  The scenarios run one after another: the health route (the floor: HTTP and the event loop alone), context
  injection as a client sees it (served from the worker's memo of rendered contexts while the store and the
  minute stay the same), context injection with ``fresh=1`` (every request renders: what a render costs under
  load; no goal), keyword search, hybrid search (one project and all projects), filter-only search and
  timeline.
- **Table**: requests, errors, throughput, the worker's CPU time per request (utime + stime from ``/proc``
  over the scenario: it tells cost from queueing), median, p95 and max per scenario beside the goal and, where one
  exists, the figure measured for claude-mem 13.15.3 on a similar machine, and the "answers" column: how each
  answer was made, counted per value (the search ``strategy`` of search answers; ``memo`` / ``rendered`` from
  the ``X-Memcairn-Context`` header of context answers, so memo hits and misses are reported as measured);
  the worker's resident memory (``VmRSS``, peak ``VmHWM``) after the warm-up and at the end.

The worker is stopped (SIGTERM, then SIGKILL if it does not exit) whatever happens: an error, Ctrl-C, or a
SIGTERM or SIGHUP sent to the bench.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from memcairn.bench.hooks import build_store, free_port
from memcairn.bench.synthetic import synthetic_queries
from memcairn.bench.timing import percentile
from memcairn.wire.protocol import CONTEXT_HEADER

# The figures of the reference implementation (claude-mem 13.15.3), measured on a similar 2-core machine.
REFERENCE = {"context": "57 ms (10k obs)", "keyword": "6 ms"}
GOAL_P95_MS = {"context": 50.0, "hybrid": 100.0}
GOAL_RSS_MB = 500.0
MARKER = "bench-worker.json"  # what the mirror of a bench home was built with
READY_TIMEOUT = 300.0
LAG_TIMEOUT = 1800.0
STOP_TIMEOUT = 30.0
REQUEST_TIMEOUT = 60.0

Log = Callable[[str], None]


@dataclass
class Scenario:
    key: str  # the goal and reference it is compared with
    name: str
    paths: list[str]
    check_strategy: str | None = None  # a search strategy at least one answer must report (in ``answers``)


@dataclass
class Outcome:
    latencies_ms: list[float] = field(default_factory=list)
    worker_cpu_s: float | None = None  # CPU time the worker process spent while the scenario ran
    errors: int = 0
    sample_errors: list[str] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)  # how the answers were made: strategy / context header
    wall_s: float = 0.0


# -- the store and its mirror ---------------------------------------------------------------------------
def prepare_home(home: Path, items: int, projects: int, model: str, cache_path: Path, log: Log) -> dict[str, Any]:
    """Build (or reuse) the store in ``home`` and bring its sqlite-vec mirror level with it.

    Raises:
        RuntimeError: the mirror of this home was built with another model.
    """
    from memcairn.mirror.runtime import index_key
    from memcairn.mirror.sync import MirrorSync
    from memcairn.store import Store
    from memcairn.vectors.embedder import load_embedder
    from memcairn.vectors.embedding_cache import EmbeddingCache
    from memcairn.vectors.factory import open_index
    from memcairn.wire.config import Settings

    home.mkdir(parents=True, exist_ok=True)
    marker = home / MARKER
    if marker.exists():
        built_with = json.loads(marker.read_text(encoding="utf-8")).get("model")
        if built_with != model:
            raise RuntimeError(f"the mirror in {home} holds vectors of {built_with!r}, not {model!r}; "
                               "use another --home or the same model")
    total = build_store(home / "memcairn.db", items, projects, log)
    raw = load_embedder(model)
    embedder = EmbeddingCache(raw, cache_path)
    store = Store(home / "memcairn.db")
    index = open_index("sqlite-vec", home=home, dimension=raw.dimension)
    try:
        mirror = MirrorSync(store, index, embedder, index_key=index_key(Settings(home=home)))
        mirror.bootstrap()
        lag = sum(row["lag"] for row in mirror.status()["rows"])
        if lag:
            log(f"mirroring {lag:,} items (vectors cached in {cache_path}) ...")
        progress = _progress(log) if lag else None
        started = time.perf_counter()
        result = mirror.backfill(progress)
        if result.failed_batches or not mirror.available:
            raise RuntimeError(f"the mirror could not be filled: {result.sample_errors[:3] or mirror.last_error}")
        if lag:
            log(f"mirror filled in {time.perf_counter() - started:.0f} s ({result.documents:,} documents; cache "
                f"{embedder.hits:,} hits, {embedder.misses:,} embedded)")
        marker.write_text(json.dumps({"model": model}), encoding="utf-8")
        return {"items": total, "projects": store.project_names(), "max_id": store.max_item_id(),
                "documents": index.count()}
    finally:
        index.close()
        store.close()
        embedder.close()


def _progress(log: Log, every: int = 10_000) -> Callable[[str, int], None]:
    lock = threading.Lock()
    started = time.perf_counter()
    state = {"items": 0, "said": 0}

    def progress(_project: str, items: int) -> None:
        with lock:
            state["items"] += items
            if state["items"] - state["said"] >= every:
                state["said"] = state["items"]
                rate = state["items"] / max(time.perf_counter() - started, 1e-9)
                log(f"  {state['items']:,} memories mirrored ({rate:,.0f}/s)")

    return progress


def pick_anchors(db: Path, max_id: int, n: int, seed: int = 5) -> list[int]:
    """Up to ``n`` ids of existing items, spread over the store."""
    from memcairn.store import Store

    rng = random.Random(seed)
    wanted = [rng.randint(1, max(1, max_id)) for _ in range(n)]
    store = Store(db)
    try:
        found = {item.id for item in store.get_items(wanted)}
    finally:
        store.close()
    return [i for i in wanted if i in found] or sorted(found)


# -- the worker process ---------------------------------------------------------------------------------
def worker_env(home: Path, port: int, model: str) -> dict[str, str]:
    """This process's environment without its memcairn settings, plus the bench worker's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env.update(MEMCAIRN_HOME=str(home), MEMCAIRN_PORT=str(port), MEMCAIRN_HOST="127.0.0.1",
               MEMCAIRN_VECTOR_BACKEND="sqlite-vec", MEMCAIRN_EMBEDDING_MODEL=model,
               MEMCAIRN_CAPTURE_BACKEND="offline", MEMCAIRN_WORKER_AUTOSTART="0")
    return env


@contextlib.contextmanager
def signals_unwind() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``SystemExit`` here (their default ends the process at once, skipping every
    ``finally``), so the worker is stopped also when the bench is killed that way or its terminal closes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, unwind) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def running_worker(home: Path, port: int, model: str, log: Log) -> Iterator[subprocess.Popen]:
    """A ``memcairn worker run`` process serving ``home`` on ``port``, stopped on the way out."""
    stderr_path = home / "logs" / "bench-worker-stderr.log"
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "memcairn", "worker", "run"], env=worker_env(home, port, model),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, cwd=str(home))
    try:
        yield proc
    finally:
        stop_worker(proc, log)


def stop_worker(proc: subprocess.Popen, log: Log) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        log(f"the worker (pid {proc.pid}) did not stop within {STOP_TIMEOUT:.0f} s; killing it")
        proc.kill()
        proc.wait()


def _get_json(port: int, path: str, timeout: float = 5.0) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        try:
            return response.status, json.loads(body)
        except ValueError:
            return response.status, None
    finally:
        conn.close()


def _stderr_tail(home: Path) -> str:
    try:
        return (home / "logs" / "bench-worker-stderr.log").read_text(errors="replace")[-800:].strip()
    except OSError:
        return ""


def wait_ready(proc: subprocess.Popen, port: int, home: Path, log: Log) -> dict[str, Any]:
    """Wait for /api/readiness, then for a mirror lag of 0 and the in-memory keyword index; return the worker's
    health answer.

    Raises:
        RuntimeError: the worker exited, failed to start, or did not get there in time.
    """
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with code {proc.returncode} while starting (another worker may "
                               f"serve {home}): {_stderr_tail(home)}")
        try:
            status, _ = _get_json(port, "/api/readiness", timeout=2.0)
            if status == 200:
                break
            _, health = _get_json(port, "/api/health", timeout=2.0)
            if isinstance(health, dict) and health.get("state") == "failed":
                raise RuntimeError(f"the worker could not start; see {home / 'logs' / 'worker.log'}")
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker was not ready within {READY_TIMEOUT:.0f} s: {_stderr_tail(home)}")
        time.sleep(0.1)
    deadline = time.monotonic() + LAG_TIMEOUT
    said = 0.0
    while True:
        try:
            _, stats = _get_json(port, "/api/stats", timeout=30.0)
        except OSError:
            stats = None
        mirror = (stats or {}).get("mirror") or {}
        if mirror.get("state") in ("disabled", "unavailable", "degraded"):
            raise RuntimeError(f"the worker's mirror is {mirror['state']}: "
                               f"{mirror.get('error') or mirror.get('last_error')}")
        keyword = (stats or {}).get("keyword_index") or {}
        building = str(keyword.get("status", "")) in ("building", "rebuilding")
        if mirror.get("lag") == 0 and not building:
            break
        if time.monotonic() - said > 30:
            log(f"waiting for the worker's mirror to catch up (lag {mirror.get('lag')}) "
                f"and its keyword index ({keyword.get('status')}) ...")
            said = time.monotonic()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker's mirror still lags by {mirror.get('lag')} items")
        time.sleep(0.5)
    _, health = _get_json(port, "/api/health")
    return health


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (None where /proc is not available)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


def memory_mb(pid: int) -> dict[str, float | None]:
    """``VmRSS`` and ``VmHWM`` (peak) of a process, in MB (None where /proc is not available)."""
    out: dict[str, float | None] = {"rss_mb": None, "peak_mb": None}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
                elif line.startswith("VmHWM:"):
                    out["peak_mb"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


# -- the load generator ---------------------------------------------------------------------------------
def drive(port: int, paths: Sequence[str], clients: int) -> Outcome:
    """Send every path once, from ``clients`` threads each holding one keep-alive connection."""
    outcome = Outcome()
    lock = threading.Lock()
    work = iter(paths)
    start = threading.Barrier(clients + 1)

    def record(latency: float | None, error: str | None, answer: str | None) -> None:
        with lock:
            if error is not None:
                outcome.errors += 1
                if len(outcome.sample_errors) < 5:
                    outcome.sample_errors.append(error)
            elif latency is not None:
                outcome.latencies_ms.append(latency)
            if answer is not None:
                outcome.answers[answer] = outcome.answers.get(answer, 0) + 1

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
        try:
            start.wait()
            while True:
                with lock:
                    path = next(work, None)
                if path is None:
                    return
                try:
                    t0 = time.perf_counter()
                    conn.request("GET", path)
                    response = conn.getresponse()
                    body = response.read()
                    latency = (time.perf_counter() - t0) * 1000
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()  # the next request reconnects
                    record(None, f"{path}: {type(exc).__name__}: {exc}", None)
                    continue
                if response.status != 200:
                    record(None, f"{path}: HTTP {response.status}: {body[:200]!r}", None)
                    continue
                record(latency, None, _answer(path, response, body))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, name=f"bench-client-{n}", daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    outcome.wall_s = time.perf_counter() - t0
    return outcome


def _answer(path: str, response: http.client.HTTPResponse, body: bytes) -> str | None:
    """How the worker made this answer: a search's strategy, a context's ``X-Memcairn-Context`` header."""
    if path.startswith("/api/context/inject"):
        return response.getheader(CONTEXT_HEADER)
    if path.startswith("/api/search"):
        try:
            return json.loads(body).get("strategy")
        except (ValueError, AttributeError):
            return None
    return None


def scenarios(projects: Sequence[str], anchors: Sequence[int], n: int, seed: int = 23) -> list[Scenario]:
    """The work lists, ``n`` requests each; each request names one project in turn (except the all-projects
    search and the timeline)."""
    queries = synthetic_queries(n, seed=seed)
    one = [projects[i % len(projects)] for i in range(n)]
    at = [anchors[i % len(anchors)] for i in range(n)]
    pairs = list(zip(queries, one, strict=True))

    def search(**params: Any) -> str:
        return "/api/search?" + urlencode({k: v for k, v in params.items() if v is not None})

    return [
        Scenario("floor", "GET /api/health (the HTTP path alone)", ["/api/health"] * n),
        Scenario("context", "GET /api/context/inject, 1 project",
                 [f"/api/context/inject?{urlencode({'projects': p})}" for p in one]),
        Scenario("context_fresh", "GET /api/context/inject, 1 project, memo missed",
                 [f"/api/context/inject?{urlencode({'projects': p, 'fresh': '1'})}" for p in one]),
        Scenario("keyword", "GET /api/search keyword, 1 project",
                 [search(query=q, project=p, mode="keyword", format="index") for q, p in pairs],
                 check_strategy="keyword"),
        Scenario("hybrid", "GET /api/search hybrid, 1 project",
                 [search(query=q, project=p, format="index") for q, p in pairs],
                 check_strategy="hybrid"),
        Scenario("hybrid", "GET /api/search hybrid, all projects",
                 [search(query=q, format="index") for q in queries], check_strategy="hybrid"),
        Scenario("filter", "GET /api/search filter-only, 1 project",
                 [search(project=p, type="bugfix", format="index") for p in one], check_strategy="filter_only"),
        Scenario("timeline", "GET /api/timeline, anchor id", [f"/api/timeline?anchor={a}" for a in at]),
    ]


def _goal(key: str, p95: float | None) -> tuple[str, str]:
    goal = GOAL_P95_MS.get(key)
    if goal is None:
        return "-", "-"
    if p95 is None:
        return f"p95 ≤ {goal:g} ms", "no data"
    return f"p95 ≤ {goal:g} ms", "yes" if p95 <= goal else "NO"


def row_for(scenario: Scenario, outcome: Outcome) -> dict[str, Any]:
    samples = outcome.latencies_ms
    done = len(samples) + outcome.errors
    p95 = round(percentile(samples, 95), 1) if samples else None
    goal, met = _goal(scenario.key, p95)
    return {
        "scenario": scenario.name, "requests": done, "errors": outcome.errors,
        "req/s": round(done / outcome.wall_s, 1) if outcome.wall_s else 0.0,
        "worker CPU ms/req": (round(outcome.worker_cpu_s * 1000 / done, 1)
                              if outcome.worker_cpu_s is not None and done else "-"),
        "median ms": round(statistics.median(samples), 1) if samples else "-",
        "p95 ms": p95 if p95 is not None else "-",
        "max ms": round(max(samples), 1) if samples else "-",
        "goal": goal, "met": met, "claude-mem 13.15.3": REFERENCE.get(scenario.key, "-"),
        "answers": ", ".join(f"{k} {v}" for k, v in sorted(outcome.answers.items())) or "-",
    }


# -- the whole run --------------------------------------------------------------------------------------
def run(items: int = 100_000, clients: int = 8, requests: int = 400, home: Path | None = None,
        projects: int = 20, model: str | None = None, cache_path: Path | None = None, warmup: int | None = None,
        log: Log = print) -> dict[str, Any]:
    """Build or reuse the store, start a real worker, drive every scenario, stop the worker.

    Raises:
        RuntimeError: the store, the mirror or the worker could not be brought up.
    """
    from memcairn.vectors.embedder import DEFAULT_MODEL
    from memcairn.wire.config import load_settings

    if clients < 1 or requests < 1 or items < 1 or projects < 1:
        raise ValueError("items, clients, requests and projects must be at least 1")
    cfg = load_settings()
    model = model or cfg.embedding_model or DEFAULT_MODEL
    cache_path = cache_path or cfg.home / "bench-cache" / "embeddings.sqlite"
    workdir: Path | None = None
    if home is None:
        workdir = Path(tempfile.mkdtemp(prefix="memcairn-bench-worker-"))
        home = workdir / "home"
    try:
        built = prepare_home(home, items, projects, model, cache_path, log)
        anchors = pick_anchors(home / "memcairn.db", built["max_id"], min(requests, 200))
        work = scenarios(built["projects"], anchors, requests)
        warm = warmup if warmup is not None else max(2 * clients, min(len(built["projects"]), 40))
        port = free_port()
        load_before = os.getloadavg()
        log(f"starting the worker on 127.0.0.1:{port} for {home} ...")
        with signals_unwind(), running_worker(home, port, model, log) as proc:
            health = wait_ready(proc, port, home, log)
            pid = int(health.get("pid") or proc.pid)
            for scenario in work:  # the first hybrid query also loads the model
                drive(port, scenario.paths[:warm], clients)
            after_warmup = memory_mb(pid)
            rows, problems = [], []
            for scenario in work:
                log(f"{scenario.name}: {len(scenario.paths)} requests from {clients} clients ...")
                cpu_before = cpu_seconds(pid)
                outcome = drive(port, scenario.paths, clients)
                cpu_after = cpu_seconds(pid)
                if cpu_before is not None and cpu_after is not None:
                    outcome.worker_cpu_s = cpu_after - cpu_before
                rows.append(row_for(scenario, outcome))
                problems += [f"{scenario.name}: {e}" for e in outcome.sample_errors]
                if scenario.check_strategy and scenario.check_strategy not in outcome.answers:
                    problems.append(f"{scenario.name}: no answer reported strategy {scenario.check_strategy!r} "
                                    f"(got {outcome.answers or 'none'})")
            at_end = memory_mb(pid)
        load_after = os.getloadavg()
        return {
            "items": built["items"], "projects": len(built["projects"]), "documents": built["documents"],
            "clients": clients, "requests": requests, "warmup": warm, "model": model, "home": str(home),
            "worker_pid": pid, "worker_exit_code": proc.returncode, "rows": rows,
            "memory": {"after_warmup": after_warmup, "end": at_end, "goal_mb": GOAL_RSS_MB},
            "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
            "cpus": os.cpu_count(), "problems": problems,
        }
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def memory_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    goal = result["memory"]["goal_mb"]
    rows = []
    for when, key in (("after warm-up", "after_warmup"), ("at the end", "end")):
        mem = result["memory"][key]
        peak = mem.get("peak_mb")
        rows.append({"worker memory": when, "VmRSS MB": mem.get("rss_mb") or "-", "VmHWM (peak) MB": peak or "-",
                     "goal": f"≤ {goal:g} MB", "met": "-" if peak is None else "yes" if peak <= goal else "NO"})
    return rows


def render(result: dict[str, Any]) -> str:
    from memcairn.bench.timing import render_table

    load = result["load_average"]
    head = (f"{result['items']:,} items in {result['projects']} project(s), {result['documents']:,} mirror documents "
            f"(sqlite-vec, {result['model']}); {result['clients']} clients, {result['requests']} requests per "
            f"scenario after {result['warmup']} warm-up requests; {result['cpus']} CPUs; load average "
            f"{' '.join(f'{x:.2f}' for x in load['before'])} before, {' '.join(f'{x:.2f}' for x in load['after'])} "
            "after")
    parts = [head, "", render_table(result["rows"]), "", render_table(memory_rows(result))]
    if result["problems"]:
        parts += ["", "Problems:", *(f"- {p}" for p in result["problems"])]
    return "\n".join(parts)
