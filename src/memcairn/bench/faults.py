"""``memcairn bench faults``: a reliability campaign against real processes, files and file systems.

Each scenario breaks something on purpose and counts, per write, what the system acknowledged and what the
store holds afterwards (read straight from SQLite once the worker stopped):

- **sigkill**: a client posts hook events (``/api/sessions/observations``) while the worker is SIGKILLed
  ``kills`` times at random moments and started again; then the queue is drained.
- **writers**: ``writers`` processes each add ``items`` memories through ``Store`` at once.
- **held lock**: another connection holds ``BEGIN IMMEDIATE`` for ``hold_seconds`` while ``hooks`` real
  ``memcairn hook post-tool-use`` processes run one after another; a hook counts as acknowledged unless it
  reported that memory is off, and a "memory is off" notice to the person is a false alarm.
- **disk full**: ``MEMCAIRN_HOME`` on a 3 MB tmpfs (mounted here; needs the right to mount, as root) with a
  1 MB ballast file; memories and events are sent until the disk is full, the ballast is removed, a few more
  are sent and the queue drains. Without the right to mount, the row says so and counts nothing.
- **disk full, real hooks** (``disk-hooks``, ``bench/faults_disk_hooks.py``): 50 ``memcairn hook
  user-prompt-submit`` processes against a worker on a full 16 MB tmpfs, then 700 KB freed.
- **corrupted page**: a leaf page of ``memory_items`` is overwritten while the worker is stopped; the worker
  must report the damage in ``/api/health`` and acknowledge no write after it.
- **corrupted page, worker running**: the same page overwritten under a running worker; once a read met the
  damage no save may be acknowledged, and those acknowledged before must be stored intact.
- **damaged keyword index**: every block of the FTS5 index is overwritten under a running worker while clients
  search and save; each search is judged by its answer (the right rows, the expected top hit, or a
  ``fallback_reason`` that says the index is damaged; a wrong answer that says nothing counts against the
  row), and the worker repairs the index by itself.
- **dropped keyword table**: the FTS5 table dropped twice under a running worker taking saves and hook
  events; every write must succeed, no event end failed, and keyword search find every memory after.
- **content drift**: an item's text is changed with the index's trigger off; the worker's idle-time check
  must find and repair it by itself (keyword search then finds the new word).
- **poison**: healthy sessions post hook events while a body with ``1e999`` is posted and rows holding
  ``Infinity`` and ``NaN`` are planted in the queue (``bench/poison.py``); every healthy event must be captured.

Acknowledged means the answer said stored (200 with an id, 202 accepted); stored means the row is in the file
at the end. ``lost`` counts acknowledged writes not stored, ``duplicated`` writes stored more than once; the
design promises both are 0 in every scenario (a refused write is not acknowledged, and is no loss). A row
holds only with no wrong answer either (``Row.wrong_answers``, named in its notes).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.bench.hooks import free_port, hook_command, payloads

Log = Callable[[str], None]
READY_TIMEOUT = 60.0
SESSION = "faults-session"


@dataclass
class Row:
    """One scenario's counts; ``acked`` and ``stored`` are sets of keys naming each write."""

    scenario: str
    sent: int = 0
    acked: set[str] = field(default_factory=set)
    stored: set[str] = field(default_factory=set)
    duplicated: int = 0
    refused: int = 0
    server_errors: int = 0  # 5xx answers other than the ones the design gives (507, store_damaged)
    unanswered: int = 0  # no answer at all (the worker was killed or not up yet)
    wrong_answers: int = 0  # answers that said nothing of being wrong (a search, a save into a damaged file)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def lost(self) -> int:
        return len(self.acked - self.stored)

    def as_dict(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"scenario": self.scenario, "sent": "-", "acknowledged": "-", "stored": "-", "lost": "-",
                    "duplicated": "-", "refused": "-", "unexpected 5xx": "-", "held": "skipped",
                    "notes": self.skipped}
        held = self.lost == 0 and self.duplicated == 0 and self.server_errors == 0 and self.wrong_answers == 0
        return {"scenario": self.scenario, "sent": self.sent, "acknowledged": len(self.acked),
                "stored": len(self.stored), "lost": self.lost,
                "duplicated": self.duplicated, "refused": self.refused, "unexpected 5xx": self.server_errors,
                "held": "yes" if held else "NO", "notes": "; ".join(self.notes)}


# -- processes and requests -----------------------------------------------------------------------------
def _env(home: Path, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env.update(MEMCAIRN_HOME=str(home), MEMCAIRN_PORT=str(port), MEMCAIRN_VECTOR_BACKEND="none",
               MEMCAIRN_CAPTURE_BACKEND="offline", MEMCAIRN_WORKER_AUTOSTART="0",
               MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS="0")
    env.update(extra)
    return env


def _request(port: int, method: str, path: str, body: Any = None, timeout: float = 30.0,
             raw: bytes | None = None) -> tuple[int, Any]:
    """(status, parsed JSON or None); status 0 when the connection failed. ``raw``: a body as given (one that
    is no JSON ``json.dumps`` would write)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        raw = response.read()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, None
    except (OSError, http.client.HTTPException):  # refused, reset, cut short (a killed worker)
        return 0, None
    finally:
        conn.close()


class Worker:
    """A ``memcairn worker run`` process for ``home``; ``kill`` sends SIGKILL, ``stop`` SIGTERM."""

    def __init__(self, home: Path, port: int, env: dict[str, str]) -> None:
        self.home, self.port, self.env = home, port, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "memcairn", "worker", "run"], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=str(self.home))
        deadline = time.monotonic() + READY_TIMEOUT
        while _request(self.port, "GET", "/api/readiness", timeout=2.0)[0] != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited with code {self.proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker was not ready within {READY_TIMEOUT:.0f} s")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def drain(self, timeout: float = 120.0) -> None:
        """Wait until the hook event queue has nothing pending."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, stats = _request(self.port, "GET", "/api/stats")
            if status == 200 and stats["ingest"]["pending"] == 0:
                return
            time.sleep(0.2)


@contextlib.contextmanager
def _worker(home: Path, **env: str) -> Iterator[Worker]:
    port = free_port()
    worker = Worker(home, port, _env(home, port, **env))
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def _event(n: int, tag: str) -> dict[str, Any]:
    body = payloads("/work/faults-project", n)["post-tool-use"]
    return {**body, "session_id": SESSION, "project": "faults", "tool_use_id": f"{tag}-{n}"}


def _stored_events(db: Path, tag: str) -> tuple[set[str], int]:
    """Tool use ids of stored events with this tag, and how many rows repeat one."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = [r[0] for r in conn.execute("SELECT tool_use_id FROM ingest_events WHERE tool_use_id LIKE ?",
                                           (f"{tag}-%",))]
    finally:
        conn.close()
    return set(rows), len(rows) - len(set(rows))


def _stored_items(db: Path, tag: str, after_id: int = 0) -> tuple[set[str], int]:
    """Texts of stored memories starting with this tag (the key is the text's first word) among the rows past
    ``after_id`` (a seek: a damaged page before it is not read), and how many rows repeat one."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows: list[str] = []
    try:
        for (text,) in conn.execute("SELECT text FROM memory_items WHERE id > ? AND kind = 'manual' AND text LIKE ?",
                                    (after_id, f"{tag}-%")):
            rows.append(text.split()[0])
    finally:
        conn.close()
    return set(rows), len(rows) - len(set(rows))


def _save(port: int, row: Row, key: str, size: int = 200) -> int:
    """POST one memory; count it; return the status."""
    row.sent += 1
    status, body = _request(port, "POST", "/api/memory/save",
                            {"project": "faults", "text": f"{key} " + "fault campaign text " * (size // 20)})
    if status == 200 and isinstance(body, dict) and body.get("id"):
        row.acked.add(key)
    elif status in (507,) or (isinstance(body, dict) and body.get("error") == "store_damaged"):
        row.refused += 1
    elif status >= 500:
        row.server_errors += 1
    elif status == 0:
        row.unanswered += 1
    return status


def _post_event(port: int, row: Row, n: int, tag: str) -> int:
    row.sent += 1
    status, body = _request(port, "POST", "/api/sessions/observations", _event(n, tag))
    if status == 202 and isinstance(body, dict) and body.get("status") == "accepted":
        row.acked.add(f"{tag}-{n}")
    elif status == 507:
        row.refused += 1
    elif status >= 500:
        row.server_errors += 1
    elif status == 0:
        row.unanswered += 1
    return status


# -- scenarios --------------------------------------------------------------------------------------------
def sigkill(workdir: Path, kills: int, log: Log, seed: int = 7) -> Row:
    row = Row(f"SIGKILL x {kills} mid-ingest")
    home = workdir / "sigkill"
    home.mkdir()
    rng = random.Random(seed)
    port = free_port()
    worker = Worker(home, port, _env(home, port))
    counter = iter(range(10**9))
    for k in range(kills):
        worker.start()
        stop = threading.Event()

        def client(stop: threading.Event = stop) -> None:
            while not stop.is_set():
                _post_event(port, row, next(counter), "kill")

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.3, 2.0))  # the capture processes what came in so far meanwhile
        stop.set()  # requests in flight are cut by the kill; none is sent to a dead worker
        worker.kill()
        for t in threads:
            t.join()
        if (k + 1) % 10 == 0:
            log(f"  {k + 1} kills, {len(row.acked)} events acknowledged")
    worker.start()
    worker.drain()
    status, stats = _request(port, "GET", "/api/stats")
    worker.stop()
    row.stored, row.duplicated = _stored_events(home / "memcairn.db", "kill")
    done = stats["ingest"]["done"] if status == 200 else "?"
    row.notes.append(f"{row.unanswered} requests unanswered (the worker killed or starting); "
                     + (f"{done} events processed in all, {stats['ingest']['failed']} failed"
                        if status == 200 else "stats unavailable"))
    return row


_WRITER = """
import json, sys
from memcairn.core.models import NewItem
from memcairn.store import Store
db, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
acked, errors = [], []
with Store(db) as store:
    for i in range(n):
        key = f"{tag}-{i}"
        try:
            store.add_item(NewItem(project="faults", kind="manual", text=f"{key} written by a concurrent writer"))
            acked.append(key)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"acked": acked, "errors": errors[:3], "error_count": len(errors)}))
"""


def writers(workdir: Path, count: int, items: int, log: Log) -> Row:
    row = Row(f"{count} writers x {items:,} items")
    db = workdir / "writers" / "memcairn.db"
    db.parent.mkdir()
    from memcairn.store import Store

    Store(db).close()  # created and migrated once, not by four processes at once
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(db), f"w-{w}", str(items)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={k: v for k, v in os.environ.items()
                                                           if not k.startswith("MEMCAIRN_")})
             for w in range(count)]
    errors = 0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            row.notes.append(f"a writer exited {proc.returncode}: {err.decode()[-200:]}")
            continue
        result = json.loads(out)
        row.acked.update(result["acked"])
        errors += result["error_count"]
        row.notes += result["errors"]
    row.sent = count * items
    row.refused = errors
    row.stored, row.duplicated = _stored_items(db, "w")
    row.notes.append(f"{errors} write errors")
    return row


def held_lock(workdir: Path, hooks: int, hold_seconds: float, log: Log) -> Row:
    row = Row(f"write lock held {hold_seconds:g} s, {hooks} hooks")
    home = workdir / "lock"
    home.mkdir()
    project = workdir / "faults-project"
    project.mkdir(exist_ok=True)
    with _worker(home) as worker:
        env = {**worker.env}
        holder = sqlite3.connect(str(home / "memcairn.db"), isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")
        held_at = time.monotonic()
        alarms, durations = 0, []
        try:
            for n in range(hooks):
                body = {**payloads(str(project), n)["post-tool-use"], "tool_use_id": f"lock-{n}"}
                started = time.perf_counter()
                done = subprocess.run([*hook_command(), "hook", "post-tool-use"], input=json.dumps(body).encode(),
                                      capture_output=True, env=env, cwd=str(project), timeout=120)
                durations.append(time.perf_counter() - started)
                row.sent += 1
                if b"memory is off" not in done.stderr:
                    row.acked.add(f"lock-{n}")
                if b"memory is off" in done.stdout:
                    alarms += 1
        finally:
            time.sleep(max(0.0, hold_seconds - (time.monotonic() - held_at)))
            holder.execute("ROLLBACK")
            holder.close()
        deadline = time.monotonic() + 60  # hooks that kept the event for later send it on their own
        while time.monotonic() < deadline:
            stored, _ = _stored_events(home / "memcairn.db", "lock")
            if len(stored) >= row.sent:
                break
            time.sleep(0.5)
        worker.drain()
    row.stored, row.duplicated = _stored_events(home / "memcairn.db", "lock")
    row.notes.append(f"hooks took {min(durations):.1f}-{max(durations):.1f} s; {alarms} 'memory is off' notices; "
                     f"{len(row.stored)} of {row.sent} events stored after the release")
    return row


@contextlib.contextmanager
def _small_disk(path: Path, size: str = "3m") -> Iterator[str | None]:
    """A tmpfs of ``size`` at ``path``: yields None when mounted, else why it could not be."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        yield done.stderr.decode(errors="replace").strip() or "mount failed"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def disk_full(workdir: Path, log: Log, settle_seconds: float = 7.0) -> Row:
    """``settle_seconds``: the wait after the ballast is removed (the worker empties the WAL) and again after
    the last writes (it queues again what failed for lack of space), a little more than its retry period."""
    row = Row("3 MB disk fills")
    mount = workdir / "disk"
    with _small_disk(mount) as why:
        if why is not None:
            row.skipped = f"cannot mount a 3 MB tmpfs here ({why})"
            return row
        home = mount / "home"
        home.mkdir()
        (mount / "ballast").write_bytes(b"\0" * 1_000_000)
        db = home / "memcairn.db"
        full_answers = 0
        with _worker(home) as worker:
            n = 0
            while full_answers < 5 and n < 2000:  # memories and events alike, until the disk said full 5 times
                n += 1
                status = _save(worker.port, row, f"disk-{n}", size=4000) if n % 2 else \
                    _post_event(worker.port, row, n, "diskev")
                full_answers += status == 507
            os.remove(mount / "ballast")
            time.sleep(settle_seconds)
            for m in range(n + 1, n + 21):
                _save(worker.port, row, f"disk-{m}", size=200) if m % 2 else _post_event(worker.port, row, m, "diskev")
            time.sleep(settle_seconds)
            worker.drain()
            _, health = _request(worker.port, "GET", "/api/health")
            _, stats = _request(worker.port, "GET", "/api/stats")
        items, dup_items = _stored_items(db, "disk")
        events, dup_events = _stored_events(db, "diskev")
        row.stored, row.duplicated = items | events, dup_items + dup_events
        log_lines = (home / "logs" / "worker.log").read_text(errors="replace") if (home / "logs" / "worker.log"
                                                                                    ).exists() else ""
        row.notes.append(f"{full_answers} answers 507 before the ballast was removed; queue after: "
                         f"{stats['ingest']['pending']} pending, {stats['ingest']['failed']} failed; "
                         f"health {health['store']['state'] if health else '?'}; "
                         f"log lines dropped: {'yes' if 'could not be written' in log_lines else 'no'}")
    return row


def corrupted_page(workdir: Path, items: int, log: Log) -> Row:
    """Counts the writes sent after the damage (none may be acknowledged); the rows written before are in the
    notes, with those the damaged page took with it (lost by the disk, not by a write)."""
    from memcairn.bench.damage import corrupt_page

    row = Row("corrupted page")
    home = workdir / "corrupt"
    home.mkdir()
    db = home / "memcairn.db"
    from memcairn.core.models import NewItem
    from memcairn.store import Store

    with Store(db) as store:  # written straight to the store: what matters is after the damage
        top = max(store.add_item(NewItem(project="faults", kind="manual",
                                         text=f"before-{n} " + "fault campaign text " * 75)).id for n in range(items))
    corrupt_page(db)
    with _worker(home) as worker:
        _, health = _request(worker.port, "GET", "/api/health")
        for n in range(20):
            _save(worker.port, row, f"after-{n}")
        context, _ = _request(worker.port, "GET", "/api/context/inject?project=faults")
    row.stored, row.duplicated = _stored_items(db, "after", after_id=top)
    readable = _readable_ids(db, top)
    state = (health or {}).get("store") or {}
    row.notes.append(f"health {state.get('state')}; context inject answered {context}; of the {items} rows "
                     f"written before the damage {readable} are still readable one by one")
    return row


def _readable_ids(db: Path, top: int) -> int:
    """How many of the rows 1..top can be read by id (a damaged page loses those it held)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    readable = 0
    try:
        for item_id in range(1, top + 1):
            try:
                readable += conn.execute("SELECT 1 FROM memory_items WHERE id = ?", (item_id,)).fetchone() is not None
            except sqlite3.DatabaseError:
                pass
    finally:
        conn.close()
    return readable


def corrupted_page_live(workdir: Path, items: int, log: Log, clients: int = 4, seconds: float = 2.0,
                        filler_mb: int = 24) -> Row:
    """A leaf page of ``memory_items`` overwritten while the worker runs; then ``clients`` threads save for
    ``seconds`` while another reads the oldest memories, which meets the damage. A save sent after that read
    was answered must not be acknowledged (a wrong answer: a write into a file known to fail its check); one
    acknowledged before must be stored intact. ``filler_mb`` of other memories make SQLite's check of the file
    take as long as it does on a store in use (tens of milliseconds)."""
    from memcairn.bench.damage import corrupt_page
    from memcairn.core.models import NewItem
    from memcairn.store import Store

    row = Row("corrupted page, worker running")
    home = workdir / "corrupt-live"
    home.mkdir()
    db = home / "memcairn.db"
    with Store(db) as store:
        store.add_items([NewItem(project="faults", kind="manual", text=f"before-{n} " + "fault campaign text " * 75)
                         for n in range(items)])
        filler = [NewItem(project="filler", kind="manual", text=f"filler-{n} " + "x" * 2000)
                  for n in range(filler_mb * 500)]
        for start in range(0, len(filler), 1000):
            store.add_items(filler[start:start + 1000])
    top = max(_keys_to_ids(db, "before").values())
    with _worker(home) as worker:
        deadline = time.monotonic() + 60  # the check at start (a file this large is not checked at open) first
        while not ((_request(worker.port, "GET", "/api/health")[1] or {}).get("store") or {}).get("checked_at"):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        corrupt_page(db)
        met: list[float] = []  # when the first read that met the damage was answered
        late: list[str] = []
        stop = threading.Event()
        counter = iter(range(10**9))
        lock = threading.Lock()

        def saver() -> None:
            while not stop.is_set():
                with lock:
                    key = f"live-{next(counter)}"
                sent_at = time.monotonic()
                if _save(worker.port, row, key) == 200 and met and sent_at > met[0]:
                    late.append(key)

        threads = [threading.Thread(target=saver) for _ in range(clients)]
        for t in threads:
            t.start()
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            status, _ = _request(worker.port, "GET", "/api/search?format=json&orderBy=oldest&limit=100"
                                                     "&project=faults")
            if status != 200 and not met:
                met.append(time.monotonic())
            time.sleep(0.02)
        stop.set()
        for t in threads:
            t.join()
        _, health = _request(worker.port, "GET", "/api/health")
    row.stored, row.duplicated = _intact_items(db, "live", top)
    row.wrong_answers += len(late)
    state = (health or {}).get("store") or {}
    row.notes.append(f"a read met the damage {met[0] - started:.2f} s in; " if met else "no read met the damage; ")
    row.notes[-1] += (f"{len(late)} saves sent after that acknowledged; health {state.get('state')}; "
                      f"{_readable_ids(db, top)} of the {items} rows written before are still readable one by one")
    return row


def _intact_items(db: Path, tag: str, after_id: int) -> tuple[set[str], int]:
    """``_stored_items``, counting only rows whose whole text is what ``_save`` sent."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    keys: list[str] = []
    try:
        for (text,) in conn.execute("SELECT text FROM memory_items WHERE id > ? AND kind = 'manual' AND text LIKE ?",
                                    (after_id, f"{tag}-%")):
            key = text.split()[0]
            if text == f"{key} " + "fault campaign text " * 10:
                keys.append(key)
    finally:
        conn.close()
    return set(keys), len(keys) - len(set(keys))


def _fts_text(n: int) -> str:
    """Nine memories in ten hold "zebra"; each holds a word no other does (``k<n>x``)."""
    return f"fts-{n} {'zebra ' if n % 10 else ''}k{n}x " + "fault campaign text " * 8


def _keys_to_ids(db: Path, tag: str) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {text.split()[0]: int(item_id) for item_id, text in conn.execute(
            "SELECT id, text FROM memory_items WHERE kind = 'manual' AND text LIKE ?", (f"{tag}-%",))}
    finally:
        conn.close()


def _judge(status: int, body: Any, right: Callable[[list[int]], bool]) -> str:
    """``right``, ``fell back`` (the answer says the keyword index is damaged), ``wrong`` (a wrong answer that
    says nothing) or ``failed`` (no 200)."""
    if status != 200 or not isinstance(body, dict):
        return "failed"
    if body.get("fallback_reason") == "keyword_index_damaged":
        return "fell back"
    return "right" if right([r["id"] for r in body.get("results", [])]) else "wrong"


def _fts_searches(port: int, ids: dict[str, int], count: int, rng: random.Random,
                  between: Callable[[int], None] | None = None) -> dict[str, dict[str, int]]:
    """``count`` searches, by turns keyword ("zebra": 20 rows that hold it) and hybrid (a memory's own word: that
    memory first), each by turns through the in-memory copy and FTS5 itself (a concept filter, which the copy
    does not answer); the verdicts counted per leg. ``between(n)`` runs after search ``n``."""
    holders = {i for key, i in ids.items() if int(key.split("-")[1]) % 10}
    tally: dict[str, dict[str, int]] = {"keyword": {}, "hybrid": {}}
    for n in range(count):
        concept = "&concepts=campaign" if (n // 2) % 2 else ""
        if n % 2 == 0:
            status, body = _request(port, "GET", f"/api/search?query=zebra&format=json&mode=keyword&min_score=0"
                                                 f"&limit=20{concept}")
            verdict = _judge(status, body, lambda got: len(got) == min(20, len(holders)) and set(got) <= holders)
            leg = "keyword"
        else:
            key = rng.choice(sorted(ids))
            status, body = _request(port, "GET", f"/api/search?query=k{key.split('-')[1]}x&format=json&min_score=0"
                                                 f"&limit=5{concept}")
            verdict = _judge(status, body, lambda got, want=ids[key]: bool(got) and got[0] == want)
            leg = "hybrid"
        tally[leg][verdict] = tally[leg].get(verdict, 0) + 1
        if between is not None:
            between(n)
    return tally


def _tally_note(tally: dict[str, dict[str, int]]) -> str:
    return ", ".join(f"{leg} {sum(v.values())}: " + " ".join(f"{n} {what}" for what, n in sorted(v.items()))
                     for leg, v in tally.items() if v)


def damaged_index(workdir: Path, items: int, searches: int, log: Log, model: str | None = None) -> Row:
    """The worker as configured by default (the mirror on, the in-memory keyword copy on, the idle-time check
    every 30 minutes). Every search is judged by its answer: a keyword search right when it returns rows that
    hold the word (as many as asked), a hybrid one when the memory its word names comes first; an answer that
    says the keyword index is damaged (``fallback_reason``) is no wrong answer, a wrong one that says nothing is.
    The same searches run before the damage, where all must be right. ``model``: the embedding model (default:
    the setting's)."""
    from memcairn.bench.damage import damage_keyword_index

    row = Row("damaged keyword index")
    home = workdir / "fts"
    home.mkdir()
    db = home / "memcairn.db"
    rng = random.Random(5)
    with _worker(home, MEMCAIRN_VECTOR_BACKEND="sqlite-vec",
                 **({"MEMCAIRN_EMBEDDING_MODEL": model} if model else {})) as worker:
        for n in range(items):
            row.sent += 1
            status, body = _request(worker.port, "POST", "/api/memory/save",
                                    {"project": "faults", "text": _fts_text(n), "concepts": ["campaign"]})
            if status == 200 and isinstance(body, dict) and body.get("id"):
                row.acked.add(f"fts-{n}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (_request(worker.port, "GET", "/api/stats")[1] or {}).get(
                "mirror", {}).get("lag") not in (0,):
            time.sleep(0.1)
        ids = _keys_to_ids(db, "fts")
        before = _fts_searches(worker.port, ids, min(searches, 8), rng)
        damage_keyword_index(db, every_block=True)  # whichever block the query reads
        started = time.monotonic()
        states: set[str] = set()
        repaired: list[float] = []

        def meanwhile(n: int) -> None:  # a write after each search; health as it stands
            _save(worker.port, row, f"fts-{items + n}")
            health = _request(worker.port, "GET", "/api/health")[1] or {}
            states.add(str((health.get("store") or {}).get("state")))
            if not repaired and any("rebuilt" in r for r in (health.get("store") or {}).get("repairs", [])):
                repaired.append(time.monotonic() - started)

        tally = _fts_searches(worker.port, ids, searches, rng, meanwhile)
        while not repaired and time.monotonic() - started < 60:
            if _repaired(worker.port):
                repaired.append(time.monotonic() - started)
            time.sleep(0.2)
        repaired_after = repaired[0] if repaired else None
        after = _fts_searches(worker.port, ids, min(searches, 8), rng)
    row.stored, row.duplicated = _stored_items(db, "fts")
    failed = sum(t.get("failed", 0) for t in tally.values())
    row.server_errors += failed
    row.wrong_answers += sum(t.get("wrong", 0) for t in (*tally.values(), *after.values(), *before.values()))
    fell_back = sum(t.get("fell back", 0) for t in tally.values())
    row.notes.append(f"before the damage {_tally_note(before)}; with it {_tally_note(tally)} ({failed} failed, "
                     f"{fell_back} answered by the semantic leg alone); health said {'/'.join(sorted(states))}; "
                     + (f"repaired by the worker {repaired_after:.1f} s after the damage" if repaired_after is not None
                        else "not repaired within 60 s")
                     + f"; after the repair {_tally_note(after)}")
    return row


def dropped_table(workdir: Path, items: int, log: Log) -> Row:
    """The keyword index's table dropped (as a stray tool would) twice while the worker takes saves and hook
    events: every write must be acknowledged and stored, no event may end failed, and keyword search must find
    every memory afterwards."""
    from memcairn.bench.damage import drop_keyword_table

    row = Row("keyword table dropped")
    home = workdir / "drop"
    home.mkdir()
    db = home / "memcairn.db"
    with _worker(home) as worker:
        for n in range(items):
            if n in (items // 3, 2 * items // 3):
                drop_keyword_table(db)
            _save(worker.port, row, f"drop-{n}") if n % 2 else _post_event(worker.port, row, n, "dropev")
        worker.drain()
        _, stats = _request(worker.port, "GET", "/api/stats")
        _, found = _request(worker.port, "GET", "/api/search?query=campaign&format=json&mode=keyword&min_score=0"
                                                "&limit=100&kinds=manual")
        _, health = _request(worker.port, "GET", "/api/health")
    items_, dup_items = _stored_items(db, "drop")
    events, dup_events = _stored_events(db, "dropev")
    row.stored, row.duplicated = items_ | events, dup_items + dup_events
    failed = (stats or {}).get("ingest", {}).get("failed", "?")
    hits = len((found or {}).get("results", []))
    if hits != min(100, len(items_)):
        row.wrong_answers += 1
    row.notes.append(f"events failed: {failed}; keyword search found {hits} of {len(items_)} saved memories "
                     f"(fallback {(found or {}).get('fallback_reason')}); health "
                     f"{((health or {}).get('store') or {}).get('state')}")
    if failed not in (0, "?"):
        row.wrong_answers += int(failed)
    return row


def content_drift(workdir: Path, items: int, log: Log, check_seconds: int = 5) -> Row:
    """An item's text changed with the index's trigger off: no search fails, so only the worker's idle-time
    check (every ``check_seconds`` here) can find it; writes go on meanwhile."""
    from memcairn.bench.damage import drift_content

    row = Row(f"content drift (check every {check_seconds} s)")
    home = workdir / "drift"
    home.mkdir()
    db = home / "memcairn.db"
    with _worker(home, MEMCAIRN_INTEGRITY_CHECK_SECONDS=str(check_seconds)) as worker:
        for n in range(items):
            _save(worker.port, row, f"drift-{n}")
        drift_content(db, 1, "drift-0 okapi")
        started = time.monotonic()
        found_after = None
        n = items
        while found_after is None and time.monotonic() - started < 120:
            if _repaired(worker.port):
                found_after = time.monotonic() - started
            elif n < items + 10:  # a few writes; then quiet, as the check waits for an idle moment
                _save(worker.port, row, f"drift-{n}")
                n += 1
            time.sleep(0.5)
        _, body = _request(worker.port, "GET", "/api/search?query=okapi&format=json&mode=keyword")
    row.stored, row.duplicated = _stored_items(db, "drift")
    row.notes.append((f"repaired by the worker {found_after:.1f} s after the change" if found_after is not None
                      else "not repaired within 120 s")
                     + f"; keyword search for the new word: {len((body or {}).get('results', []))} hit")
    return row


def _repaired(port: int) -> bool:
    """The worker's health lists a rebuild of the keyword index among its repairs."""
    _, health = _request(port, "GET", "/api/health")
    return any("rebuilt" in r for r in ((health or {}).get("store") or {}).get("repairs", []))


# -- the campaign -----------------------------------------------------------------------------------------
SCENARIOS = ("sigkill", "writers", "lock", "disk", "disk-hooks", "corrupt", "corrupt-live", "fts", "drop", "drift",
             "poison")


def _disk_hooks(workdir: Path, log: Log) -> Row:
    from memcairn.bench.faults_disk_hooks import disk_full_hooks  # real prompt hooks on a full disk

    return disk_full_hooks(workdir, log)


def run(kills: int = 30, writer_count: int = 4, writer_items: int = 1000, hooks: int = 5, hold_seconds: float = 10.0,
        items: int = 200, searches: int = 30, settle_seconds: float = 7.0, only: tuple[str, ...] = SCENARIOS,
        model: str | None = None, log: Log = print) -> list[Row]:
    """Run the scenarios named in ``only`` (all by default) with these counts; one row each."""
    workdir = Path(tempfile.mkdtemp(prefix="memcairn-faults-"))
    rows: list[Row] = []
    try:
        plan: list[tuple[str, Callable[[], Row]]] = [
            ("sigkill", lambda: sigkill(workdir, kills, log)),
            ("writers", lambda: writers(workdir, writer_count, writer_items, log)),
            ("lock", lambda: held_lock(workdir, hooks, hold_seconds, log)),
            ("disk", lambda: disk_full(workdir, log, settle_seconds)),
            ("disk-hooks", lambda: _disk_hooks(workdir, log)),
            ("corrupt", lambda: corrupted_page(workdir, items, log)),
            ("corrupt-live", lambda: corrupted_page_live(workdir, min(items, 60), log)),
            ("fts", lambda: damaged_index(workdir, items, searches, log, model)),
            ("drop", lambda: dropped_table(workdir, items, log)),
            ("drift", lambda: content_drift(workdir, min(items, 50), log)),
            ("poison", lambda: _poison(workdir, log)),
        ]
        for name, scenario in plan:
            if name not in only:
                continue
            log(f"scenario {name} ...")
            started = time.monotonic()
            row = scenario()
            row.notes.append(f"{time.monotonic() - started:.0f} s")
            rows.append(row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def _poison(workdir: Path, log: Log) -> Row:
    from memcairn.bench.poison import poison  # a module of its own: it imports this one

    return poison(workdir, log)


def render(rows: list[Row]) -> str:
    from memcairn.bench.timing import render_table

    return render_table([r.as_dict() for r in rows])
