"""The extractor: a turn's calls into observations (lookups grouped, verifying runs folded) and its summary."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memcairn.capture.offline.actions import _PURPOSE, _Action, _digest
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
from memcairn.capture.offline.fixes import _fix_evidence, _FixEvidence, _timeline
from memcairn.capture.offline.text import _SENTENCE_END, _clip, _first_sentences, _plain, _unique
from memcairn.capture.records import Compressed, Observation, Summary, ToolCall, Turn

_NEXT_CUE = re.compile(
    r"\b(?:next|todo|remaining|remains|should|need to|needs to|still|follow[- ]up)\b", re.IGNORECASE
)
_LEARNED_CUE = re.compile(
    r"\b(?:errors?|fail(?:ed|s|ing|ure)?|passed|warnings?|deprecated|fixe[sd]|exception|traceback|verified)\b",
    re.IGNORECASE,
)


# what edits did to code, not lessons (``edited a.py: added ParseError``, its new lines)
_NAME_FACTS = ("edited ", "created ", "rewrote ", "added ", "updated ", "new text: ")


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


def _observe(turn: Turn, calls: Sequence[ToolCall]) -> list[Observation]:
    tools, positions = _timeline(turn, calls)
    actions: list[_Action] = []
    wanted = set(positions)
    for index, call in enumerate(tools):
        actions.append(_digest(index, call, turn, actions, index in wanted))
    batch = [actions[p] for p in positions]
    edits = [(a, _fix_evidence(a, actions)) for a in batch if a.is_edit and not a.outcome.failed]
    evidence = {a.index: e for a, e in edits}
    folded = _validations(edits, {a.index for a in batch})
    drafts: list[_Draft] = []
    group: list[_Action] = []
    for action in batch:
        if _is_trivial(action) or action.index in folded:
            continue
        if _is_lookup(action):
            group.append(action)
            continue
        if group:
            drafts.append(_read_group_draft(group))
            group = []
        drafts.append(_draft_for(action, evidence.get(action.index), actions))
    if group:
        drafts.append(_read_group_draft(group))
    return [_finish(draft, turn) for draft in drafts]


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


# -------------------------------------------------------------------------------------------------------- summarize


def _joined(parts: Iterable[str], limit: int = 800) -> str | None:
    text = "; ".join(_unique(p for p in parts if p))
    return _clip(text, limit) or None


def _next_steps(message: str | None) -> str | None:
    sentences = [s for s in _SENTENCE_END.split(_plain(message)) if _NEXT_CUE.search(s)]
    return _clip(" ".join(sentences), 400) or None


def _summary(turn: Turn, observations: Sequence[Observation]) -> Summary | None:
    message = turn.last_assistant_message if isinstance(turn.last_assistant_message, str) else None
    prompt = turn.prompt if isinstance(turn.prompt, str) else None
    if not (prompt and prompt.strip()) and not observations and not (message and message.strip()):
        return None
    looked = [o for o in observations if o.type == "discovery"]
    done = [o for o in observations if o.type in ("bugfix", "feature", "change", "refactor")]
    learned = [o.title for o in observations if o.type in ("bugfix", "decision")]
    learned += [fact for o in observations for fact in o.facts
                if _LEARNED_CUE.search(fact) and fact not in ("tests passed", "tests failed")
                and not fact.startswith((*_NAME_FACTS, _PURPOSE))][:6]
    return Summary(
        request=_clip(prompt, 300) or None,
        investigated=_joined(o.title for o in looked),
        learned=_joined(learned),
        completed=_joined(o.title for o in done),
        next_steps=_next_steps(message),
        notes=_first_sentences(message, 400) or None,
        files_read=tuple(_unique(path for o in observations for path in o.files_read)),
        files_modified=tuple(_unique(path for o in observations for path in o.files_modified)),
    )


class OfflineExtractor:
    """The rule-based :class:`~memcairn.capture.records.Compressor`: no model, no cost, same output every time."""

    name = "offline"

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        """One observation per meaningful call (runs of lookups merged); see the package docstring for types."""
        return Compressed(observations=_observe(turn, list(calls or ())))

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        """The turn's summary from its prompt, observations and the agent's last message."""
        return Compressed(summary=_summary(turn, list(observations or ())))
