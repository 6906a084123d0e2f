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

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from memcairn.bench.faults_damage import (
    content_drift,
    corrupted_page,
    corrupted_page_live,
    damaged_index,
    dropped_table,
)
from memcairn.bench.faults_disk_hooks import disk_full_hooks
from memcairn.bench.faults_harness import Log, Row
from memcairn.bench.faults_processes import disk_full, held_lock, sigkill, writers
from memcairn.bench.poison import poison

SCENARIOS = ("sigkill", "writers", "lock", "disk", "disk-hooks", "corrupt", "corrupt-live", "fts", "drop", "drift",
             "poison")


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
            ("disk-hooks", lambda: disk_full_hooks(workdir, log)),
            ("corrupt", lambda: corrupted_page(workdir, items, log)),
            ("corrupt-live", lambda: corrupted_page_live(workdir, min(items, 60), log)),
            ("fts", lambda: damaged_index(workdir, items, searches, log, model)),
            ("drop", lambda: dropped_table(workdir, items, log)),
            ("drift", lambda: content_drift(workdir, min(items, 50), log)),
            ("poison", lambda: poison(workdir, log)),
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


def render(rows: list[Row]) -> str:
    from memcairn.bench.timing import render_table

    return render_table([r.as_dict() for r in rows])
