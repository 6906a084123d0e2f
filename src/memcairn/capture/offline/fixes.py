"""The turn's timeline of calls and the bugfix rule: which failing run an edit fixed, and what verified it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memcairn.capture.offline.actions import _Action
from memcairn.capture.records import ToolCall, Turn


def _same_call(a: ToolCall, b: ToolCall) -> bool:
    if a is b:
        return True
    if a.tool_use_id or b.tool_use_id:
        return a.tool_use_id == b.tool_use_id
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - odd payloads may refuse comparison
        return False


def _timeline(turn: Turn, calls: Sequence[ToolCall]) -> tuple[list[ToolCall], list[int]]:
    """The turn's calls in order with ``calls`` placed in it (appended when ``turn.tools`` lacks them)."""
    tools = list(turn.tools or ())
    count = len(calls)
    if count and count <= len(tools) and all(_same_call(c, t) for c, t in zip(calls, tools[-count:], strict=True)):
        return tools, list(range(len(tools) - count, len(tools)))
    positions: list[int] = []
    floor = 0
    for call in calls:
        found = next((i for i in range(floor, len(tools)) if _same_call(call, tools[i])), None)
        if found is None:
            tools.append(call)
            found = len(tools) - 1
        positions.append(found)
        floor = found + 1
    return tools, positions


@dataclass(frozen=True)
class _FixEvidence:
    failure: _Action
    validation: _Action | None  # None: a candidate (no re-run yet)


def _fix_evidence(edit: _Action, actions: Sequence[_Action]) -> _FixEvidence | None:
    """Apply the module's bugfix rule to ``edit`` given every digested action of the turn."""
    runs = [a for a in actions if a.is_run]
    before = [a for a in runs if a.index < edit.index]
    after = [a for a in runs if a.index > edit.index]
    candidate: _FixEvidence | None = None
    seen: list[_Action] = []
    for failure in reversed(before):
        if not failure.outcome.failed or failure.outcome.rejected or any(failure.same_check(s) for s in seen):
            seen.append(failure)
            continue
        seen.append(failure)
        if any(r.outcome.ok and r.same_check(failure) for r in before if r.index > failure.index):
            continue
        rerun = next((r for r in after if r.same_check(failure)), None)
        if rerun is not None and rerun.outcome.ok:
            return _FixEvidence(failure, rerun)
        if rerun is None and (failure.runner or failure.outcome.tests) and candidate is None:
            candidate = _FixEvidence(failure, None)
    return candidate
