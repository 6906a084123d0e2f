"""Transcripts imported again once they grew (a live session) and files that repeat another's turns (a resumed
or forked session): every call and every turn ends up stored once, with what the fullest file says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transcript_builder import COVERAGE, HELLO
from transcript_builder import RECORDED as FIXTURES
from transcript_builder import lines as _lines
from transcript_builder import write as _write

from memcairn.capture.pipeline import CapturePipeline
from memcairn.core.models import ItemFilter
from memcairn.store import Store
from memcairn.transfer.importer import import_transcripts
from memcairn.transfer.transcript_files import replay_transcript
from memcairn.wire.config import Settings

RESUMED_SESSION = "5e55a1b2-0000-4000-8000-00000000beef"


def _observations(store: Store) -> list[tuple[str | None, str | None, tuple[str, ...], int | None]]:
    return sorted((i.title, i.narrative, tuple(i.facts), i.prompt_number)
                  for i in store.list_items(ItemFilter(kinds=["observation"]), limit=500))


def _cut_at_a_call(path: Path, tool_name: str) -> int:
    """How many lines to keep so that the file ends just after the first ``tool_name`` call, before its
    result: a transcript read while that call was running."""
    for number, line in enumerate(_lines(path), start=1):
        entry = json.loads(line)
        content = entry.get("message", {}).get("content") if entry.get("type") == "assistant" else None
        if isinstance(content, list) and any(b.get("type") == "tool_use" and b.get("name") == tool_name
                                             for b in content):
            return number
    raise AssertionError(f"no {tool_name} call in {path.name}")


# -- a live session imported, then imported again once the running call had its result -------------------
@pytest.mark.parametrize(("fixture", "tool_name"), [(HELLO, "Bash"), (COVERAGE, "Edit")],
                         ids=["hello-bash", "coverage-edit"])
def test_a_call_imported_before_its_result_gets_the_result_on_the_next_import(
        tmp_path: Path, settings: Settings, fixture: Path, tool_name: str) -> None:
    """A real transcript cut in the middle of a tool call (written up to the call, imported, the rest
    appended, imported again) ends with the observations a single import of the whole file makes: the call's
    observation reflects its result and no call is observed twice."""
    lines = _lines(fixture)
    cut = _cut_at_a_call(fixture, tool_name)
    live = _write(tmp_path / "live.jsonl", lines[:cut])
    store = Store(tmp_path / "live.db")
    whole = Store(tmp_path / "whole.db")
    try:
        first = import_transcripts(store, settings, [live])
        assert first.observations >= 1
        _write(live, lines)
        import_transcripts(store, settings, [live])
        import_transcripts(whole, settings, [fixture])
        assert _observations(store) == _observations(whole)
        assert not [i for i in store.list_items(ItemFilter(kinds=["observation"]), limit=500)
                    if "awaiting_result" in i.metadata]
        again = import_transcripts(store, settings, [live])
        assert (again.events, again.observations) == (0, 0)
        assert store.ingest_counts()["failed"] == 0 and store.ingest_counts()["pending"] == 0
    finally:
        store.close()
        whole.close()


def test_the_result_reaches_the_queue_once_and_the_unanswered_observation_goes(tmp_path: Path,
                                                                              settings: Settings) -> None:
    lines = _lines(HELLO)
    live = _write(tmp_path / "live.jsonl", lines[:_cut_at_a_call(HELLO, "Bash")])
    store = Store(tmp_path / "store.db")
    try:
        import_transcripts(store, settings, [live])
        early = [i for i in store.list_items(ItemFilter(kinds=["observation"]), limit=10)
                 if "awaiting_result" in i.metadata]
        assert len(early) == 1 and early[0].title == "Created hello.sh"  # the episode the unanswered run goes on
        _write(live, lines)
        import_transcripts(store, settings, [live])
        ran = store.list_items(ItemFilter(kinds=["observation"]), limit=10)
        assert len(ran) == 1 and "awaiting_result" not in ran[0].metadata
        # the same episode by title and narrative: kept, with the answered run's facts
        assert "ran `chmod +x hello.sh && ./hello.sh` → ok: Hello world" in ran[0].facts
        session = ran[0].session
        calls = [e for e in store.session_events("claude-code", session or "", event_type="observation")
                 if e.payload.get("tool_name") == "Bash"]
        assert [e.payload.get("tool_response") is None for e in calls] == [True, False]
    finally:
        store.close()


def test_a_live_hook_answer_replaces_the_unanswered_observation(tmp_path: Path, settings: Settings) -> None:
    """Imported from inside the session it records, while a call runs: the live PostToolUse hook then sends
    the result, which the queue takes (the unanswered call left the ``tool_use_id`` free) and whose observation
    replaces the unanswered one."""
    lines = _lines(HELLO)
    live = _write(tmp_path / "live.jsonl", lines[:_cut_at_a_call(HELLO, "Bash")])
    store = Store(tmp_path / "store.db")
    try:
        import_transcripts(store, settings, [live])
        pending = next(e for e in replay_transcript(live) if e.body.get("tool_response_pending"))
        hook = {**pending.body, "tool_response": {"stdout": "Hello world\n", "stderr": "", "interrupted": False}}
        del hook["tool_response_pending"], hook["timestamp_ms"]
        _, created = store.enqueue_ingest_event(hook["session_id"], "claude-code", "observation", hook,
                                                hook["tool_use_id"])
        assert created
        CapturePipeline(store, settings).drain()
        ran = store.list_items(ItemFilter(kinds=["observation"]), limit=10)
        assert len(ran) == 1 and "awaiting_result" not in ran[0].metadata
        assert "Hello world" in " ".join(ran[0].facts) + (ran[0].narrative or "")
    finally:
        store.close()


def test_an_unanswered_call_the_session_already_has_is_not_queued(tmp_path: Path, settings: Settings) -> None:
    """The file lags behind the session: the live hooks recorded the call with its result before the import
    read it unanswered. The import adds no second, unanswered, observation of it."""
    lines = _lines(HELLO)
    live = _write(tmp_path / "live.jsonl", lines[:_cut_at_a_call(HELLO, "Bash")])
    pending = next(e for e in replay_transcript(live) if e.body.get("tool_response_pending"))
    store = Store(tmp_path / "store.db")
    try:
        hook = {**pending.body, "tool_response": {"stdout": "Hello world\n", "stderr": "", "interrupted": False}}
        del hook["tool_response_pending"], hook["timestamp_ms"]
        store.enqueue_ingest_event(hook["session_id"], "claude-code", "observation", hook, hook["tool_use_id"])
        import_transcripts(store, settings, [live])
        calls = [e for e in store.session_events("claude-code", hook["session_id"], event_type="observation")
                 if e.payload.get("tool_name") == "Bash"]
        assert len(calls) == 1 and calls[0].payload["tool_response"] is not None
    finally:
        store.close()


# -- resumed and forked sessions -----------------------------------------------------------------------------
def _resumed_copy(path: Path, target: Path) -> Path:
    """A resumed (``claude --resume``) or forked session's file made from ``path``.

    Assumption, since the reference (agent-integration.md 1.3, 1.5, 1.9) says only that a resumed or forked
    session starts with SessionStart ``source`` resume or fork, that injected text "is replayed on resume",
    and that every message line carries ``uuid``, ``parentUuid`` and ``sessionId``: the new file, named by a
    new session id, repeats the original's lines (same ``uuid``s, same content, times and tool_use ids) with
    ``sessionId`` changed to the new id on every line, then goes on with new lines of its own (a new prompt,
    a tool call and its result, an answer) chained to the last repeated line by ``parentUuid``.
    """
    out = []
    for line in _lines(path):
        entry = json.loads(line)
        if "sessionId" in entry:
            entry["sessionId"] = RESUMED_SESSION
        out.append(entry)
    last = next(e for e in reversed(out) if e.get("uuid"))
    common = {"sessionId": RESUMED_SESSION, "cwd": last["cwd"], "isSidechain": False, "userType": "external"}
    out += [
        {**common, "type": "user", "uuid": "resumed-u1", "parentUuid": last["uuid"],
         "timestamp": "2026-02-01T09:00:00.000Z",
         "message": {"role": "user", "content": "Also print the date after the greeting"}},
        {**common, "type": "assistant", "uuid": "resumed-a1", "parentUuid": "resumed-u1",
         "timestamp": "2026-02-01T09:00:04.000Z",
         "message": {"role": "assistant", "id": "msg_resumed_1", "content": [
             {"type": "tool_use", "id": "toolu_resumed_1", "name": "Bash",
              "input": {"command": "echo 'date' >> hello.sh && ./hello.sh"}}]}},
        {**common, "type": "user", "uuid": "resumed-u2", "parentUuid": "resumed-a1",
         "timestamp": "2026-02-01T09:00:06.000Z",
         "toolUseResult": {"stdout": "Hello world\nSun Feb  1 09:00:06 UTC 2026\n", "stderr": "",
                           "interrupted": False, "isImage": False},
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_resumed_1",
                                                  "content": "Hello world\nSun Feb  1 09:00:06 UTC 2026"}]}},
        {**common, "type": "assistant", "uuid": "resumed-a2", "parentUuid": "resumed-u2",
         "timestamp": "2026-02-01T09:00:09.000Z",
         "message": {"role": "assistant", "id": "msg_resumed_2",
                     "content": [{"type": "text", "text": "hello.sh now prints the date too."}]}},
    ]
    return _write(target, [json.dumps(e) for e in out])


@pytest.mark.parametrize("resumed_first", [False, True], ids=["original-first", "resumed-first"])
def test_a_resumed_session_file_stores_the_shared_turns_once(tmp_path: Path, settings: Settings,
                                                             resumed_first: bool) -> None:
    """Importing a session's file and the file its resumed (or forked) continuation wrote, in either order,
    stores the turns they share once and the resumed session's own turn once."""
    resumed = _resumed_copy(HELLO, tmp_path / f"{RESUMED_SESSION}.jsonl")
    store = Store(tmp_path / "store.db")
    alone = Store(tmp_path / "alone.db")
    try:
        import_transcripts(alone, settings, [HELLO])
        shared = _observations(alone)
        files = [resumed, HELLO] if resumed_first else [HELLO, resumed]
        import_transcripts(store, settings, files)
        prompts = store.list_items(ItemFilter(kinds=["prompt"]), limit=10)
        assert sorted(p.text or "" for p in prompts) == sorted(
            [i.text or "" for i in alone.list_items(ItemFilter(kinds=["prompt"]), limit=10)]
            + ["Also print the date after the greeting"])
        summaries = store.list_items(ItemFilter(kinds=["summary"]), limit=10)
        assert len(summaries) == 2
        observations = _observations(store)
        assert len(observations) == len(shared) + 1
        new = [o for o in observations if o not in shared]
        assert new[0][0] and new[0][0].endswith("`echo 'date' >> hello.sh && ./hello.sh`")
        # whichever file came first owns the shared turn; the resumed session owns its own turn
        own = {i.text for i in store.list_items(ItemFilter(session=RESUMED_SESSION, kinds=["prompt"]), limit=20)}
        assert "Also print the date after the greeting" in own
        assert len(own) == (2 if resumed_first else 1)
        again = import_transcripts(store, settings, [HELLO, resumed])
        assert (again.events, again.observations, again.summaries, again.prompts) == (0, 0, 0, 0)
    finally:
        store.close()
        alone.close()


# -- what earlier releases queued ----------------------------------------------------------------------------
def test_events_queued_under_the_keys_of_earlier_releases_are_not_queued_again(tmp_path: Path,
                                                                               settings: Settings) -> None:
    """Earlier releases named every line's key by its session (``transcript:<session>:<uuid>:<event>``); a
    store that imported a file then imports nothing of it again."""
    store = Store(tmp_path / "store.db")
    try:
        for event in replay_transcript(COVERAGE):
            tool_use_id = event.body.get("tool_use_id")
            store.enqueue_ingest_event(event.body["session_id"], "claude-code", event.event_type, event.body,
                                       tool_use_id if isinstance(tool_use_id, str) else None,
                                       source_key=event.legacy_key or event.source_key)
        CapturePipeline(store, settings).drain()
        items = store.stats()["items"]
        again = import_transcripts(store, settings, [COVERAGE])
        assert (again.events, again.observations, again.summaries, again.prompts) == (0, 0, 0, 0)
        assert store.stats()["items"] == items
    finally:
        store.close()


def test_an_import_reports_the_memories_it_stored(settings: Settings, tmp_path: Path) -> None:
    """Per file and in all, the import's counts are the items the store holds afterwards: an observation a later
    one replaced (an episode observed again whole) is not counted twice (14 were reported where 13 were stored)."""
    files = sorted(FIXTURES.glob("claude-reliability__*.jsonl"))
    with Store(tmp_path / "memcairn.db") as store:
        report = import_transcripts(store, settings, files)
        by_kind = store.stats()["by_kind"]
    assert (report.observations, report.summaries, report.prompts) == (
        by_kind["observation"], by_kind["summary"], by_kind["prompt"])
    assert sum(f["observations"] for f in report.file_reports) == by_kind["observation"]
