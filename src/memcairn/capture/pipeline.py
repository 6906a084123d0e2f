"""Queue processing: pending hook events become prompts, observations and summaries, exactly once.

Events are read from ``ingest_events`` in id order, session by session. Tool events of a turn are compressed
together (up to ``BATCH_MAX``; the last ones wait ``capture_batch_wait_seconds`` for company unless the turn
ended); a user prompt becomes a prompt item; a stop becomes the turn's summary; a session end closes the
session (and summarises a last turn that never saw a stop). Whatever a batch produced (items, a prompt count,
the session marked ended) is committed together with the ``done`` mark of its events
(``Store.complete_ingest``), so a crash at any point either leaves the events pending (they are processed
again, from scratch) or has them done with their results — never half, never twice. Everything the pipeline
needs to know about a turn (its prompt, its earlier tool calls, the prompt number) is read back from SQLite,
never held in memory between cycles (``capture.turns``, which also says how a late tool event finds its turn).

A tool call an import read before its result was written (``tool_response_pending``, see
``capture.transcripts``) is compressed on its own, and its observations remember the call
(``metadata.awaiting_result``); when the answered call arrives later in the same turn, its observations
replace those, in the transaction that stores them.

Likewise for a turn an import read before it ended: once the grown file shows that the turn went on, the
importer queues the turn's stop again marked ``turn_regrown`` (see ``capture.importer``), and the summary it
makes, from the whole turn, replaces the turn's earlier summary (and with it that summary's provenance) in the
transaction that stores it, as a Stop with ``stop_hook_active`` does. Only replayed events (those with a
``source_key``, which only an import gives) are taken as such: a live hook's Stop never replaces a summary
that way.

The configured model compressor is tried first; a failure of any kind (a reply that is not XML, a refusal,
quota, auth, a token cap) falls back to the offline extractor for that batch and leaves a notice for the
next SessionStart. No memory is ever dropped because no model answered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memcairn.capture.anchors import ANCHOR_ROOT, AnchorReader, safe_anchors
from memcairn.capture.compaction import compaction_sections
from memcairn.capture.evidence import call_evidence, reply_evidence
from memcairn.capture.noise import is_background_notice, request_text, without_filler
from memcairn.capture.offline import OfflineExtractor
from memcairn.capture.offline.paths import outermost
from memcairn.capture.recap import lean_fields, recap_observations
from memcairn.capture.records import Compressed, CompressionFailed, Compressor, Observation, Summary, Turn
from memcairn.capture.reverts import RevertWatch
from memcairn.capture.supersession import supersede_safely
from memcairn.capture.truncate import cut_bytes
from memcairn.capture.turns import TurnReader, call_id, given_number, pending_result
from memcairn.core.models import AddResult, ItemFilter, NewItem
from memcairn.store.protocols import CaptureStore, StepEvidence
from memcairn.store.records import MAX_FIELD_BYTES, IngestEvent, NewEvidence
from memcairn.wire.config import Settings

log = logging.getLogger("memcairn.capture")

BATCH_MAX = 20
MAX_ATTEMPTS = 3
AWAITING_RESULT = "awaiting_result"  # metadata of an observation made before its call's result was known
REGROWN = "turn_regrown"  # in a replayed stop's body: the turn went on after an earlier import summarised it
TURN_END = "turn_end"  # metadata of an observation a Stop made beside its summary (the closing report)


@dataclass
class CaptureReport:
    """What one processing pass did: the items it added to the store (not duplicates, less those a new item
    replaced: an episode observed again whole, a call observed again with its result, a turn summarised again)."""

    events: int = 0
    prompts: int = 0
    observations: int = 0
    summaries: int = 0
    fallbacks: int = 0
    failed: int = 0
    waiting: int = 0  # tool events left pending for their batch to fill up
    fallback_reasons: list[str] = field(default_factory=list)

    def add(self, other: CaptureReport) -> None:
        for name in ("events", "prompts", "observations", "summaries", "fallbacks", "failed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.waiting = other.waiting
        self.fallback_reasons += other.fallback_reasons


class CapturePipeline(TurnReader):
    def __init__(self, store: CaptureStore, settings: Settings, *, compressor: Compressor | None = None,
                 batch_max: int = BATCH_MAX, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.compressor = compressor
        # without a model every batch is the offline extractor's: an episode a batch boundary cut goes on in the
        # next batch, whose observations replace the ones made of its first part (their ``steps``)
        self.offline = OfflineExtractor(reopen=compressor is None)
        self.batch_max = batch_max
        self.clock = clock
        self.reverts = RevertWatch()  # the session's edits, read once each (capture.reverts)

    # -- the pass -----------------------------------------------------------------------------------
    def process_pending(self, *, limit: int = 500, flush: bool = False) -> CaptureReport:
        """Process up to ``limit`` pending events; ``flush`` also compresses tool batches still waiting."""
        report = CaptureReport()
        by_session: dict[tuple[str, str], list[IngestEvent]] = {}
        for event in self.store.pending_ingest_events(limit):
            by_session.setdefault((event.platform_source, event.session_id), []).append(event)
        for events in by_session.values():
            self._session(events, report, flush)
        return report

    def drain(self, *, max_passes: int = 10_000) -> CaptureReport:
        """Process until nothing is pending (imports and tests; the worker uses passes)."""
        total = CaptureReport()
        for _ in range(max_passes):
            report = self.process_pending(flush=True)
            total.add(report)
            if report.events == 0 and report.failed == 0:
                break
        return total

    def _session(self, events: list[IngestEvent], report: CaptureReport, flush: bool) -> None:
        batch: list[IngestEvent] = []
        batch_turn: int | None = None
        for event in events:
            if event.kind == "tool_use" and pending_result(event):
                # alone, so that the observations it makes are its own (an answer later replaces them)
                if batch:
                    self._guard(self._tools, batch, report)
                    batch = []
                self._guard(self._tools, [event], report)
                continue
            if event.kind == "tool_use":
                # a batch is one turn's: a late call of an earlier turn (see the module's docstring) goes alone
                try:
                    turn_key = self._turn_prompt_id(event)
                except Exception as exc:  # its turn cannot be read: this event fails (and is retried) alone
                    log.exception("capture failed for event %s", event.id)
                    self._fail([event], exc, report)
                    continue
                if batch and turn_key != batch_turn:
                    self._guard(self._tools, batch, report)
                    batch = []
                batch_turn = turn_key
                batch.append(event)
                if len(batch) >= self.batch_max:
                    self._guard(self._tools, batch, report)
                    batch = []
                continue
            if batch:
                self._guard(self._tools, batch, report)
                batch = []
            handler = {"session_start": self._session_start, "user_prompt": self._prompt, "stop": self._stop,
                       "session_end": self._session_end, "compaction": self._compaction}.get(event.kind, self._ignore)
            self._guard(handler, [event], report)
        if batch:
            newest = max(e.created_at_epoch for e in batch)
            waited_ms = self.clock() * 1000 - newest
            if flush or waited_ms >= self.settings.capture_batch_wait_seconds * 1000:
                self._guard(self._tools, batch, report)
            else:
                report.waiting += len(batch)

    def _guard(self, handler: Callable[[list[IngestEvent], CaptureReport], None], events: list[IngestEvent],
               report: CaptureReport) -> None:
        """Run one handler; a bug or a store error fails these events (retried, then kept as failed)."""
        try:
            handler(events, report)
        except Exception as exc:
            log.exception("capture failed for events %s", [e.id for e in events])
            self._fail(events, exc, report)

    def _fail(self, events: list[IngestEvent], exc: Exception, report: CaptureReport) -> None:
        """Count an attempt of each event: pending again, or failed (kept, with the error) after the last."""
        report.failed += len(events)
        for event in events:
            status = "failed" if event.attempts + 1 >= MAX_ATTEMPTS else "pending"
            self.store.mark_ingest_event(event.id, status, error=f"{type(exc).__name__}: {exc}"[:500])

    def _commit(self, events: list[IngestEvent], items: list[NewItem], report: CaptureReport,
                prompt_session: tuple[str, str, str] | None = None,
                end_session: tuple[str, str, str, int] | None = None,
                replaces: Sequence[int] = (), replaced_kind: str = "observation") -> list[AddResult] | None:
        results = self.store.complete_ingest([e.id for e in events], items, prompt_session=prompt_session,
                                             end_session=end_session, replaces=replaces)
        if results is None:  # another processor finished these events first
            return None
        report.events += len(events)
        counts = {"prompt": "prompts", "observation": "observations", "summary": "summaries"}
        for item, result in zip(items, results, strict=True):
            if result.created:
                setattr(report, counts[item.kind], getattr(report, counts[item.kind]) + 1)
        kept = {result.id for result in results}
        gone = sum(1 for i in replaces if i not in kept)  # replaced by another: no longer stored
        setattr(report, counts[replaced_kind], getattr(report, counts[replaced_kind]) - gone)
        return results

    # -- handlers -------------------------------------------------------------------------------------
    def _ignore(self, events: list[IngestEvent], report: CaptureReport) -> None:
        self._commit(events, [], report)

    def _session_start(self, events: list[IngestEvent], report: CaptureReport) -> None:
        event = events[0]
        self.store.ensure_session(event.session_id, self._project(event), event.platform_source, event.at_epoch)
        self._commit(events, [], report)

    def _prompt(self, events: list[IngestEvent], report: CaptureReport) -> None:
        event = events[0]
        project = self._project(event)
        counted = (event.platform_source, event.session_id, project)
        prompt = request_text(event.payload.get("prompt"))
        if event.payload.get("private") or prompt is None:
            # counted (it begins a turn) but not stored: nothing, or a notice the harness wrote (capture.noise)
            self._commit(events, [], report, prompt_session=counted)
            return
        number = given_number(event) or self.store.session_prompt_count(event.platform_source,
                                                                         event.session_id) + 1
        # a prompt the store could not hold (over its per-field limit) keeps its head and tail, not nothing
        item = NewItem(project=project, kind="prompt", type="prompt", text=cut_bytes(prompt, MAX_FIELD_BYTES),
                       prompt_number=number, session=event.session_id, platform_source=event.platform_source,
                       created_at_epoch=event.at_epoch, source=_source(event))
        self._commit(events, [item], report, prompt_session=counted)

    def _tools(self, events: list[IngestEvent], report: CaptureReport) -> None:
        first = events[0]
        answering = {i for i in (call_id(e) for e in events if not pending_result(e)) if i is not None}
        prompt_event, earlier, number = self._turn_events(first)
        turn = self._make_turn(first, prompt_event, earlier, number, answering)
        if prompt_event is not None and prompt_event.payload.get("private"):
            self._commit(events, [], report)  # a private prompt's tool calls are not observed
            return
        calls = [self._call(e) for e in events]
        compressed = self._compress("observe", turn, calls, report, turn.project)
        awaiting = call_id(first) if len(events) == 1 and pending_result(first) else None
        items = _anchored([self._observation_item(o, turn, events[-1], i, compressed, awaiting)
                           for i, o in enumerate(compressed.observations)],
                          _root(first, turn.cwd, *(c.cwd for c in calls)))
        answered = {call_id(e) for e in earlier if pending_result(e)} & answering
        replaced = self._awaiting_items(turn, answered) if answered else []
        reopened = {step for o in compressed.observations for step in o.steps} - {call_id(e) for e in events}
        replaced += self._items_covering(turn, reopened) if reopened else []
        results = self._commit(events, items, report, replaces=replaced)
        for item, result in zip(items, results or (), strict=False):
            if result.id in replaced:
                self._refresh(result.id, item)
        if results is not None:
            supersede_safely(self.store, [r.id for r in results if r.id])  # after the commit, on its own
            self.reverts.mark(self.store, events)
            # a call read before its result is keyed by its call id too, so its answer later takes its place
            keyed = [replace(c, tool_use_id=call_id(e)) for c, e in zip(calls, events, strict=True)]
            self._keep_evidence(call_evidence(turn, keyed, [r.id for r in results]))

    def _keep_evidence(self, steps: list[NewEvidence]) -> None:
        """Keep the steps behind the memories just committed (``capture.evidence``). After the commit and on its
        own: evidence is what a search may quote, never a reason to fail or repeat capture."""
        if not steps or not self.settings.capture_evidence or not isinstance(self.store, StepEvidence):
            return
        try:
            self.store.add_evidence(steps)
        except Exception:
            log.warning("could not keep the evidence of %d steps", len(steps), exc_info=True)

    def _refresh(self, item_id: int, made: NewItem) -> None:
        """The new observation is the one it replaces by title and narrative (the store kept that one): give it
        the new one's facts, files, type and metadata (an answered call's result, an episode's later steps; no
        awaiting-result mark unless the new one has it). After the commit, so a failure here only leaves the
        older content (never fails done events)."""
        try:
            self.store.update_item(item_id, type=made.type, subtitle=made.subtitle, facts=made.facts,
                                   concepts=made.concepts, files_read=made.files_read,
                                   files_modified=made.files_modified, metadata=made.metadata,
                                   anchors=made.anchors)
        except Exception:
            log.warning("could not bring #%s up to date with its later observation", item_id, exc_info=True)

    def _stop(self, events: list[IngestEvent], report: CaptureReport) -> None:
        event = events[0]
        turn, prompt_event = self._turn(event)
        if prompt_event is not None and prompt_event.payload.get("private"):
            self._commit(events, [], report)
            return
        message = without_filler(event.payload.get("last_assistant_message"))
        turn = replace(turn, last_assistant_message=message)
        notice = prompt_event is not None and is_background_notice(prompt_event.payload.get("prompt"))
        items = self._summary_items(turn, event, report, work_only=notice)
        # A stop hook (this agent's or another plugin's) can make the agent go on after a Stop: the turn then
        # stops again with `stop_hook_active`. Its new summary, made from the whole turn, supersedes the earlier
        # one instead of sitting beside it. Only then, and only the summaries of this turn's earlier Stops: a
        # turn whose prompt never reached the queue shares the previous turn's number (or has none). A turn an
        # import summarised while it was still going on is summarised again the same way (`_regrown`).
        supersedes = _continued(event) or _regrown(event)
        earlier = self._turn_summaries(turn, event, prompt_event) if items and supersedes else []
        results = self._commit(events, items, report, replaces=earlier, replaced_kind="summary")
        if results is not None:
            self._keep_evidence(reply_evidence(turn, f"reply@{event.at_epoch}", event.at_epoch,
                                               [r.id for r in results]))

    def _compaction(self, events: list[IngestEvent], report: CaptureReport) -> None:
        """The summary the agent wrote of its conversation when compacting it: a summary of the session, in the
        agent's own words, its sections mapped onto the summary's fields (``capture.compaction``)."""
        event = events[0]
        text = event.payload.get("summary")
        if not isinstance(text, str) or not text.strip():
            self._commit(events, [], report)
            return
        # each file and error it names is an observation of its own, for a search to find one by one; the summary
        # then keeps their headlines rather than their details (``capture.recap``)
        observations = recap_observations(text)
        fields = (lean_fields(text, observations) if observations else None) or compaction_sections(text)
        head = fields.get("request") or fields.get("notes") or text
        head = head.split(":", 1)[1] if head.lower().startswith("primary request") else head
        common: dict[str, Any] = {"project": self._project(event), "session": event.session_id,
                                  "platform_source": event.platform_source, "created_at_epoch": event.at_epoch,
                                  "metadata": {"compaction": True}}
        item = NewItem(kind="summary", type="summary", title=_first_line("Compacted: " + head.strip(), 80),
                       source=_source(event), **common, **fields)
        small = [NewItem(kind="observation", type=o.type, title=o.title, narrative=o.narrative, facts=o.facts,
                         concepts=o.concepts, files_modified=o.files_modified, source=_source(event, f"#{i}"),
                         **common) for i, o in enumerate(observations)]
        self._commit(events, _anchored([item, *small], _root(event, event.payload.get("cwd"))), report)

    def _session_end(self, events: list[IngestEvent], report: CaptureReport) -> None:
        event = events[0]
        items: list[NewItem] = []
        turn, prompt_event = self._turn(event)
        if prompt_event is not None and not prompt_event.payload.get("private"):
            stops = [e for e in self.store.session_events(event.platform_source, event.session_id,
                                                          after_id=prompt_event.id, before_id=event.id,
                                                          event_type="summarize") if e.kind == "stop"]
            if not stops:  # the last turn never saw a stop (the agent was closed mid-turn)
                items = self._summary_items(turn, event, report)
        # the session is marked ended in the transaction that marks the event done: never one without the other
        self._commit(events, items, report,
                     end_session=(event.platform_source, event.session_id, turn.project, event.at_epoch))

    def _awaiting_items(self, turn: Turn, call_ids: set[str | None]) -> list[int]:
        """Ids of the observations made of these calls while their results were not known yet."""
        items = self.store.list_items(ItemFilter(session=turn.session_id, kinds=["observation"],
                                                 platform_source=turn.platform_source), order="newest", limit=500)
        return [i.id for i in items if i.metadata.get(AWAITING_RESULT) in call_ids]

    def _items_covering(self, turn: Turn, call_ids: set[str | None]) -> list[int]:
        """Ids of the turn's observations made of any of these calls (an episode observed again, whole)."""
        items = self.store.list_items(ItemFilter(session=turn.session_id, kinds=["observation"],
                                                 platform_source=turn.platform_source), order="newest", limit=500)
        return [i.id for i in items if i.prompt_number == turn.prompt_number
                and set(i.metadata.get("steps") or ()) & call_ids]

    def _compress(self, op: str, turn: Turn, arg: Sequence[Any], report: CaptureReport, project: str) -> Compressed:
        if self.compressor is not None:
            try:
                return getattr(self.compressor, op)(turn, arg)
            except CompressionFailed as exc:
                reason, detail = exc.reason, exc.detail
            except Exception as exc:  # a backend bug must not lose the memory either
                log.exception("the %s compressor failed", self.compressor.name)
                reason, detail = "error", f"{type(exc).__name__}: {exc}"
            report.fallbacks += 1
            report.fallback_reasons.append(reason)
            log.warning("the %s compressor failed (%s: %s); using the offline extractor", self.compressor.name,
                        reason, detail)
            self.store.add_capture_notice(f"llm_{reason}", _notice(self.compressor.name, reason, detail), project)
            result: Compressed = getattr(self.offline, op)(turn, arg)
            result.usage, result.fallback_reason = [], reason
            return result
        return getattr(self.offline, op)(turn, arg)

    def _observation_item(self, obs: Observation, turn: Turn, last: IngestEvent, index: int,
                          compressed: Compressed, awaiting: str | None = None) -> NewItem:
        metadata = _produced_by(self, compressed)
        if obs.steps:
            metadata["steps"] = list(obs.steps)
        if awaiting is not None:
            metadata[AWAITING_RESULT] = awaiting
        return NewItem(
            project=turn.project, kind="observation", type=obs.type, title=obs.title, subtitle=obs.subtitle,
            narrative=obs.narrative, facts=obs.facts, concepts=obs.concepts, files_read=obs.files_read,
            files_modified=obs.files_modified, prompt_number=turn.prompt_number, session=turn.session_id,
            platform_source=turn.platform_source, created_at_epoch=last.at_epoch,
            metadata=metadata, source=_source(last, f"#{index}"),
        )

    def _summary_items(self, turn: Turn, event: IngestEvent, report: CaptureReport, *,
                       work_only: bool = False) -> list[NewItem]:
        """The turn's summary (and its closing observations); none for a turn that did nothing, nor, with
        ``work_only``, for one that left no observation (the agent answering a background task's notice:
        "that was a stale task from before; everything already passed")."""
        observations = self._turn_observations(turn)
        if not observations and (work_only or (turn.prompt is None and not turn.last_assistant_message)):
            return []
        compressed = self._compress("summarize", turn, observations, report, turn.project)
        summary: Summary | None = compressed.summary
        if summary is None:
            return []
        title = _first_line(summary.request or turn.prompt or summary.completed or summary.notes or "Session summary",
                            80)
        items = [NewItem(
            project=turn.project, kind="summary", type="summary", title=title, request=summary.request,
            investigated=summary.investigated, learned=summary.learned, completed=summary.completed,
            next_steps=summary.next_steps, notes=summary.notes, files_read=summary.files_read,
            files_modified=summary.files_modified, prompt_number=turn.prompt_number, session=turn.session_id,
            platform_source=turn.platform_source, created_at_epoch=event.at_epoch,
            metadata=_produced_by(self, compressed), source=_source(event),
        )]
        # a compressor may also make observations of the turn's end (the offline extractor: the agent's closing
        # report, a record of its own); they go and come with the summary (``_turn_summaries``)
        for index, obs in enumerate(compressed.observations):
            made = self._observation_item(obs, turn, event, index, compressed)
            items.append(replace(made, metadata={**made.metadata, TURN_END: True},
                                 source=_source(event, f"#end{index}")))
        return _anchored(items, _root(event, turn.cwd, *(c.cwd for c in turn.tools)))

    def _turn_summaries(self, turn: Turn, event: IngestEvent, prompt_event: IngestEvent | None) -> list[int]:
        """Ids of the summaries made by the earlier Stops of the turn ``event`` continues.

        That turn's Stops are the one right before ``event``, and before it those it continued in turn: the
        chain ends at a Stop without ``stop_hook_active`` (the turn's first) or at the turn's prompt. A summary
        is named by what its Stop gave it: the turn's number and the Stop's time. An import's stops of a turn
        that went on after an earlier import (``turn_regrown``) continue the chain as a ``stop_hook_active``
        does.
        """
        after = prompt_event.id if prompt_event is not None else 0
        stops = [e for e in self.store.session_events(event.platform_source, event.session_id, after_id=after,
                                                       before_id=event.id, event_type="summarize")
                 if e.kind == "stop"]
        times: set[int] = set()
        for stop in reversed(stops):
            times.add(stop.at_epoch)
            if not (_continued(stop) or _regrown(stop)):
                break
        if not times:
            return []
        items = self.store.list_items(ItemFilter(session=turn.session_id, kinds=["summary", "observation"],
                                                 platform_source=turn.platform_source), order="newest", limit=500)
        return [i.id for i in items if i.prompt_number == turn.prompt_number and i.created_at_epoch in times
                and (i.kind == "summary" or i.metadata.get(TURN_END) is True)]

    def _turn_observations(self, turn: Turn) -> list[Observation]:
        items = self.store.list_items(ItemFilter(session=turn.session_id, kinds=["observation"],
                                                 platform_source=turn.platform_source), order="oldest", limit=500)
        return [
            Observation(type=i.type, title=i.title or "", subtitle=i.subtitle, narrative=i.narrative,
                        facts=tuple(i.facts), concepts=tuple(i.concepts), files_read=tuple(i.files_read),
                        files_modified=tuple(i.files_modified))
            for i in items if i.prompt_number == turn.prompt_number and i.metadata.get(TURN_END) is not True
        ]


def _root(event: IngestEvent, *cwds: Any) -> str | None:
    """The directory a memory's files are read from: the one an import was given (``--root``), else the
    outermost of the directories the turn and its calls ran in (the one the offline extractor makes paths
    relative to)."""
    given = event.payload.get(ANCHOR_ROOT)
    if isinstance(given, str) and given:
        return given
    return outermost(*(c for c in cwds if isinstance(c, str)))


_ANCHOR_TEXTS = ("title", "subtitle", "narrative", "text", "request", "investigated", "learned", "completed",
                 "next_steps", "notes")


def _anchored(items: list[NewItem], root: str | None) -> list[NewItem]:
    """``items`` with their anchors (``capture.anchors``), each file read once for all of them."""
    reader = AnchorReader()
    return [replace(item, anchors=safe_anchors(reader, root, (*item.files_read, *item.files_modified),
                                               [*(getattr(item, f) for f in _ANCHOR_TEXTS), *item.facts]))
            for item in items]


def _continued(event: IngestEvent) -> bool:
    """A Stop of a turn that went on because a stop hook asked it to (it stopped before)."""
    return event.payload.get("stop_hook_active") is True


def _regrown(event: IngestEvent) -> bool:
    """An import's stop of a turn that went on after an earlier import of the same file summarised it. Only a
    replayed event (with a ``source_key``) counts: a live hook's body is never taken for one."""
    return event.source_key is not None and event.payload.get(REGROWN) is True


def _source(event: IngestEvent, suffix: str = "") -> tuple[str, str, str]:
    """Provenance of an item: the replayed line (imports) or the hook event that produced it."""
    key = event.source_key or f"event:{event.id}"
    kind = key.split(":", 1)[0] if event.source_key and ":" in event.source_key else "hook"
    return kind, "ingest_events", key + suffix


def _produced_by(pipeline: CapturePipeline, compressed: Compressed) -> dict[str, Any]:
    reason = compressed.fallback_reason
    name = "offline" if pipeline.compressor is None or reason else pipeline.compressor.name
    return {"compressor": name, **({"fallback_reason": reason} if reason else {})}


def _notice(backend: str, reason: str, detail: str = "") -> str:
    """The warning the next SessionStart and `memcairn doctor` show: what failed, the backend's own words (its
    first line: an error name such as error_max_turns says what to change), and what was done instead."""
    what = {
        "budget": "reached its token cap",
        "auth": "was refused (check the API key or login)",
        "quota": "hit a rate limit or is out of quota",
        "prose": "answered without the structured XML asked for",
        "refusal": "refused to summarise",
        "timeout": "timed out",
    }.get(reason, "failed")
    said = f" ({_first_line(detail, 200)})" if detail.strip() else ""
    return (f"memory capture: the {backend} model backend {what}{said}; observations came from the offline "
            "extractor meanwhile (each failure is in the worker log, logs/worker.log in MEMCAIRN_HOME)")


def _first_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
