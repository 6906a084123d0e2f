"""A turn's summary: what a developer needs a week later, from the agent's narration and the observations.

The sections say what the turn was for (``request``: the prompt), what was looked at (``investigated``), the
causes and constraints met (``learned``: the agent's own "because" sentences, then what the observations show:
fixes, failures, verifications), what was done (``completed``: the agent's closing report, then the observations
of changes), what is left (``next_steps``) and the decisions taken with their reasons (``notes``). Narration
comes from ``capture.offline.narration``: stage directions and filler ("All done.", "Let me check the router.")
never make a section.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memcairn.capture.offline import narration
from memcairn.capture.offline.actions import _PURPOSE
from memcairn.capture.offline.dead_ends import DeadEnd, dead_ends
from memcairn.capture.offline.text import (
    _SENTENCE_END,
    SUBTITLE_MAX,
    TEXT_MAX,
    TITLE_MAX,
    _clip,
    _listing,
    _plain,
    _unique,
    join_list,
)
from memcairn.capture.offline.trackers import FILED_PREFIX
from memcairn.capture.records import Observation, Summary, Turn

REQUEST_MAX = 200
INVESTIGATED_MAX = 150
DEAD_ENDS_MAX = 300  # characters more for the hypotheses ruled out (``capture.offline.dead_ends``), when there are any
LEARNED_MAX = 400
COMPLETED_MAX = 500
REPORT_MAX = 400  # of ``completed``, what the closing report may take (all of it is an observation of its own)
REPORT_MIN = 200  # characters of decisive sentences a closing report needs to be an observation of its own
MID_REPORT_MIN = 400  # the same for a report written between two calls (the end of a sub-task)
NEXT_MAX = 300
NOTES_MAX = 250
READ_MAX = 10  # files a summary lists as read: its observations list the rest

_NEXT_CUE = re.compile(
    r"\b(?:next|todo|remaining|remains|should|need to|needs to|still|follow[- ]up)\b", re.IGNORECASE
)
_LEARNED_CUE = re.compile(
    r"\b(?:errors?|fail(?:ed|s|ing|ure)?|passed|warnings?|deprecated|fixe[sd]|exception|traceback|verified)\b",
    re.IGNORECASE,
)
# The extractor's own label of a line a command printed: a command that failed has its most telling line called
# its ``error`` (``drafts._outcome_facts``), and when no line names a problem that is only its last one (``nothing to
# commit, working tree clean``, a test runner's ``ok  pkg 0.4s``): the label is no cue, the line's own words must be.
_QUOTED_LABEL = re.compile(r"^(?:error|warning): ")
# What a tool says to name a problem, in any language: the cue words, and the words compilers and runtimes use.
_PROBLEM_WORDS = re.compile(
    r"\b(?:error(?:s|ed)?|fatal|fail(?:ed|s|ing|ure)?|warnings?|deprecat\w*|exception|traceback|panic(?:ked)?"
    r"|denied|not found|no such file|cannot|can't|undefined|unknown|invalid|missing|refused|timed? ?out)\b",
    re.IGNORECASE)
_PROBLEM_NAME = re.compile(r"[a-z](?:Error|Exception)\b")  # IndexError, CompileError, NullPointerException
# A line of code or a command a file card quotes, whatever its language: a statement's end or a block's edge
# (``use std::error::Error;``, ``if err != nil {``, ``},``), a comment, an option (``cargo clippy -- -D warnings``),
# or an assignment, a call, a tag or a definition (``errors = load_errors(record)``, ``class="error-item"``): no
# lesson, whatever word it holds.
_CODE_LINE = re.compile(
    r"""[;{}(\[,]\s*$|^\s*[)}\]]|^\s*(?://|/\*|\*\s|#|--\s)|\s--?[A-Za-z]"""
    r"""|^\s*(?:[\w.\[\]"']+\s*(?:=|:=|<-|->)\s|[\w.:]+\(|<\w|[\w-]+="|(?:def|defp|fn|func|function|class|let|const|var"""
    r"""|use|import|from|assert|return|raise|throw|pub|impl|struct|enum|package|type)\b)"""
)
VERIFIED_MAX = 160  # characters of the sentence that says how the turn's tests were left
# a cause found out, rather than a constraint named: chosen first for a summary's ``learned`` (``_causes``)
_FOUND_OUT = re.compile(
    r"\b(?:because|due to|caused by|root cause|the (?:issue|problem|bug|reason|cause) (?:is|was)|turns out"
    r"|actually|misleading|so the)\b", re.IGNORECASE)
# the harness's words when the user declined a tool call: no lesson about the code
_HARNESS_FACT = re.compile(r"rejected tool use|tool use was rejected", re.IGNORECASE)
# what edits did to code, not lessons (``edited a.py: added ParseError``, its new lines), and why a command ran
# the extractor's own account of a run, a fix or a commit: the commands it quotes are no file's code
_OWN_FACTS = ("ran ", "after failure: ", "fixes ", "verified: ", "failing tests: ", "committed: ", "commit message: ")
_NAME_FACTS = ("edited ", "created ", "rewrote ", "added ", "updated ", "new text: ", _PURPOSE)


def in_project(path: str) -> bool:
    """A path of the project's own (relative, no glob): not a harness's temporary file or a search pattern."""
    return bool(path) and not path.startswith(("/", "~")) and not any(c in path for c in "*?[")


def _joined(parts: Iterable[str], limit: int = 800) -> str | None:
    text = join_list(_unique(p for p in parts if p))
    return _clip(text, limit) or None


def _next_steps(message: str | None) -> str | None:
    sentences = [s for s in _SENTENCE_END.split(_plain(message)) if _NEXT_CUE.search(s)]
    return _clip(" ".join(sentences), NEXT_MAX) or None


def _prose(parts: Sequence[str], limit: int) -> str | None:
    return _clip(narration.joined(parts), limit) or None


def report_observation(message: str | None, prompt: str | None, files: Iterable[str] = (),
                       minimum: int = REPORT_MIN) -> Observation | None:
    """A report the agent wrote (what was done, in its words) as an observation of its own, when it says enough
    (``minimum`` characters of decisive sentences); ``files`` it names become its files."""
    said = narration.decisive([message], TEXT_MAX)
    text = narration.joined(said)
    if len(text) < minimum:
        return None
    named = [path for path in files if path and path in text]
    # the title: the first sentence that says what was done or came out, else the first
    lead = next((s for s in said if _kinds(s) & {narration.DONE, narration.RESULT} and len(s.split()) >= 4), said[0])
    return Observation(
        type="change", title=_clip(lead, TITLE_MAX), subtitle=_clip(prompt, SUBTITLE_MAX) or None,
        narrative=_clip(text, TEXT_MAX), concepts=("what-changed",), files_modified=tuple(_unique(named)),
    )


def _report(turn: Turn, observations: Sequence[Observation]) -> Observation | None:
    """The agent's closing report as an observation of its own: a record a search finds without the summary."""
    message = turn.last_assistant_message if isinstance(turn.last_assistant_message, str) else None
    return report_observation(message, turn.prompt, (p for o in observations for p in o.files_modified))


def _looked_at(observations: Sequence[Observation]) -> str | None:
    """What the turn read, when its lookups were folded into episodes of work (no discovery of their own)."""
    read = _unique(path for o in observations for path in o.files_read if in_project(path))
    return _clip(f"looked at {_listing(read)}", INVESTIGATED_MAX) if read else None


def _summary(turn: Turn, observations: Sequence[Observation]) -> Summary | None:
    message = turn.last_assistant_message if isinstance(turn.last_assistant_message, str) else None
    prompt = turn.prompt if isinstance(turn.prompt, str) else None
    if not (prompt and prompt.strip()) and not observations and not (message and message.strip()):
        return None
    said = [*turn.narration, message]
    # lookups of the project's files (not only a background task's output file or a glob)
    looked = [o for o in observations if o.type == "discovery" and any(map(in_project, o.files_read))]
    done = [o for o in observations if o.type in ("bugfix", "feature", "change", "refactor")]
    # a hypothesis the turn later said did not hold is what was tried, not what was learned (capture.offline.dead_ends)
    ends = dead_ends(said)
    tried = {end.hypothesis for end in ends}
    causes = [c for c in _causes(said, LEARNED_MAX // 2) if c not in tried]
    learned = [o.title for o in observations if o.type in ("bugfix", "decision")]
    learned += [fact for o in observations for fact in o.facts if _is_lesson(fact)][:6]
    # what was done: the closing message, then the reports the agent wrote between calls, newest first
    reports = [t for t in reversed(turn.narration) if len(narration.joined(narration.decisive([t], TEXT_MAX)))
               >= MID_REPORT_MIN]
    # how the tests were left, when the report does not say it: within the report's share of ``completed``
    verified = _last_result(said)
    told = [] if verified is None else narration.decisive([message, *reports], REPORT_MAX)
    if verified is not None and verified.rstrip(".") in " ".join(told):
        verified = None
    budget = REPORT_MAX - (len(verified) + 1 if verified else 0)
    report = [s for s in narration.decisive([message, *reports], budget) if narration.TODO not in _kinds(s)]
    report += [verified] if verified else []
    todo = narration.decisive([message, *reports, *reversed(turn.narration)], NEXT_MAX, kinds=[narration.TODO],
                              intents=False)
    decided = narration.decisive(turn.narration, NOTES_MAX, kinds=[narration.DECISION])
    completed = _prose(report, REPORT_MAX)
    # tickets filed for later: work left, in the tracker's words
    filed = _unique(f"filed {f.split(' → ', 1)[1]}" for o in observations for f in o.facts
                    if f.startswith(FILED_PREFIX) and " → " in f)
    modified = _unique(path for o in observations for path in o.files_modified)
    rest = _joined((o.title for o in done), COMPLETED_MAX - len(completed or "") - 2) if done else None
    return Summary(
        request=_clip(prompt, REQUEST_MAX) or None,
        investigated=_tried(ends, _joined((o.title for o in looked), INVESTIGATED_MAX) or _looked_at(observations)),
        learned=_joined([narration.joined(causes)] + learned, LEARNED_MAX),
        completed=" ".join(p for p in (completed, rest) if p) or None,
        next_steps=_clip(join_list(p for p in (*filed, _prose(todo, NEXT_MAX) or _next_steps(message)) if p),
                         NEXT_MAX) or None,
        notes=_prose(decided, NOTES_MAX),
        files_read=tuple([path for path in _unique(path for o in observations for path in o.files_read)
                          if in_project(path)][:READ_MAX]),
        files_modified=tuple(modified),
    )


def _tried(ends: Sequence[DeadEnd], investigated: str | None) -> str | None:
    """What was looked into, after the hypotheses ruled out (each with why it did not hold)."""
    if not ends:
        return investigated
    return _joined([*(end.said for end in ends), investigated or ""], DEAD_ENDS_MAX + INVESTIGATED_MAX)


def _is_lesson(fact: str) -> bool:
    """Whether an observation's fact says what was learned: a failure, a fix, a check (``_LEARNED_CUE``), in the
    words of the tool or the agent rather than memcairn's label (``_QUOTED_LABEL``), and no quoted line of code."""
    if fact in ("tests passed", "tests failed") or _HARNESS_FACT.search(fact):
        return False
    quoted = _QUOTED_LABEL.match(fact)
    if quoted is not None:
        line = fact[quoted.end():]
        return bool(_PROBLEM_WORDS.search(line) or _PROBLEM_NAME.search(line))
    if not _LEARNED_CUE.search(fact) or fact.startswith(_NAME_FACTS):
        return False
    return fact.startswith(_OWN_FACTS) or not _CODE_LINE.search(fact)


def _last_result(said: Sequence[str | None]) -> str | None:
    """The newest sentence of ``said`` that reports a test run's result (``87 tests + 14 doctests, 0 failures``):
    a week later, how many tests passed when the work was done is asked of the turn that did it, and only the
    agent's words say it as the project counts them (a runner's line may sum tests and doctests)."""
    sentences = narration.decisive(said, len(narration.joined(t for t in said if t)) + 1, kinds=[narration.RESULT],
                                   intents=False)
    results = [s for s in sentences if narration.TEST_RESULT.search(s)]
    return narration.joined([_clip(results[-1], VERIFIED_MAX)]) if results else None


def _causes(said: Sequence[str | None], limit: int) -> list[str]:
    """The sentences of ``said`` that give a cause (not a decision), in order, as many as fit in ``limit``
    characters; those that say what was found out (``because``, ``turns out``, ``doesn't actually``, ``the issue
    is``) are chosen before those that only name a constraint (``Tmux errors are safe, so …``)."""
    found = [s for s in narration.decisive(said, LEARNED_MAX * 4, kinds=[narration.CAUSE])
             if narration.DECISION not in _kinds(s)]
    chosen: set[int] = set()
    used = 0
    for strong in (True, False):
        for n, sentence in enumerate(found):
            if n in chosen or bool(_FOUND_OUT.search(sentence)) != strong or used + len(sentence) + 1 > limit:
                continue
            chosen.add(n)
            used += len(sentence) + 1
    return [s for n, s in enumerate(found) if n in chosen]


def _kinds(sentence: str) -> frozenset[str]:
    found = narration.read(sentence)
    return found[0].kinds if found else frozenset()
