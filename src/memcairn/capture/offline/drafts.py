"""Observation drafts per kind of action (edit, shell run, lookups, sub-task, plan) and their finishing caps."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from memcairn.capture.offline import narration
from memcairn.capture.offline.actions import _Action, _input_dict, _purpose, _subject
from memcairn.capture.offline.commits import commit_files, commit_message, commit_sha, is_commit
from memcairn.capture.offline.fixes import _FixEvidence
from memcairn.capture.offline.outcomes import _Outcome, _output_gist
from memcairn.capture.offline.text import (
    FACT_MAX,
    FACTS_MAX,
    SUBTITLE_MAX,
    TEXT_MAX,
    TITLE_MAX,
    _clip,
    _code,
    _first_sentence,
    _first_sentences,
    _listing,
    _unique,
)
from memcairn.capture.offline.trackers import FILED_PREFIX, is_tracker, tracker_fact
from memcairn.capture.records import CONCEPTS, Observation, Turn

COMMITTED = "committed: "
NARRATION_MAX = 500  # characters of the agent's narration an observation keeps


@dataclass
class _Draft:
    type: str
    title: str
    action_text: str
    facts: list[str] = field(default_factory=list)
    outcome_text: str = ""
    concepts: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    files_modified: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # the agent's narration before the draft's calls
    actions: list[_Action] = field(default_factory=list)  # the calls it covers, in order (its provenance)


def _finish(draft: _Draft, turn: Turn) -> Observation:
    """Caps, prompt-derived subtitle and narrative, ordered concepts. The narrative leads with the decisive
    sentences of the agent's own narration (why, what it found, what it chose), when it wrote any."""
    request = _first_sentence(turn.prompt, 150)
    subtitle = _clip(request, SUBTITLE_MAX) if request else None
    body = draft.action_text.rstrip(".")
    why = narration.joined(narration.decisive(draft.said, NARRATION_MAX))
    if why:
        lead = f"{why} The agent {body}."
    else:
        lead = f'For the request "{request}", the agent {body}.' if request else f"The agent {body}."
    narrative = " ".join(part for part in (lead, draft.outcome_text) if part)
    concepts = tuple(c for c in CONCEPTS if c in draft.concepts)
    return Observation(
        type=draft.type, title=_clip(draft.title, TITLE_MAX), subtitle=subtitle,
        narrative=_clip(narrative, TEXT_MAX), facts=tuple(_clip(f, FACT_MAX) for f in _unique(draft.facts))[:FACTS_MAX],
        concepts=concepts, files_read=tuple(_unique(draft.files_read)),
        files_modified=tuple(_unique(draft.files_modified)),
        steps=tuple(_unique(a.call.tool_use_id for a in draft.actions if isinstance(a.call.tool_use_id, str))),
    )


def _run_fact(action: _Action) -> str:
    """``ran `cmd` → 3 failed, 10 passed``; a run that ended well without test counts says what it printed."""
    outcome = action.outcome
    label = outcome.label()
    printed = _output_gist(outcome.text, 140) if outcome.ok and not outcome.tests else ""
    return f"ran {_code(action.shown, 120)} → {label}" + (f": {printed}" if printed else "")


def _outcome_facts(outcome: _Outcome) -> list[str]:
    facts = []
    if outcome.failing_tests:
        facts.append(f"failing tests: {', '.join(outcome.failing_tests)}")
    if outcome.error:
        facts.append(f"error: {outcome.error}")
    if outcome.warning and outcome.warning != outcome.error:
        facts.append(f"warning: {outcome.warning}")
    return facts


def _gotcha(outcome: _Outcome) -> list[str]:
    return ["gotcha"] if outcome.warning else []


def _edit_draft(action: _Action, evidence: _FixEvidence | None) -> _Draft:
    files = action.writes
    target = _listing(files, 2) if files else "a file"
    if action.moves_only:
        kind, verb = "refactor", "Moved"
    elif action.created and action.family in ("write", "patch"):
        kind, verb = "feature", "Created"
    elif evidence is not None:
        kind, verb = "bugfix", "Fixed"
    else:
        kind, verb = "change", "Deleted" if action.deletes_only else "Edited"
    detail = _added(action.names, f"{verb} {target}")
    if action.moves_only and action.hints:
        title = action.hints[0][0].upper() + action.hints[0][1:]
    elif action.family == "shell" and kind == "change" and not action.deletes_only:
        title = f"Changed {target} via {_code(action.shown, 40)}"
    elif evidence is not None and kind == "bugfix" and not detail:
        title = f"Fixed {target} after failing {_code(evidence.failure.shown, 30)}"
    else:
        title = f"{verb} {target}{detail}"
    adding = f", adding {_listing(action.names, 3)}" if action.names else ""
    draft = _Draft(
        type=kind, title=title, action_text=f"{verb.lower()} {target}{adding}", facts=list(action.hints),
        concepts=["what-changed"], files_read=list(action.reads), files_modified=list(files),
    )
    if action.command:
        draft.facts[:0] = [_run_fact(action), *_purpose(action)]
    if evidence is not None and kind == "bugfix":
        _add_fix(draft, evidence)
    return draft


def _added(names: Sequence[str], title: str) -> str:
    """``: added a, b (+3 more)``, naming one only when two would not fit a title after ``title``."""
    detail = ""
    for shown in (2, 1):
        detail = f": added {_listing(names, shown)}" if names else ""
        if len(title) + len(detail) <= TITLE_MAX:
            break
    return detail


def _add_fix(draft: _Draft, evidence: _FixEvidence) -> None:
    failure = evidence.failure
    draft.concepts.append("problem-solution")
    draft.facts.append(f"after failure: {_code(failure.shown, 80)} → {failure.outcome.label()}")
    draft.facts.extend(f"fixes {fact}" for fact in _outcome_facts(failure.outcome)[:1])
    before = f"{_code(failure.shown)} had failed ({failure.outcome.label()}) before this edit"
    if evidence.validation is None:
        draft.outcome_text = f"{before}; it has not been re-run since."
        return
    check = evidence.validation
    draft.facts.append(f"verified: {_code(check.shown, 80)} → {check.outcome.label()}")
    if check.outcome.tests:
        draft.facts.append("tests passed")
    draft.outcome_text = f"{before} and passed afterwards ({check.outcome.label()})."


def _shell_draft(action: _Action, actions: Sequence[_Action]) -> _Draft:
    outcome = action.outcome
    shown, described = _subject(action, 50)
    ran = shown if described else f"Ran {shown}"
    draft = _Draft(
        type="discovery", title=ran, action_text=f"ran {_code(action.shown, 100)}",
        facts=[_run_fact(action), *_purpose(action), *_outcome_facts(outcome)], concepts=_gotcha(outcome),
        files_read=list(action.reads),
    )
    if outcome.tests:
        draft.title = f"{ran}: {outcome.tests}"
        ended = "tests interrupted" if outcome.interrupted and not outcome.tests_failed else "tests failed"
        draft.facts.append(ended if outcome.failed else "tests passed")
        if outcome.ok and any(a.same_check(action) and a.outcome.failed for a in actions if a.index < action.index):
            draft.concepts.extend(["problem-solution", "what-changed"])
            draft.outcome_text = "It passed after an earlier failing run in the same turn."
    if outcome.interrupted:
        draft.title = f"Command interrupted: {shown}"
    elif outcome.failed_beyond_tests:  # failed with no failing counts to show it: say so, never "Ran …: 4 passed"
        code = f" (exit {outcome.exit_code})" if outcome.exit_code not in (None, 0) else ""
        draft.title = f"Command failed{code}: {shown}"
    if is_commit(action.command) and re.search(r"^\[[^\]\n]+\] ", outcome.text[:4000], re.MULTILINE):
        _commit_facts(draft, action)
    elif outcome.ok and is_tracker(action.command):  # a ticket filed or closed: what it says, not "ran bd ..."
        draft.facts[0] = tracker_fact(action.shown, outcome.text)
        said = draft.facts[0].split(" → ", 1)
        if len(said) == 2:
            filed = "Filed: " if draft.facts[0].startswith(FILED_PREFIX) else ""
            draft.type, draft.title = "change", _clip(filed + said[1], TITLE_MAX)
    if not draft.outcome_text:
        draft.outcome_text = f"Outcome: {outcome.label()}." if outcome.status != "unknown" else ""
    return draft


def _commit_facts(draft: _Draft, action: _Action) -> None:
    """A commit's subject, body and files; its title when it succeeded (the message says what the work was
    better than the command line does)."""
    command, output = action.command or "", action.outcome.text
    found = commit_message(command, output)
    if found is None:
        return
    subject, body = found
    sha = commit_sha(output)
    draft.facts.append(f"{COMMITTED}{subject}" + (f" ({sha})" if sha else ""))
    if body:
        draft.facts.append(f"commit message: {body}")
    files, stat = commit_files(command, output)
    if files or stat:
        listed = _listing(files, 6) if files else ""
        draft.facts.append("commit files: " + " ".join(p for p in (listed, f"({stat})" if stat else "") if p))
    if action.outcome.ok:
        draft.type, draft.title = "change", _clip(f"Committed: {subject}", TITLE_MAX)


def _read_group_draft(group: Sequence[_Action]) -> _Draft:
    files = _unique(path for a in group for path in a.reads)
    only_reads = all(a.family == "read" for a in group)
    facts: list[str] = []
    for action in group:
        facts.extend([_run_fact(action), *_purpose(action)] if action.command else action.hints)
        facts.extend(_outcome_facts(action.outcome) if action.outcome.failed else [])
    subject, described = _subject(group[0], 60) if len(group) == 1 and group[0].command else ("", False)
    if only_reads and files:
        title = f"Read {_listing(files, 3)}"
    elif described:  # one lookup whose command is too long to show: the agent's account of it
        title = subject
    elif len(group) == 1 and facts:
        title = facts[0][0].upper() + facts[0][1:]
    else:
        title = f"Explored {_listing(files, 3)}" if files else f"Explored with {len(group)} lookups"
    failed = [a for a in group if a.outcome.failed]
    outcome_text = f"{len(failed)} of the lookups failed." if failed else ""
    commands = [_code(a.shown, 50) for a in group if a.command]
    what = " and ".join(part for part in (
        f"looked at {_listing(files)}" if files else "", f"ran {_listing(commands, 3)}" if commands else "",
    ) if part) or "looked things up"
    return _Draft(
        type="discovery", title=title, action_text=what, facts=facts, outcome_text=outcome_text,
        concepts=["how-it-works", *(c for a in group for c in _gotcha(a.outcome))], files_read=files,
    )


def _task_draft(action: _Action) -> _Draft:
    data = _input_dict(action.call.input)
    description = _clip(str(data.get("description") or data.get("prompt") or "a sub-task"), 70)
    result = _first_sentences(action.outcome.text, 300)
    facts = [f"delegated: {description}"] + ([f"result: {result}"] if result else [])
    return _Draft(
        type="discovery", title=f"Delegated: {description}", action_text=f"delegated a sub-task ({description})",
        facts=facts, outcome_text=f"The sub-agent reported: {result}" if result else "", concepts=["how-it-works"],
    )


def _plan_draft(action: _Action) -> _Draft:
    plan = str(_input_dict(action.call.input).get("plan") or "")
    first = _first_sentence(plan, 70) or "plan"
    steps = [_clip(re.sub(r"^\s*(?:[-*+]|\d+\.)\s+", "", line), 160)
             for line in plan.splitlines() if re.match(r"^\s*(?:[-*+]|\d+\.)\s+\S", line)]
    return _Draft(
        type="decision", title=f"Plan: {first}", action_text="settled on a plan",
        facts=steps[:FACTS_MAX], outcome_text=_first_sentences(plan, 300),
    )


def _other_draft(action: _Action) -> _Draft:
    first = next((line.strip() for line in action.outcome.text.splitlines() if line.strip()), "")
    facts = [f"{action.label} returned: {_clip(first, 200)}"] if first else []
    facts.extend(_outcome_facts(action.outcome) if action.outcome.failed else [])
    title = f"{action.label} failed" if action.outcome.failed else f"Used {action.label}"
    return _Draft(
        type="discovery", title=title, action_text=f"used {action.label}", facts=facts,
        concepts=_gotcha(action.outcome), files_read=list(action.reads),
    )


def _failed_edit_draft(action: _Action) -> _Draft:
    target = _listing(action.writes, 2) if action.writes else "a file"
    ended = "interrupted" if action.outcome.interrupted else "failed"
    return _Draft(
        type="discovery", title=f"Edit of {target} {ended}", action_text=f"tried to change {target}",
        facts=[*action.hints, *_outcome_facts(action.outcome)], outcome_text="The tool reported an error.",
        files_read=list(action.writes),
    )
