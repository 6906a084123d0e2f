"""The campaign's scenarios that damage the store file: a corrupted page, a damaged or dropped keyword index, drift."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memcairn.bench.faults_harness import Log, Row, _post_event, _request, _save, _stored_events, _stored_items, _worker


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
