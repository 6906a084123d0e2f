"""``memcairn import transcripts``: recorded sessions replayed through the live capture pipeline.

Each transcript line becomes the event a hook would have sent (``capture.transcripts``), passes the same
admission rules (exclusions, ``<private>``, secrets), is queued with a ``source_key`` naming its line (a
second import of the same file queues nothing; a tool call the live hooks already recorded is recognised by
its ``tool_use_id``) and is processed by the same pipeline. Runs on the store file directly, so it works
with or without a worker; a running worker's mirror catches up through its watermark.

Two cases need more than the key of a line:

- A file read while its session was live may end in a tool call without its result. That call is queued
  marked ``tool_response_pending``, under a key of its own and without its ``tool_use_id`` (which stays free
  for the answered call); it is not queued at all when the session already has that call (the live hooks
  recorded it, or an earlier import saw it answered). Once the result is in the file, a later import queues
  the answered call and the pipeline replaces the unanswered call's observation with the answered one.
- A file read while its session was live also ends in a turn that may still be going on: its ``stop`` (marked
  ``turn_open``) is queued and summarised with what the file held then. When a later import finds that turn
  gone on (the stop's ``turn_through``, the turn's last line, is another than the queued stop's: more calls,
  the final answer, the next prompt), it queues the turn's stop again, under the stop's key with the turn's
  new last line appended and marked ``turn_regrown``; the pipeline's summary of it replaces the early one.
  A third import of the same file computes the same key and queues nothing. A turn whose queued stop was not
  marked open (the next prompt had ended it) is never redone, nor a turn the queue holds under another
  session (a resumed or forked session's file), nor anything the live hooks sent (their events carry no key).
- Events an earlier release queued under the keys it used then (``ReplayEvent.legacy_key``: every key named
  the session) are recognised through the session's queued events, so upgrading does not import again what
  was imported before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memcairn.capture.admission import admit, skipped_tool
from memcairn.capture.anchors import ANCHOR_ROOT
from memcairn.capture.pipeline import REGROWN, CapturePipeline, CaptureReport
from memcairn.capture.records import Compressor
from memcairn.store.protocols import CaptureStore
from memcairn.transfer.replay_events import NARRATION, TURN_OPEN, TURN_THROUGH, ParseStats, ReplayEvent
from memcairn.transfer.transcript_files import UnsupportedTranscript, replay_transcript
from memcairn.wire.config import Settings


@dataclass
class TranscriptImport:
    files: int = 0
    events: int = 0  # events queued by this import (replays of earlier imports are not counted)
    observations: int = 0
    summaries: int = 0
    prompts: int = 0
    skipped_lines: int = 0
    unreadable_files: int = 0
    compactions: int = 0
    # one entry per file: its path and shape, what it held (sessions, prompts, tool calls, compaction summaries),
    # the events this import queued and made of it, and every line left out, counted by why
    file_reports: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _file_report(path: Path, stats: ParseStats, queued: int, made: CaptureReport | None,
                 error: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"path": str(path), "shape": stats.shape, "lines": stats.lines,
                           "sessions": sorted(stats.sessions), "prompts": stats.prompts, "tool_uses": stats.tool_uses,
                           "compactions": stats.compactions, "events": queued,
                           "left_out": dict(sorted(stats.left_out.items()))}
    if made is not None:
        out.update(observations=made.observations, summaries=made.summaries, stored_prompts=made.prompts)
    if error is not None:
        out["error"] = error
    return out


@dataclass
class _Queued:
    """What the queue held for one session when this import first met it."""

    keys: set[str]
    tool_use_ids: set[str]
    stops: dict[str, dict[str, Any]]  # the body of each replayed stop, by its key


class _Known:
    def __init__(self, store: CaptureStore) -> None:
        self.store = store
        self.sessions: dict[tuple[str, str], _Queued] = {}

    def get(self, platform: str, session_id: str) -> _Queued:
        found = self.sessions.get((platform, session_id))
        if found is None:
            events = self.store.session_events(platform, session_id)
            found = self.sessions[(platform, session_id)] = _Queued(
                {e.source_key for e in events if e.source_key},
                {e.tool_use_id for e in events if e.tool_use_id and e.event_type == "observation"},
                {e.source_key: e.payload for e in events if e.source_key and e.kind == "stop"})
        return found

    def regrown(self, event: ReplayEvent, body: dict[str, Any], platform: str,
                session_id: str) -> tuple[str, dict[str, Any]] | None:
        """(key, body) of the stop to queue again when ``event`` ends a turn this session's queue already
        holds a stop of, read while the turn was open, and the turn went on since; else None.

        The key appends the turn's last line to the stop's own, so the same grown file queues it once."""
        if body.get("event") != "stop" or not isinstance(body.get(TURN_THROUGH), str):
            return None
        queued = self.get(platform, session_id)
        earlier = queued.stops.get(event.source_key)
        if earlier is None and event.legacy_key is not None:
            earlier = queued.stops.get(event.legacy_key)
        if earlier is None or not _read_open(earlier) or not _went_on(earlier, body):
            return None
        return f"{event.source_key}@{body[TURN_THROUGH]}", {**body, REGROWN: True}

    def already_queued(self, event: ReplayEvent, platform: str, session_id: str) -> bool:
        """An event queued before under the key an earlier release gave it, or an unanswered tool call the
        session already has (answered, by a live hook or an earlier import)."""
        pending = event.body.get("tool_response_pending") is True
        if event.legacy_key is None and not pending:
            return False
        queued = self.get(platform, session_id)
        if event.legacy_key is not None and event.legacy_key in queued.keys:
            return True
        return pending and event.body.get("tool_use_id") in queued.tool_use_ids


class _Carried:
    """The narration of calls that are never observed (housekeeping such as a todo list), carried to the next
    observed call of the same session's turn, as the worker reads it live (``capture.transcript_tail``)."""

    def __init__(self) -> None:
        self.said: dict[str, list[str]] = {}

    def through(self, body: dict[str, Any], settings: Settings) -> dict[str, Any]:
        """``body``, with the narration carried so far when it is an observed call; an unobserved call's own
        narration is kept for the next one, and a prompt or a stop drops what was kept."""
        session = str(body.get("session_id"))
        if body.get("event") != "tool_use":
            self.said.pop(session, None)
            return body
        said = body.get(NARRATION)
        tool = body.get("tool_name")
        if isinstance(tool, str) and skipped_tool(tool, settings):
            if isinstance(said, str) and said.strip():
                self.said.setdefault(session, []).append(said)
            return body
        kept = self.said.pop(session, [])
        if not kept:
            return body
        return {**body, NARRATION: "\n\n".join([*kept, *([said] if isinstance(said, str) and said else [])])}


def _read_open(stop: dict[str, Any]) -> bool:
    """Whether a queued stop was read while its turn may still have been going on: marked so, or queued by a
    release that did not say (no ``turn_through``); a stop the next prompt gave is final."""
    return stop.get(TURN_OPEN) is True or TURN_THROUGH not in stop


def _went_on(stop: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the turn ``body`` ends is longer than when ``stop`` was queued: another last line, or, for a
    stop that does not name its last line, another time or final answer."""
    if TURN_THROUGH in stop:
        return stop[TURN_THROUGH] != body[TURN_THROUGH]
    fields = ("timestamp_ms", "last_assistant_message")
    return tuple(stop.get(f) for f in fields) != tuple(body.get(f) for f in fields)


def import_transcripts(store: CaptureStore, settings: Settings, paths: Sequence[Path], *,
                       compressor: Compressor | None = None, project: str | None = None,
                       root: Path | None = None,
                       on_file: Callable[[Path, TranscriptImport], None] | None = None) -> TranscriptImport:
    """Queue and process every event of ``paths``; ``on_file`` hears after each file (progress).
    ``project`` files every session under that project instead of the one its recorded directory names.
    ``root`` is where the sessions' working directory is on this machine: their memories' anchors
    (``capture.anchors``) read the files there instead of under the recorded ``cwd``."""
    given = {ANCHOR_ROOT: str(root.expanduser().resolve())} if root is not None else {}
    pipeline = CapturePipeline(store, settings, compressor=compressor)
    known = _Known(store)
    total = TranscriptImport()
    carried = _Carried()
    for path in paths:
        stats = ParseStats()
        queued = 0
        try:
            for event in replay_transcript(path, stats):
                body = event.body if project is None else {**event.body, "project": project, "projects": [project]}
                body = {**body, **given}
                admitted = admit(event.event_type, carried.through(body, settings), settings)
                if admitted.body is None:
                    stats.leave_out(f"events not admitted ({admitted.reason})")
                    continue
                session_id = str(event.body["session_id"])
                platform = str(event.body.get("platform_source") or "claude-code")
                again = known.regrown(event, admitted.body, platform, session_id)
                if again is not None:
                    _, created = store.enqueue_ingest_event(session_id, platform, event.event_type, again[1],
                                                            source_key=again[0])
                    queued += int(created)
                    continue
                if known.already_queued(event, platform, session_id):
                    continue
                tool_use_id = event.body.get("tool_use_id")
                if event.body.get("tool_response_pending") is True:
                    tool_use_id = None  # the answered call, queued later, takes the id
                _, created = store.enqueue_ingest_event(
                    session_id, platform, event.event_type, admitted.body,
                    tool_use_id if isinstance(tool_use_id, str) else None, source_key=event.source_key,
                )
                queued += int(created)
        except (OSError, UnsupportedTranscript) as exc:
            total.unreadable_files += 1
            total.skipped_lines += stats.skipped_lines
            total.file_reports.append(_file_report(path, stats, queued, None, error=str(exc)))
            continue
        total.events += queued
        total.skipped_lines += stats.skipped_lines
        total.compactions += stats.compactions
        report = pipeline.drain()
        total.files += 1
        total.observations += report.observations
        total.summaries += report.summaries
        total.prompts += report.prompts
        total.file_reports.append(_file_report(path, stats, queued, report))
        if on_file is not None:
            on_file(path, total)
    return total
