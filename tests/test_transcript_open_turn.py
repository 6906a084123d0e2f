"""A turn still going on when its transcript was imported (a live session) is summarised again once the file
grew: the store ends with the summary one import of the whole grown file makes, in place of the early one.
A turn the next prompt had ended is never redone, the live hooks' summaries are never touched, importing the
same grown file again changes nothing, and a run stopped half-way loses nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from transcript_builder import COVERAGE, HELLO
from transcript_builder import RECORDED as FIXTURES
from transcript_builder import lines as _lines
from transcript_builder import write as _write

from memcairn.capture.pipeline import REGROWN, CapturePipeline
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store import Store
from memcairn.transfer.importer import import_transcripts
from memcairn.transfer.replay_events import TURN_OPEN, TURN_THROUGH
from memcairn.transfer.transcript_files import replay_transcript
from memcairn.wire.config import Settings

PORT = FIXTURES / "claude-reliability__python-to-rust-port.jsonl"


def _cut_at(lines: list[str], wanted: str) -> int:
    """How many lines to keep so that the file ends just after the first assistant line holding a block
    ``wanted`` (a tool's name, or ``text``): a transcript read while that call ran, or before the answer."""
    for number, line in enumerate(lines, start=1):
        entry = json.loads(line)
        content = entry.get("message", {}).get("content") if entry.get("type") == "assistant" else None
        if isinstance(content, list) and any(b.get("name") == wanted or (b.get("type") == wanted == "text")
                                             for b in content):
            return number
    raise AssertionError(f"no {wanted} block")


def _two_turns() -> list[str]:
    """One session of two real turns: the coverage session's, then the hello-world session's lines told as
    that session's second turn (the hello-world lines are the later ones in time)."""
    first = [json.loads(line) for line in _lines(COVERAGE)]
    sid = next(e["sessionId"] for e in first if e.get("type") == "user")
    cwd = next(e["cwd"] for e in first if e.get("type") == "user")
    second = []
    for line in _lines(HELLO):
        entry = json.loads(line)
        if "sessionId" in entry:
            entry["sessionId"] = sid
        if "cwd" in entry:
            entry["cwd"] = cwd
        second.append(json.dumps(entry))
    return [json.dumps(e) for e in first] + second


SUMMARY_FIELDS = ("title", "request", "investigated", "learned", "completed", "next_steps", "notes", "files_read",
                  "files_modified", "prompt_number", "session", "project", "created_at_epoch", "metadata")


def _summaries(store: Store) -> list[MemoryItem]:
    return store.list_items(ItemFilter(kinds=["summary"]), order="oldest", limit=50)


def _summary_rows(store: Store) -> list[tuple[Any, ...]]:
    return sorted(repr(tuple(getattr(i, f) for f in SUMMARY_FIELDS)) for i in _summaries(store))


def _observations(store: Store) -> list[tuple[Any, ...]]:
    return sorted((i.title, i.narrative, tuple(i.facts), i.prompt_number)
                  for i in store.list_items(ItemFilter(kinds=["observation"]), limit=500))


def _sources(db: Path, item_id: int) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT source_id FROM memory_sources WHERE memory_item_id = ?",
                                           (item_id,))}


def _sessions(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute("SELECT agent_session_id, status, ended_at_epoch FROM sessions"))


def _regrown(store: Store) -> list[str]:
    """Keys of the stops queued again for a turn that went on."""
    sessions = {i.session for i in _summaries(store)}
    return [e.source_key or "" for s in sessions for e in store.session_events("claude-code", s or "")
            if e.payload.get(REGROWN) is True]


def _settled(store: Store) -> bool:
    counts = store.ingest_counts()
    return counts["pending"] == 0 and counts["failed"] == 0


# -- the open turn is summarised again ------------------------------------------------------------------------
@pytest.mark.parametrize(("fixture", "wanted"), [(HELLO, "Bash"), (COVERAGE, "Edit"), (PORT, "Write"),
                                                 (HELLO, "text")],
                         ids=["hello-bash", "coverage-edit", "port-write", "hello-before-its-answer"])
def test_an_open_turn_is_summarised_again_once_the_file_grew(tmp_path: Path, settings: Settings, fixture: Path,
                                                             wanted: str) -> None:
    """A real transcript cut inside its turn (in a running call, or before the assistant's final message),
    imported, the rest appended, imported again: the store holds the one summary a single import of the whole
    file makes, in place of the early one (whose provenance went with it), and the session's end is the
    file's. A third import queues and changes nothing."""
    lines = _lines(fixture)
    live = _write(tmp_path / "live.jsonl", lines[:_cut_at(lines, wanted)])
    store, whole = Store(tmp_path / "live.db"), Store(tmp_path / "whole.db")
    try:
        import_transcripts(store, settings, [live])
        early = _summaries(store)
        assert len(early) == 1
        early_sources = _sources(tmp_path / "live.db", early[0].id)
        _write(live, lines)
        grown = import_transcripts(store, settings, [live])
        import_transcripts(whole, settings, [fixture])
        assert _summary_rows(store) == _summary_rows(whole)
        assert _observations(store) == _observations(whole)
        assert _sessions(tmp_path / "live.db") == _sessions(tmp_path / "whole.db")
        (summary,) = _summaries(store)
        assert summary.id != early[0].id and grown.summaries == 0  # a new summary in place of the early one: none more
        assert not early_sources & _sources(tmp_path / "live.db", summary.id)
        assert len(_regrown(store)) == 1 and _settled(store)
        items = store.stats()["items"]
        again = import_transcripts(store, settings, [live])
        assert (again.events, again.observations, again.summaries, again.prompts) == (0, 0, 0, 0)
        assert [s.id for s in _summaries(store)] == [summary.id] and store.stats()["items"] == items
        assert len(_regrown(store)) == 1 and _settled(store)
    finally:
        store.close()
        whole.close()


def test_a_turn_that_grew_twice_keeps_one_summary(tmp_path: Path, settings: Settings) -> None:
    """Imported in a running call, again in a later one, and once more at the end: each import that found the
    turn longer replaces the summary the one before it made."""
    lines = _lines(COVERAGE)
    live = _write(tmp_path / "live.jsonl", lines[:_cut_at(lines, "Edit")])
    store, whole = Store(tmp_path / "live.db"), Store(tmp_path / "whole.db")
    try:
        import_transcripts(store, settings, [live])
        _write(live, lines[:_cut_at(lines, "Glob") + 20])
        import_transcripts(store, settings, [live])
        middle = _summaries(store)
        assert len(middle) == 1
        _write(live, lines)
        import_transcripts(store, settings, [live])
        import_transcripts(whole, settings, [COVERAGE])
        assert _summary_rows(store) == _summary_rows(whole)
        assert _summaries(store)[0].id != middle[0].id and len(_regrown(store)) == 2 and _settled(store)
    finally:
        store.close()
        whole.close()


# -- what is not redone ---------------------------------------------------------------------------------------
def test_a_turn_the_next_prompt_ended_is_not_summarised_again(tmp_path: Path, settings: Settings) -> None:
    """Two real turns, the file read during the second one's Bash call: the first turn's summary (its stop
    came from the next prompt) stays the very same item; only the open second turn is summarised again."""
    lines = _two_turns()
    live = _write(tmp_path / "live.jsonl", lines[:_hello_bash(lines)])
    store, whole = Store(tmp_path / "live.db"), Store(tmp_path / "whole.db")
    try:
        import_transcripts(store, settings, [live])
        early = {s.prompt_number: s.id for s in _summaries(store)}
        assert sorted(early) == [1, 2]
        _write(live, lines)
        import_transcripts(store, settings, [live])
        import_transcripts(whole, settings, [_write(tmp_path / "whole.jsonl", lines)])
        assert _summary_rows(store) == _summary_rows(whole)
        now = {s.prompt_number: s.id for s in _summaries(store)}
        assert now[1] == early[1] and now[2] != early[2]
        assert len(_regrown(store)) == 1 and _settled(store)
    finally:
        store.close()
        whole.close()


def _hello_bash(lines: list[str]) -> int:
    """The second turn's Bash call in :func:`_two_turns` (the first turn has Bash calls of its own)."""
    start = len(_lines(COVERAGE))
    return start + _cut_at(lines[start:], "Bash")


def test_a_turn_read_whole_is_not_summarised_again_when_a_next_turn_follows(tmp_path: Path,
                                                                            settings: Settings) -> None:
    """The first import read the turn to its last line (the file ended there, the turn open as far as the
    file could say); the grown file only adds the next turn: the first turn keeps its summary item."""
    lines = _two_turns()
    first_turn = len(_lines(COVERAGE)) + 1  # the second session's first line is a queue-operation line
    live = _write(tmp_path / "live.jsonl", lines[:first_turn])
    store = Store(tmp_path / "live.db")
    try:
        import_transcripts(store, settings, [live])
        (early,) = _summaries(store)
        _write(live, lines)
        import_transcripts(store, settings, [live])
        assert [s.id for s in _summaries(store)][:1] == [early.id] and len(_summaries(store)) == 2
        assert _regrown(store) == [] and _settled(store)
    finally:
        store.close()


def test_the_live_hooks_summary_of_a_session_is_untouched(tmp_path: Path, settings: Settings) -> None:
    """The hooks recorded the session live (their events carry no ``source_key``); its transcript is imported
    during the session and again after it. The hooks' summary stays, whatever the imports do; and a hook body
    that says ``turn_regrown`` is not taken for a replayed stop."""
    lines = _lines(HELLO)
    whole_events = list(replay_transcript(HELLO))
    store = Store(tmp_path / "live.db")
    try:
        for event in whole_events:
            if event.body["event"] == "session_end":
                continue
            hook = {k: v for k, v in event.body.items() if k not in ("timestamp_ms", TURN_THROUGH, TURN_OPEN)}
            tool_use_id = hook.get("tool_use_id")
            store.enqueue_ingest_event(hook["session_id"], "claude-code", event.event_type, hook,
                                       tool_use_id if isinstance(tool_use_id, str) else None)
        CapturePipeline(store, settings).drain()
        (live_summary,) = _summaries(store)
        stop = next(e.body for e in whole_events if e.body["event"] == "stop")
        forged = {k: v for k, v in stop.items() if k != "timestamp_ms"} | {REGROWN: True,
                                                                             "last_assistant_message": "Done."}
        store.enqueue_ingest_event(stop["session_id"], "claude-code", "summarize", forged)
        CapturePipeline(store, settings).drain()
        assert live_summary.id in {s.id for s in _summaries(store)} and len(_summaries(store)) == 2
        live = _write(tmp_path / "live.jsonl", lines[:_cut_at(lines, "Bash")])
        import_transcripts(store, settings, [live])
        _write(live, lines)
        import_transcripts(store, settings, [live])
        assert live_summary.id in {s.id for s in _summaries(store)} and _settled(store)
    finally:
        store.close()


# -- stores written before, and runs stopped half-way ----------------------------------------------------------
def test_a_turn_queued_by_the_previous_release_is_summarised_again_once_it_grew(tmp_path: Path,
                                                                               settings: Settings) -> None:
    """The open turn's stop was queued without ``turn_through`` (before this release): the same file imported
    again queues nothing; once it grew, its turn is summarised again from the stop's time and final message."""
    lines = _lines(HELLO)
    live = _write(tmp_path / "live.jsonl", lines[:_cut_at(lines, "Bash")])
    store, whole = Store(tmp_path / "live.db"), Store(tmp_path / "whole.db")
    try:
        for event in replay_transcript(live):
            body = {k: v for k, v in event.body.items() if k not in (TURN_THROUGH, TURN_OPEN)}
            tool_use_id = None if body.get("tool_response_pending") else body.get("tool_use_id")
            store.enqueue_ingest_event(body["session_id"], "claude-code", event.event_type, body,
                                       tool_use_id if isinstance(tool_use_id, str) else None,
                                       source_key=event.source_key)
        CapturePipeline(store, settings).drain()
        (early,) = _summaries(store)
        same = import_transcripts(store, settings, [live])
        assert (same.events, same.summaries) == (0, 0) and _regrown(store) == []
        _write(live, lines)
        import_transcripts(store, settings, [live])
        import_transcripts(whole, settings, [HELLO])
        assert _summary_rows(store) == _summary_rows(whole) and _summaries(store)[0].id != early.id
    finally:
        store.close()
        whole.close()


def test_an_import_stopped_before_processing_completes_the_summary_later(tmp_path: Path, settings: Settings,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The second import dies after queueing (before the pipeline ran), and the next run's pipeline fails
    inside the commit of the regrown stop: the early summary is kept meanwhile, nothing is half done, and the
    run after that ends where one import of the whole file does."""
    lines = _lines(COVERAGE)
    live = _write(tmp_path / "live.jsonl", lines[:_cut_at(lines, "Edit")])
    db = tmp_path / "live.db"
    store, whole = Store(db), Store(tmp_path / "whole.db")
    try:
        import_transcripts(store, settings, [live])
        (early,) = _summaries(store)
        _write(live, lines)

        def killed(self: CapturePipeline, **_: object) -> None:
            raise KeyboardInterrupt

        with monkeypatch.context() as patch:
            patch.setattr(CapturePipeline, "drain", killed)
            with pytest.raises(KeyboardInterrupt):
                import_transcripts(store, settings, [live])
        assert len(_regrown(store)) == 1 and [s.id for s in _summaries(store)] == [early.id]

        real = Store.complete_ingest

        def failing(self: Store, event_ids: list[int], *args: Any, **kwargs: Any) -> Any:
            events = [e for e in self.pending_ingest_events(500) if e.id in set(event_ids)]
            if any(e.payload.get(REGROWN) for e in events):
                raise sqlite3.OperationalError("disk I/O error")
            return real(self, event_ids, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(Store, "complete_ingest", failing)
            report = CapturePipeline(store, settings).drain(max_passes=1)
        assert report.failed == 1 and [s.id for s in _summaries(store)] == [early.id]
        assert early.id in {i.id for i in store.list_items(ItemFilter(kinds=["summary"]), limit=5)}
        again = import_transcripts(store, settings, [live])
        import_transcripts(whole, settings, [COVERAGE])
        assert again.events == 0 and again.summaries == 0  # the regrown summary in place of the early one
        assert _summary_rows(store) == _summary_rows(whole) and _observations(store) == _observations(whole)
        assert _settled(store) and len(_regrown(store)) == 1
    finally:
        store.close()
        whole.close()
