"""The campaign's scenarios that kill, crowd, block or starve the worker: SIGKILL, writers, a held lock, a full disk."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from memcairn.bench.faults_harness import (
    Log,
    Row,
    Worker,
    _env,
    _post_event,
    _request,
    _save,
    _small_disk,
    _stored_events,
    _stored_items,
    _worker,
)
from memcairn.bench.hooks import free_port, hook_command, payloads


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
