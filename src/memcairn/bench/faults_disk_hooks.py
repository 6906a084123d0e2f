"""``memcairn bench faults --only disk-hooks``: real prompt hooks against a worker whose disk is full.

``MEMCAIRN_HOME`` on a 16 MB tmpfs (mounted here; needs the right to mount, as root). The worker starts and
makes its disk reserve; a ballast file fills the disk; ``prompts`` real ``memcairn hook user-prompt-submit``
processes run one after another while another program keeps taking whatever room comes back (the reserve
included, from the 10th hook on); then ``free_bytes`` of the ballast are given back and the worker has
``settle_seconds`` to store what it holds.

A hook's event counts as acknowledged when the hook exited 0 (what the agent sees; a hook that said the event
is lost counts as a loss); stored means its prompt is in ``ingest_events`` once the worker stopped.
The notes count the events held in the worker's memory only (the one loss window: a worker killed then),
the temporary files left on the disk, and whether the reserve came back once the ballast was removed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

from memcairn.bench.faults_harness import Log, Row, _small_disk, _worker
from memcairn.bench.hooks import hook_command
from memcairn.wire import spool

TAG = "diskhook"
SPEND_FROM = 10  # from this hook on, another program takes every bit of room that comes back


def fill_up(path: Path) -> None:
    """Write ``path`` until the disk has no room left (unbuffered: closing it cannot fail)."""
    with open(path, "ab", buffering=0) as fh:
        for block in (65536, 4096):
            try:
                while fh.write(b"\0" * block):
                    pass
            except OSError:
                pass


def _temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(spool.TMP_PREFIX)]


def _stored(db: Path) -> tuple[set[str], int]:
    """The tags of stored prompt events, and how many rows repeat one."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT payload FROM ingest_events WHERE event_type = 'session_init' AND payload LIKE ?",
                            (f"%{TAG}-%",)).fetchall()
    finally:
        conn.close()
    keys = [json.loads(payload)["prompt"].split()[0] for (payload,) in rows]
    return set(keys), len(keys) - len(set(keys))


def _wait(check, seconds: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def disk_full_hooks(workdir: Path, log: Log, prompts: int = 50, free_bytes: int = 700_000,
                    settle_seconds: float = 30.0) -> Row:
    row = Row(f"full disk, {prompts} prompt hooks")
    mount = workdir / "disk-hooks"
    with _small_disk(mount, "16m") as why:
        if why is not None:
            row.skipped = f"cannot mount a 16 MB tmpfs here ({why})"
            return row
        home = mount / "home"
        home.mkdir()
        project = workdir / "disk-hooks-project"
        project.mkdir(exist_ok=True)
        reserve = home / spool.RESERVE_FILE
        held = said_lost = 0
        durations: list[float] = []
        with _worker(home) as worker:
            had_reserve = _wait(reserve.exists, 10)
            fill_up(mount / "ballast")
            for n in range(prompts):
                while n >= SPEND_FROM and reserve.exists():
                    reserve.unlink()
                    fill_up(mount / "ballast-2")
                body = {"session_id": "faults-disk-hooks", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
                        "prompt": f"{TAG}-{n} the disk is full and this prompt must still be remembered"}
                started = time.perf_counter()
                done = subprocess.run([*hook_command(), "hook", "user-prompt-submit"], input=json.dumps(body).encode(),
                                      capture_output=True, env=worker.env, cwd=str(project), timeout=120)
                durations.append(time.perf_counter() - started)
                row.sent += 1
                if done.returncode == 0:  # the agent's view: the hook took its event
                    row.acked.add(f"{TAG}-{n}")
                said_lost += b"it is lost" in done.stderr
                held += b"holds this event in memory" in done.stderr
            left_full = len(_temporaries(mount))
            stored_full = len(_stored(home / "memcairn.db")[0])
            ballast = mount / ("ballast-2" if (mount / "ballast-2").exists() else "ballast")
            os.truncate(ballast, max(0, ballast.stat().st_size - free_bytes))  # a little room comes back
            freed_at = time.monotonic()
            all_in = _wait(lambda: len(_stored(home / "memcairn.db")[0]) >= len(row.acked), settle_seconds)
            took = time.monotonic() - freed_at
            for name in ("ballast", "ballast-2"):
                if (mount / name).exists():
                    os.remove(mount / name)
            reserve_back = _wait(lambda: reserve.exists() and reserve.stat().st_size == spool.RESERVE_BYTES, 10)
            worker.drain(30)
        row.stored, row.duplicated = _stored(home / "memcairn.db")
        left = len(_temporaries(mount))
        row.notes.append(
            f"reserve at start: {'yes' if had_reserve else 'no'}; {stored_full} stored while full; {held} held in "
            f"the worker's memory only; {said_lost} hooks said lost; freed {free_bytes // 1000} KB: "
            f"{'all stored' if all_in else 'NOT all stored'} in {took:.1f} s; reserve back: "
            f"{'yes' if reserve_back else 'no'}; .tmp files left: {left_full} while full, {left} at the end; "
            f"hooks took {min(durations):.2f}-{max(durations):.2f} s")
    return row
