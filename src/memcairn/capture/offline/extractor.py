"""The extractor: a turn's calls into observations (lookups grouped, verifying runs folded) and its summary."""

from __future__ import annotations

from collections.abc import Sequence

from memcairn.capture.offline.actions import _Action, _digest
from memcairn.capture.offline.cards import file_cards
from memcairn.capture.offline.drafts import (
    _Draft,
    _edit_draft,
    _failed_edit_draft,
    _finish,
    _other_draft,
    _plan_draft,
    _read_group_draft,
    _shell_draft,
    _task_draft,
)
from memcairn.capture.offline.episodes import TAIL_MAX, episodes, is_housekeeping, open_tail
from memcairn.capture.offline.fixes import _fix_evidence, _FixEvidence, _timeline
from memcairn.capture.offline.summary import MID_REPORT_MIN, _report, _summary, report_observation
from memcairn.capture.offline.text import SUBTITLE_MAX, _clip, _first_sentence
from memcairn.capture.offline.trackers import filed_tickets
from memcairn.capture.records import Compressed, Observation, ToolCall, Turn


def _is_trivial(action: _Action) -> bool:
    """Skipped: no-information tools, and non-edit calls with neither output nor files."""
    if action.family == "skip":
        return True
    if action.family == "plan":
        return False
    if action.is_edit or action.outcome.failed:
        return False
    return not action.outcome.text.strip() and not action.reads and not action.writes


def _is_lookup(action: _Action) -> bool:
    if action.outcome.failed and action.family not in ("read", "search"):
        return False
    return action.family in ("read", "search") or (action.family == "shell" and action.read_only_shell)


def _validations(edits: Sequence[tuple[_Action, _FixEvidence | None]], batch: set[int]) -> dict[int, int]:
    """Passing runs in this batch that confirm an edit's fix → the last edit they confirm (folded into it)."""
    folded: dict[int, int] = {}
    for edit, evidence in edits:
        if evidence and evidence.validation and evidence.validation.index in batch:
            folded[evidence.validation.index] = edit.index
    return folded


def _observe(turn: Turn, calls: Sequence[ToolCall], reopen: bool = False) -> list[Observation]:
    tools, positions = _timeline(turn, calls)
    actions: list[_Action] = []
    wanted = set(positions)
    for index, call in enumerate(tools):
        actions.append(_digest(index, call, turn, actions, index in wanted))
    if reopen:
        tail = open_tail(actions, min(positions, default=len(actions)), earlier_complete=len(turn.tools) < TAIL_MAX)
        for index in tail:  # observed again with the batch: their episode goes on
            if actions[index].command is None:  # a command's digest is already whole; others skipped detail
                actions[index] = _digest(index, tools[index], turn, actions[:index], True)
        positions = sorted({*tail, *positions})
    batch = [actions[p] for p in positions]
    edits = [(a, _fix_evidence(a, actions)) for a in batch if a.is_edit and not a.outcome.failed]
    evidence = {a.index: e for a, e in edits}
    folded = _validations(edits, {a.index for a in batch})
    drafts: list[_Draft] = []
    reports: list[Observation] = []
    group: list[_Action] = []
    said: list[str] = []  # narration of calls not drafted yet: it goes with the next draft
    chores: list[_Action] = []  # housekeeping skipped
    for action in batch:
        # a report the agent wrote between two calls (a sub-task done) is a record of its own, else the narration
        # goes with the call's observation
        report = report_observation(action.call.narration, turn.prompt, action.writes + action.reads,
                                    MID_REPORT_MIN)
        if report is not None:
            reports.append(report)
        elif action.call.narration:
            said.append(action.call.narration)
        if _is_trivial(action) or action.index in folded:
            continue
        if is_housekeeping(action):
            chores.append(action)
            continue
        if _is_lookup(action):
            group.append(action)
            continue
        if group:
            drafts.append(_covering(_read_group_draft(group), group))
            group = []
        draft = _draft_for(action, evidence.get(action.index), actions)
        confirmed = [v for v, e in folded.items() if e == action.index]
        drafts.append(_covering(draft, [action, *(actions[v] for v in confirmed)]))
        drafts[-1].said, said = said, []
    if group:
        drafts.append(_covering(_read_group_draft(group), group))
    if not drafts and said and chores:  # the agent's words are kept with the chore they came with
        drafts.append(_covering(_read_group_draft(chores[-1:]), chores[-1:]))
    if drafts and said:
        drafts[-1].said += said
    # Each episode, then the cards of the files it wrote (unless it quotes all of them) and the tickets it filed:
    # in the order of the work, so an episode observed in two batches leaves its records in the same order as
    # one observed whole.
    subtitle = _clip(_first_sentence(turn.prompt, 150), SUBTITLE_MAX) or None
    out = list(reports)
    for draft in episodes(drafts):
        episode = _finish(draft, turn)
        out.append(episode)
        if len(draft.actions) > 1:
            out += file_cards(draft.actions, subtitle, told=" ".join(episode.facts))
            out += filed_tickets(draft.actions, subtitle)
    return out


def _covering(draft: _Draft, steps: Sequence[_Action]) -> _Draft:
    draft.actions = sorted(steps, key=lambda a: a.index)
    return draft


def _draft_for(action: _Action, evidence: _FixEvidence | None, actions: Sequence[_Action]) -> _Draft:
    if action.is_edit and action.outcome.failed and action.family != "shell":
        return _failed_edit_draft(action)
    if action.is_edit and not action.outcome.failed:
        return _edit_draft(action, evidence)
    if action.family == "shell":
        draft = _shell_draft(action, actions)
        draft.files_modified = [] if action.outcome.interrupted else list(action.writes)
        return draft
    if action.family == "task":
        return _task_draft(action)
    if action.family == "plan":
        return _plan_draft(action)
    return _other_draft(action)


class OfflineExtractor:
    """The rule-based :class:`~memcairn.capture.records.Compressor`: no model, no cost, same output every time."""

    name = "offline"

    def __init__(self, *, reopen: bool = False) -> None:
        self.reopen = reopen

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        """One observation per episode of the batch (see ``episodes``). With ``reopen``, the turn's earlier
        calls since its last commit are observed again with the batch, so an episode cut by a batch boundary
        goes on; the earlier calls are in the observations' ``steps``, and the caller replaces what it stored
        for them (the pipeline does)."""
        return Compressed(observations=_observe(turn, list(calls or ()), self.reopen))

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        """The turn's summary from its prompt, observations, the agent's narration and its last message; and the
        closing message as an observation of its own when it reports enough."""
        observed = list(observations or ())
        summary = _summary(turn, observed)
        report = _report(turn, observed) if summary is not None else None
        return Compressed(summary=summary, observations=[report] if report is not None else [])
