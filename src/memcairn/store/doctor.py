"""Health checks behind ``memcairn doctor``; each check says what it saw and, with fix, what it did."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcairn.core.clock import now_ms
from memcairn.wire.config import Settings

if TYPE_CHECKING:  # opened lazily (the doctor's start-up stays light)
    from memcairn.store import Store


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


STALE_QUEUE_MS = 10 * 60 * 1000


def _unreadable_check(store: Store, fix: bool) -> list[dict[str, str]]:
    """Events whose payload SQLite cannot read as JSON (``Infinity`` an earlier release stored): every query over
    their session failed, which stopped an earlier worker's capture for all sessions."""
    count = store.malformed_ingest_count()
    if not count:
        return []
    if fix:
        done = store.set_aside_malformed_ingest()
        return [_check("unreadable capture events", "fixed", f"set aside {len(done)}: " + "; ".join(done[:3]))]
    return [_check("unreadable capture events", "problem",
                   f"{count} queued hook event(s) hold a payload SQLite cannot read as JSON ("
                   + "; ".join(store.describe_malformed_ingest()) + "); a worker before this release stops "
                   "capturing on them: `memcairn doctor --fix` sets them aside (failed, the payload rewritten as "
                   "JSON with such a number kept as text)")]


def _queue_check(store: Store, cfg: Settings) -> dict[str, str]:
    """The queue's depth; stuck when its oldest pending event waits longer than any pass takes."""
    queue = store.ingest_queue()
    oldest = queue["oldest_pending_epoch"]
    age_ms = now_ms() - oldest if oldest else 0
    detail = f"{queue['pending']} pending, {queue['done']} processed, {queue['failed']} failed"
    if age_ms <= STALE_QUEUE_MS:
        return _check("capture queue", "ok", detail)
    first = store.oldest_pending_ingest() or {}
    tried = (f" (event {first['id']}, {first['event_type']}, tried {first['attempts']} time(s)"
             + (f", last error: {first['error']}" if first.get("error") else "") + ")") if first else ""
    return _check("capture queue", "problem",
                  f"{detail}; the oldest pending event waits for {age_ms // 60000} min{tried}. No worker running "
                  "(`memcairn worker status`): `memcairn worker start`. A worker running: its capture is stuck; "
                  f"http://127.0.0.1:{cfg.port}/api/health (`queue`) names the cause and the worker log each "
                  "failure; `memcairn doctor --fix` sets aside events no pass can read, then `memcairn worker "
                  "restart`")


def _capture_checks(store: Store, fix: bool, cfg: Settings) -> list[dict[str, str]]:
    """The hook event queue: unreadable events, depth, age, failures; and capture warnings not shown yet."""
    checks = _unreadable_check(store, fix)
    checks.append(_queue_check(store, cfg))
    queue = store.ingest_queue()
    if queue["failed"]:
        errors = "; ".join(store.failed_ingest_errors())
        if fix:
            checks.append(_check("failed capture events", "fixed",
                                 f"requeued {store.requeue_failed_ingest()} (last errors: {errors})"))
        else:
            checks.append(_check("failed capture events", "problem",
                                 f"{errors}; `memcairn doctor --fix` retries them, the worker log has details"))
    for notice in store.pending_capture_notices():
        checks.append(_check("capture notice", "warning", notice))
    return checks


def _damaged(db_path: object) -> str:
    from memcairn.store.integrity import damaged_file_advice

    return (f"the file is damaged and `memcairn doctor --fix` cannot repair it; memcairn refuses writes to it "
            f"until then: {damaged_file_advice(db_path)}")


HOOKS_HEARD_MS = 7 * 24 * 3600 * 1000  # hook events are kept this long (ingest_retention_days' default)
# What keeps an agent's registered hooks from running, by agent.
_WHY_SILENT = {
    "codex": "Codex runs a new or changed hook only after you trust it: open /hooks in Codex and trust the memcairn "
             "hooks (until then nothing of a Codex session is captured, and Codex does not say so)",
    "claude-code": "restart Claude Code (it reads its hooks at start); `claude --debug` shows hooks that fail",
    "gemini-cli": "restart Gemini CLI (it reads its hooks at start); check that hooks are enabled in its settings",
}


def hooks_checks(store: Store, registered: dict[str, str]) -> list[dict[str, str]]:
    """Agents whose hooks memcairn registered (platform -> the file holding them) but from whose hooks no event
    reached this store in the last week: hooks that never fire lose every session without a word."""
    heard = set(store.live_hook_platforms(now_ms() - HOOKS_HEARD_MS))
    checks = []
    for platform, where in sorted(registered.items()):
        if platform in heard:
            checks.append(_check(f"{platform} hooks", "ok", f"registered in {where}; events arrive"))
        else:
            checks.append(_check(f"{platform} hooks", "warning",
                                 f"registered in {where}, but no event from them reached this store in the last "
                                 f"7 days: {_WHY_SILENT.get(platform, 'restart the agent')}"))
    return checks


LOW_DISK_BYTES = 50 * 1024 * 1024


def _disk_check(cfg: Settings) -> dict[str, str]:
    """Free space where the store lives: SQLite needs room for its WAL before a write can commit."""
    import shutil

    try:
        free = shutil.disk_usage(cfg.home).free
    except OSError as exc:
        return _check("free disk space", "warning", f"cannot read the free space of {cfg.home}: {exc.strerror}")
    text = f"{free / 1e6:.1f} MB free on the disk holding {cfg.home}"
    if free < LOW_DISK_BYTES:
        return _check("free disk space", "problem" if free < 1024 * 1024 else "warning",
                      f"{text}; writes fail with 'the disk is full' when it runs out: free some space (a worker "
                      "queues events that failed for lack of it again by itself)")
    return _check("free disk space", "ok", text)


def _file_check(store: Store) -> dict[str, str]:
    """SQLite's own check of the file's pages; a damaged file raises instead of answering."""
    import sqlite3

    try:
        result = store.quick_check()
    except sqlite3.DatabaseError as exc:
        return _check("sqlite quick_check", "problem", f"{exc}; {_damaged(store.path)}")
    if result != "ok":
        return _check("sqlite quick_check", "problem", f"{result}; {_damaged(store.path)}")
    return _check("sqlite quick_check", "ok", result)


def _index_checks(store: Store, fix: bool) -> list[dict[str, str]]:
    """The schema's triggers and the keyword index (row count, then FTS5's own integrity-check)."""
    checks: list[dict[str, str]] = []
    missing = store.missing_triggers()
    if not missing:
        checks.append(_check("schema triggers", "ok", "FTS sync and integrity triggers present"))
    elif fix:
        store.repair_triggers()
        checks.append(_check("schema triggers", "fixed", f"recreated {', '.join(missing)}"))
    else:
        checks.append(_check("schema triggers", "problem",
                             f"missing {', '.join(missing)}; run `memcairn doctor --fix`"))

    items, indexed = store.fts_counts()
    if items == indexed:
        checks.append(_check("keyword index row count", "ok", f"{items} rows indexed"))
    elif fix:
        store.rebuild_fts()
        checks.append(_check("keyword index row count", "fixed",
                             f"{indexed} indexed vs {items} stored; rebuilt from memory_items"))
    else:
        checks.append(_check("keyword index row count", "problem",
                             f"{indexed} indexed vs {items} stored; run `memcairn doctor --fix`"))

    if fix:
        if store.fts_integrity_ok():
            checks.append(_check("keyword index content", "ok", "FTS5 integrity-check passed"))
        else:
            store.rebuild_fts()
            ok = store.fts_integrity_ok()
            checks.append(_check("keyword index content", "fixed" if ok else "problem",
                                 "index disagreed with stored rows; rebuilt"
                                 + ("" if ok else " but the check still fails")))
    else:
        ok = store.fts_integrity_ok()
        checks.append(_check("keyword index content", "ok" if ok else "problem",
                             "FTS5 integrity-check passed" if ok
                             else "index disagrees with stored rows; run `memcairn doctor --fix`"))
    return checks


def run_checks(cfg: Settings, *, fix: bool = False, registered: dict[str, str] | None = None) -> dict[str, Any]:
    """Every check in turn; a database that cannot be opened or read is reported as a problem, not raised.
    ``registered``: the agents whose hooks memcairn registered (platform -> where), checked for events."""
    import sqlite3

    from memcairn.core.errors import StoreError
    from memcairn.store import Store
    from memcairn.store.db import describe_open_error

    checks: list[dict[str, str]] = []
    try:
        store = Store(cfg.db_path, check_fts=False)
    except StoreError as exc:
        checks.append(_check("open the database", "problem", str(exc)))
    else:
        for what in store.repaired_at_open:
            checks.append(_check("keyword index table", "fixed", what))
        try:
            checks.append(_file_check(store))
            if checks[-1]["status"] == "ok":  # a damaged file would fail every other check
                checks += _index_checks(store, fix)
                checks += _capture_checks(store, fix, cfg)
                checks += hooks_checks(store, registered or {})
        except sqlite3.DatabaseError as exc:
            checks.append(_check("checks interrupted", "problem", describe_open_error(str(cfg.db_path), exc)))
        finally:
            store.close()
    checks.append(_disk_check(cfg))
    healthy = all(c["status"] != "problem" for c in checks)
    return {"healthy": healthy, "db_path": str(cfg.db_path), "checks": checks}
