"""Episodes, not steps: consecutive drafts of a batch toward one goal become one observation.

A session of a few hundred calls made one memory per call: "Ran `mix test 2>&1 | tail -5`", "Read x.ex",
"Edited x.ex". Most of them are steps of one piece of work (look, edit, run the tests, fix, run again, commit),
and the memory a later session wants is the piece: what changed, what broke and how it was fixed, what the
commit said. So the drafts of a batch are folded into episodes:

* housekeeping is skipped before drafting (``is_housekeeping``): status and polling commands that ended well
  (``git status``, ``git log``, ``pwd``, reading a background task's output file outside the project), and
  harness tools (``ToolSearch``, ``WaitForMcpServers``, ``TaskOutput``...) that showed no test results;
* an episode ends with a commit (the commit names the work); everything between two commits is one episode,
  so a batch (at most the pipeline's ``BATCH_MAX`` calls of one turn) gives one to a few observations;
* reruns of the same check fold into one trajectory (``ran `mix test` → 5 failed → 4 failed → 79 passed``),
  the ``| tail`` variants of a command counting as the same check;
* facts are kept by what a later session needs most, within a character budget: the commit (subject, body,
  files), the fix (the failure it fixed and the run that verified it), the checks run and how they ended, what
  each edit changed, failures left, the edits' telling new lines, other commands and their decisive output,
  then what was looked at.

Each episode keeps the ids of the calls it covers (``steps``), so the memory can be traced to its steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memcairn.capture.offline.actions import _Action
from memcairn.capture.offline.commits import is_commit
from memcairn.capture.offline.drafts import _added, _Draft
from memcairn.capture.offline.outcomes import _output_gist
from memcairn.capture.offline.paths import _is_abs
from memcairn.capture.offline.text import TITLE_MAX, _clip, _code, _listing, _unique
from memcairn.capture.offline.trackers import FILED_PREFIX, is_tracker, is_tracker_chore

FACTS_BUDGET = 600  # characters of facts an episode keeps: a search hands five whole records to the agent
READ_MAX = 5  # files read an episode lists (those it changed are all listed, up to MODIFIED_MAX)
MODIFIED_MAX = 24
TAIL_MAX = 30  # earlier calls of an open episode observed again with a new batch, at most
_TYPE_ORDER = ("bugfix", "feature", "change", "refactor", "decision", "discovery")
_HARNESS_TOOLS = frozenset({
    "toolsearch", "waitformcpservers", "taskoutput", "bashoutput", "listmcpresourcestool", "readmcpresourcetool",
})
_TEMP_DIRS = ("/tmp/", "/private/tmp/", "/var/folders/")
_STATUS_COMMAND = re.compile(
    r"^(?:git\s+(?:status|log|diff\s+--stat|diff\s+--name-only|branch|remote|rev-parse|show\s+--stat)|pwd|which"
    r"|echo|date|whoami|true|sleep)\b"
)
# Fact kinds, most wanted first; facts of a kind not listed rank with "other".
_BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("commit", ("committed: ", "commit message: ", FILED_PREFIX)),
    ("fix", ("after failure: ", "fixes ", "verified: ")),
    ("check", ()),  # runs of tests and checks, and runs that failed: how the work was verified
    ("edit", ("edited ", "created ", "rewrote ", "updated ", "added ", "deleted ", "moved ", "wrote ",
              "replace notebook", "insert notebook", "delete notebook")),
    ("problem", ("failing tests: ", "error: ", "warning: ")),
    ("gist", ("new text: ",)),  # after every file's one-line account: many files still each get theirs
    ("run", ("ran ",)),  # other commands that changed something
    ("other", ("commit files: ",)),  # the files are listed with the episode already
    ("lookup", ("read ", "searched for ", "glob ", "listed ", "fetched ", "web search: ")),
)
_DROPPED = ("purpose: ",)  # the agent's account of one command; the episode's facts say what happened


def is_housekeeping(action: _Action) -> bool:
    """A step that tells a later session nothing: it ended well, showed no test results, and only checked on
    the state of things (status, logs, a background task's output) or served the agent's harness; or it read a
    temporary file outside the project (a background task's output), however that ended."""
    outcome = action.outcome
    if action.family == "read" and action.reads and all(path.startswith(_TEMP_DIRS) for path in action.reads):
        return True  # a background task's output file, found or already gone: the harness's, not the project's
    if outcome.failed or outcome.tests or outcome.interrupted:
        return False
    if action.family == "other":
        return action.label.lower() in _HARNESS_TOOLS
    if action.family == "shell" and is_tracker_chore(action.command):
        return True
    if action.family != "shell" or not action.read_only_shell or not action.command:
        return False
    if _STATUS_COMMAND.match(action.key):
        return True
    return bool(action.reads) and all(path.startswith(("/", "~")) for path in action.reads)


def open_tail(actions: Sequence[_Action], first: int, earlier_complete: bool) -> list[int]:
    """Indices of the earlier calls (before ``first``) of the episode still open when a batch starts: those after
    the turn's last successful commit. Empty when that episode cannot be rebuilt whole and traced: longer than
    ``TAIL_MAX``, reaching past the earlier calls given (``earlier_complete`` false and no commit among them),
    or holding a call without an id (its observation could not be found to be replaced)."""
    start = None
    for action in actions[:first]:
        if action.is_run and is_commit(action.command) and action.outcome.ok:
            start = action.index + 1
    if start is None:
        if not earlier_complete:
            return []
        start = 0
    tail = list(range(start, first))
    if len(tail) > TAIL_MAX or any(not isinstance(actions[i].call.tool_use_id, str) for i in tail):
        return []
    return tail


def episodes(pieces: Sequence[_Draft]) -> list[_Draft]:
    """Fold a batch's drafts (in call order) into episodes, each ended by a commit or by the batch."""
    out: list[_Draft] = []
    current: list[_Draft] = []
    for draft in pieces:
        current.append(draft)
        if any(fact.startswith("committed: ") for fact in draft.facts):
            out.append(merge(current))
            current = []
    if current:
        out.append(merge(current))
    return out


def merge(pieces: Sequence[_Draft]) -> _Draft:
    """One draft for the pieces of an episode (a single piece stays as it is)."""
    if len(pieces) == 1:
        return pieces[0]
    kind = min((p.type for p in pieces), key=_TYPE_ORDER.index)
    actions = [a for p in pieces for a in p.actions]
    facts = _facts(pieces, actions)
    modified = _unique(path for p in pieces for path in p.files_modified)
    read = _unique(path for p in pieces for path in p.files_read)
    # a fix's own account ("`pytest` had failed … and passed afterwards"), not each step's "Outcome: ok"
    outcomes = _unique(p.outcome_text for p in pieces if p.outcome_text and not p.outcome_text.startswith("Outcome:"))
    draft = _Draft(
        type=kind, title=_title(pieces, kind, modified, actions), action_text=_action_text(modified, read),
        facts=facts, outcome_text=" ".join(outcomes[-2:]), concepts=_unique(c for p in pieces for c in p.concepts),
        files_read=read[:READ_MAX], files_modified=modified[:MODIFIED_MAX],
    )
    draft.actions = actions
    draft.said = [said for p in pieces for said in p.said]
    return draft


def _title(pieces: Sequence[_Draft], kind: str, modified: list[str], actions: Sequence[_Action]) -> str:
    commit = next((p.title for p in reversed(pieces) if p.title.startswith("Committed: ")), None)
    if commit:
        return commit
    work = [p for p in pieces if p.type != "discovery"]
    if len(work) == 1:
        title = work[0].title
    elif work:
        verb = {"bugfix": "Fixed", "feature": "Built", "refactor": "Moved"}.get(kind, "Changed")
        if kind == "feature" and all(p.type == "feature" for p in work):
            verb = "Created"
        # the project's own files name the work before those elsewhere (a plan under ~/.claude/plans)
        named = sorted(modified, key=_is_abs)
        target = f"{verb} {_listing(named, 2)}" if modified else f"{verb} code"
        names = _unique(name for a in actions for name in a.names)
        title = target + (_added(names, target) if len(names) <= 6 else "")  # dozens of names say little
    else:
        looked = _unique(path for p in pieces for path in p.files_read)
        title = f"Explored {_listing(looked, 3)}" if looked else pieces[0].title
    trend = _test_trend(actions)
    return title if not trend or len(title) + len(trend) + 2 > TITLE_MAX else f"{title}; {trend}"


def _test_trend(actions: Sequence[_Action]) -> str:
    """``tests 5 failed → 79 passed`` for the episode's test runs (first and last), else empty."""
    runs = [a for a in actions if a.is_run and a.outcome.tests]
    if not runs:
        return ""
    first, last = runs[0].outcome.label(), runs[-1].outcome.label()
    return f"tests {last}" if first == last else f"tests {first} → {last}"


def _action_text(modified: Sequence[str], read: Sequence[str]) -> str:
    """A short lead: the facts say what happened step by step."""
    if modified:
        return f"changed {_listing(modified, 3)}"
    return f"looked at {_listing(read, 3)}" if read else "worked through several steps"


def _bucket(fact: str) -> int:
    for position, (_, prefixes) in enumerate(_BUCKETS):
        if prefixes and fact.startswith(prefixes):
            return position
    return _position("other")


def _facts(pieces: Sequence[_Draft], actions: Sequence[_Action]) -> list[str]:
    """The episode's facts, most wanted first, within ``FACTS_BUDGET``; runs of one check folded."""
    facts = [f for p in pieces for f in p.facts if not f.startswith(_DROPPED) and not f.startswith("ran ")]
    ranked = sorted([*((_bucket(f), f) for f in _unique(facts)), *_run_facts(actions)], key=lambda pair: pair[0])
    ranked = [(0, fact) for fact in _unique(fact for _, fact in ranked)]  # stable: call order within a kind
    kept: list[str] = []
    used = 0
    for _, fact in ranked:
        if used + len(fact) > FACTS_BUDGET and kept:
            continue
        kept.append(fact)
        used += len(fact)
    return kept


def _position(name: str) -> int:
    return next(i for i, (bucket, _) in enumerate(_BUCKETS) if bucket == name)


def _run_facts(actions: Sequence[_Action]) -> list[tuple[int, str]]:
    """One fact per check: its runs' outcomes in order (a repeated outcome once), the last command shown; ranked
    as a check (tests, a runner, a failure), a command that changed something, or a lookup. A commit's run is
    left to its commit facts."""
    groups: list[list[_Action]] = []
    for action in actions:
        if not action.is_run or ((is_commit(action.command) or is_tracker(action.command)) and action.outcome.ok):
            continue  # their facts say more (``drafts``)
        group = next((g for g in groups if g[0].same_check(action)), None)
        if group is None:
            groups.append([action])
        else:
            group.append(action)
    out = []
    for group in groups:
        labels: list[str] = []
        for action in group:
            label = action.outcome.label()
            if not labels or labels[-1] != label:
                labels.append(label)
        shown = labels if len(labels) <= 4 else [labels[0], "…", *labels[-2:]]
        last = group[-1]
        times = f" ({len(group)} runs)" if len(group) > 2 else ""
        printed = _output_gist(last.outcome.text, 140) if last.outcome.ok and not last.outcome.tests else ""
        fact = f"ran {_code(last.shown, 100)}{times} → {' → '.join(shown)}" + (f": {printed}" if printed else "")
        checked = any(a.runner or a.outcome.tests or a.outcome.failed for a in group)
        kind = "check" if checked else "lookup" if all(a.read_only_shell for a in group) else "run"
        out.append((_position(kind), _clip(fact, 240)))
    return out
