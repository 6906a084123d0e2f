"""A full disk loses no hook event: real ``memcairn hook user-prompt-submit`` processes, a real worker whose
``MEMCAIRN_HOME`` is on a small tmpfs (mounted here: needs the right to mount, as root in a container).

The worker keeps ``disk-reserve`` while there is room and frees it when the disk is full (so the spool and
SQLite's checkpoint can go on); an event the store refuses for lack of space is held in the worker's memory
and acknowledged as held, then queued once there is room; no failure leaves a temporary file behind.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from hook_helpers import Workers, hook, hook_env, make_project, payload
from processes import wait_for

from memcairn.bench.faults_disk_hooks import fill_up
from memcairn.hooks import state
from memcairn.wire import spool

PROMPTS = 50


def free(path: Path, size: int) -> None:
    """Give ``size`` bytes of the ballast back to the disk."""
    os.truncate(path, max(0, path.stat().st_size - size))


def reserve_spent(reserve: Path) -> bool:
    """Whether the disk reserve is gone (spent on earlier full disks), else spend it."""
    if not reserve.exists():
        return True
    reserve.unlink()
    return False


def temporaries(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(spool.TMP_PREFIX))


def stored_prompts(home: Path) -> set[str]:
    try:
        with sqlite3.connect(f"file:{home / 'memcairn.db'}?mode=ro", uri=True, timeout=5) as conn:
            rows = conn.execute("SELECT payload FROM ingest_events WHERE event_type = 'session_init'").fetchall()
    except sqlite3.Error:
        return set()
    return {json.loads(payload_)["prompt"] for (payload_,) in rows}


@pytest.mark.slow
def test_fifty_prompt_hooks_on_a_full_disk_lose_nothing_and_leave_no_temporary_file(
        small_disk: Path, workers: Workers, tmp_path: Path) -> None:
    home = small_disk / "home"
    project = make_project(tmp_path)
    env = {**hook_env(home), "MEMCAIRN_HOME": str(home), "MEMCAIRN_VECTOR_BACKEND": "none",
           "MEMCAIRN_CAPTURE_BACKEND": "offline", "MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS": "0"}
    workers.start(env)
    reserve = home / spool.RESERVE_FILE
    wait_for(reserve.exists, 20, "the worker to make its disk reserve")
    fill_up(small_disk / "ballast")

    sent, errs = [], []
    for n in range(PROMPTS):
        while n >= 10 and not reserve_spent(reserve):  # another program takes whatever room comes back
            fill_up(small_disk / "ballast-2")
        prompt = f"disk prompt number {n}"
        out, err = hook(env, "user-prompt-submit", payload("user_prompt_submit", project, prompt=prompt),
                        cwd=project)
        assert "systemMessage" not in out, out
        sent.append(prompt)
        errs.append(err)
    assert not [e for e in errs if "it is lost" in e], [e for e in errs if "it is lost" in e][:3]
    assert any("holds this event in memory" in e for e in errs), errs[-3:]  # the worker's memory was needed
    assert temporaries(small_disk) == []
    assert not (home / state.STATE_FILE).exists()  # acknowledged: no failure was counted

    free(small_disk / "ballast-2", 700_000)  # a little room: the held events go to the queue
    wait_for(lambda: stored_prompts(home) >= set(sent), 60, "every prompt in the queue")
    assert temporaries(small_disk) == []

    os.remove(small_disk / "ballast")  # room again: the reserve comes back
    os.remove(small_disk / "ballast-2")
    wait_for(lambda: reserve.exists() and reserve.stat().st_size == spool.RESERVE_BYTES, 20,
             "the reserve to be made whole again")
    assert temporaries(small_disk) == []


def test_a_spool_write_on_a_full_disk_is_written_in_the_reserve_and_a_failed_one_leaves_nothing(
        small_disk: Path) -> None:
    home = small_disk / "home"
    home.mkdir()
    reserve = home / spool.RESERVE_FILE
    assert spool.keep_reserve(str(home)) and reserve.stat().st_size == spool.RESERVE_BYTES
    fill_up(small_disk / "ballast")
    name = spool.write(str(home), "/api/sessions/init", b'{"prompt": "' + b"x" * 20000 + b'"}')
    assert spool.decode((home / spool.SPOOL_DIR / name).read_bytes())[0] == "/api/sessions/init"
    assert 0 < reserve.stat().st_size < spool.RESERVE_BYTES  # the rest stays reserved
    spool.release_reserve(str(home))
    fill_up(small_disk / "ballast-2")
    with pytest.raises(OSError):
        spool.write(str(home), "/api/sessions/init", b'{"prompt": "' + b"y" * 200000 + b'"}')
    assert not spool.keep_reserve(str(home))  # no room for it: not made, and no partial file
    assert temporaries(small_disk) == [] and not reserve.exists()


def test_hook_state_on_a_full_disk_leaves_no_temporary_file(small_disk: Path) -> None:
    home = small_disk / "home"
    home.mkdir()
    fill_up(small_disk / "ballast")
    for _ in range(5):
        assert state.record_failure(str(home), "no worker " * 40, can_notify=True) is False
    assert temporaries(small_disk) == []


def test_held_events_go_to_the_spool_when_the_queue_still_refuses_them(tmp_path: Path) -> None:
    from memcairn.core.errors import DiskFullError
    from memcairn.worker.held_events import HeldEvents
    from memcairn.worker.spool_drain import Rejected

    held = HeldEvents(max_events=2)
    assert held.hold("k1", "/api/sessions/init", b'{"n": 1}') and held.hold("k1", "/api/sessions/init", b"{}")
    assert held.hold("k2", "/api/sessions/init", b'{"n": 2}') and not held.hold("k3", "/api/sessions/init", b"{}")
    taken: list[bytes] = []
    lock = threading.Lock()

    def accept(route: str, body: bytes) -> str:
        with lock:
            if not taken:
                taken.append(body)
                return "queued"
        raise DiskFullError("the disk is full")

    report = held.flush(accept, str(tmp_path), Rejected)
    assert (report.queued, report.spooled, report.kept, len(held)) == (1, 1, 0, 0)
    assert taken == [b'{"n": 1}']
    assert [spool.decode(Path(p).read_bytes())[1] for p in spool.pending(str(tmp_path))] == [b'{"n": 2}']
