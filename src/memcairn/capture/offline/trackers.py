"""Issue-tracker commands: the tickets an agent files, closes and updates as it works.

Agents that work from a tracker (GitHub's ``gh``, GitLab's ``glab``, Jira and Linear CLIs, beads' ``bd``) file
what they find and cannot fix now ("Created issue: app-5 — parser drops the agent id"), close what they
finished with a reason, and open pull requests. Those lines are the work's own index: the open bug a later
session asks about, the reason a task was closed. A ticket filed (``filed: ...``) inside a longer episode is also
an observation of its own (``filed_tickets``): the open bug a later session asks about, found by itself. A ticket
filed (``filed: ...``), or one closed with a reason
(``tracker: ...``), is kept with what the command printed, longer than another command's output; a ticket filed
ranks with the commits in an episode's facts (it is work left for later), a close after them (the commit
message says the same). Status moves (``bd update X --status in_progress``, a close with no reason) are
housekeeping: the commit that follows names the work.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memcairn.capture.offline import narration
from memcairn.capture.offline.actions import _Action
from memcairn.capture.offline.text import TITLE_MAX, _clip, _code
from memcairn.capture.records import Observation

TRACKER_OUTPUT_MAX = 220
TRACKER_PREFIX = "tracker: "
FILED_PREFIX = "filed: "
_FILING = re.compile(r"\b(?:create|new)\b", re.IGNORECASE)
# a tracker command, at the start of the line or after ``&&``/``;`` (``cd repo && bd create ...``)
_TRACKER = re.compile(
    r"(?:^|&&|;|\|\|)\s*(?:"
    r"(?:gh|glab|hub|tea)\s+(?:issue|pr|mr)\s+(?:create|close|reopen|edit|comment|merge|new)"
    r"|bd\s+(?:create|new|close|update|reopen|dep\s+add)"
    r"|jira\s+(?:issue\s+)?(?:create|close|move|transition|edit|comment)"
    r"|linear\s+(?:issue\s+)?(?:create|close|update)"
    r")\b",
    re.IGNORECASE,
)
_FRAMING = re.compile(r"^[\s✓✔✗•*>-]+")
_MOVE = re.compile(r"\b(?:update|edit|transition|move|reopen|dep\s+add)\b", re.IGNORECASE)
_CLOSE = re.compile(r"\b(?:close|merge)\b", re.IGNORECASE)
_REASON = re.compile(r"\s(?:--reason|--comment|--body|-[rcb])[\s=]", re.IGNORECASE)


def is_tracker(command: str | None) -> bool:
    """Whether ``command`` files, closes or changes a ticket or pull request."""
    return bool(command) and bool(_TRACKER.search(command or ""))


def is_tracker_chore(command: str | None) -> bool:
    """A status move: an update, a transition, a close that gives no reason."""
    match = _TRACKER.search(command or "")
    if match is None:
        return False
    verb = match.group(0)
    return bool(_MOVE.search(verb)) or (bool(_CLOSE.search(verb)) and not _REASON.search(command or ""))


def tracker_fact(shown: str, output: str) -> str:
    """``filed: `bd create ...` → Created issue: app-5 — Title: parser drops the agent id``: the command and
    the first lines it printed (the id and title, or the closing reason), joined."""
    lines = [_FRAMING.sub("", line).strip() for line in output.splitlines()[:20]]
    said = " — ".join(line for line in lines if line)[:TRACKER_OUTPUT_MAX * 2]
    match = _TRACKER.search(shown)
    filing = match is not None and bool(_FILING.search(match.group(0)))
    head = f"{FILED_PREFIX if filing else TRACKER_PREFIX}{_code(shown, 80)}"
    return f"{head} → {_clip(said, TRACKER_OUTPUT_MAX)}" if said else head


def filed_tickets(actions: Sequence[_Action], subtitle: str | None) -> list[Observation]:
    """An observation per ticket filed in ``actions`` (that ended well): what the tracker said, and the agent's
    words before it."""
    out = []
    for action in actions:
        if not (action.is_run and action.outcome.ok and is_tracker(action.command)):
            continue
        fact = tracker_fact(action.shown, action.outcome.text)
        if not fact.startswith(FILED_PREFIX) or " → " not in fact:
            continue
        said = narration.joined(narration.decisive([action.call.narration], 300))
        filed = fact.split(" → ", 1)[1]
        out.append(Observation(
            type="discovery", title=_clip(f"Filed: {filed}", TITLE_MAX), subtitle=subtitle,
            narrative=f"{said} Filed with {_code(action.shown, 100)}: {filed}".strip(), facts=(fact,),
            concepts=("problem-solution",),
            steps=(action.call.tool_use_id,) if isinstance(action.call.tool_use_id, str) else (),
        ))
    return out
