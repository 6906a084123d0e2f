"""``memcairn import transcripts``: recorded sessions replayed through the live capture pipeline.

Each transcript line becomes the event a hook would have sent (``capture.transcripts``), passes the same
admission rules (exclusions, ``<private>``, secrets), is queued with a ``source_key`` naming its line (a
second import of the same file queues nothing; a tool call the live hooks already recorded is recognised by
its ``tool_use_id``) and is processed by the same pipeline. Runs on the store file directly, so it works
with or without a worker; a running worker's mirror catches up through its watermark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memcairn.capture.admission import admit
from memcairn.capture.pipeline import CapturePipeline
from memcairn.capture.records import Compressor
from memcairn.capture.transcripts import ParseStats, replay_transcript
from memcairn.config import Settings
from memcairn.store.items import Store


@dataclass
class TranscriptImport:
    files: int = 0
    events: int = 0  # events queued by this import (replays of earlier imports are not counted)
    observations: int = 0
    summaries: int = 0
    prompts: int = 0
    skipped_lines: int = 0
    unreadable_files: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def import_transcripts(store: Store, settings: Settings, paths: Sequence[Path], *,
                       compressor: Compressor | None = None, project: str | None = None,
                       on_file: Callable[[Path, TranscriptImport], None] | None = None) -> TranscriptImport:
    """Queue and process every event of ``paths``; ``on_file`` hears after each file (progress).
    ``project`` files every session under that project instead of the one its recorded directory names."""
    pipeline = CapturePipeline(store, settings, compressor=compressor)
    total = TranscriptImport()
    for path in paths:
        stats = ParseStats()
        try:
            for event in replay_transcript(path, stats):
                body = event.body if project is None else {**event.body, "project": project, "projects": [project]}
                admitted = admit(event.event_type, body, settings)
                if admitted.body is None:
                    continue
                tool_use_id = event.body.get("tool_use_id")
                _, created = store.enqueue_ingest_event(
                    str(event.body["session_id"]), str(event.body.get("platform_source") or "claude-code"),
                    event.event_type, admitted.body, tool_use_id if isinstance(tool_use_id, str) else None,
                    source_key=event.source_key,
                )
                total.events += int(created)
        except OSError:
            total.unreadable_files += 1
            continue
        finally:
            total.skipped_lines += stats.skipped_lines
        report = pipeline.drain()
        total.files += 1
        total.observations += report.observations
        total.summaries += report.summaries
        total.prompts += report.prompts
        if on_file is not None:
            on_file(path, total)
    return total
