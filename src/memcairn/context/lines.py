"""What a session block of the SessionStart digest (``memcairn.context.build``) says besides its summaries' own text.

- **Rows are not repeated**: a summary names its files' and errors' observations by their titles (``Errors fixed:
  …``, ``Files: …``); when those observations are shown as rows below, the session's lines leave them out
  (:func:`unlisted`), and the rows show fixes in full.
- **The last test result**: a week later, whether the work was left green is one of the first things to know; it
  is the newest sentence of the session's observations that reports a run's result (a count of tests and a pass
  or fail word; not an intention: "I'll run the 87 tests to make sure they pass"), the one with the largest count
  when a narrative has several (the whole suite rather than one file's tests) (:func:`last_test_result`); the
  logs of runs in a summary's ``learned`` (``ran `…` → 79 passed``) are left out of the block
  (:func:`without_runs`).
- **How to check**: the commands that tested, linted, type-checked or built the work and passed, each once with
  how it ended (:func:`how_to_check`): how to run and verify the project is what a new session asks first.
- **Done since**: a compaction's pending tasks are shown when turns came after it, less each task that starts
  with a name (a word holding a digit: ``spotter-gqc.6``, ``PROJ-142``, ``#31``) that a later turn's "done" names
  (:func:`not_done_since`): the digest led with "spotter-gqc.6 (in_progress) …" above a "Done" line saying
  gqc.6 was pushed and the epic closed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from memcairn.capture.offline.narration import TEST_RESULT
from memcairn.capture.offline.text import join_list
from memcairn.core.models import MemoryItem
from memcairn.wire.fence import clean_line

LISTED_MIN = 20  # characters of a row's title before a session line leaves it out as already shown
OUTCOME_CHARS = 200
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`*(])")
_NUMBER = re.compile(r"\d[\d,]*")
_INTENT = re.compile(r"\b(?:I'll|I will|let me|let's|going to|to make sure|to check|should|would|once)\b", re.I)
# an extractor's run fact (capture.offline.drafts), or one the summary's cap cut short
_RUN = re.compile(r"ran `(?:[^`]*`(?: \(\d+ runs\))? → |[^`]*…$)")


@lru_cache(maxsize=4096)  # fitting the budget renders a block several times with the same rows
def unlisted(text: str | None, listed: frozenset[str]) -> str:
    """``text`` (a summary's ``a; b; c`` list) without the parts that are the titles of observation rows shown
    below it, whole or cut short: a summary names its files' and errors' observations by their titles (``Errors
    fixed: …``, ``Files: …``), and the rows already show them, fixes in full. What comes before a title left out
    (``Working on X. Files: ``) goes with the next part kept, and loses its label when none is; the list's last
    title, cut short and followed by another sentence (``title…. More``), keeps that sentence."""
    clean = clean_line(text)
    if not listed or not clean:
        return clean
    kept: list[str] = []
    pending = ""
    for part in clean.split("; "):
        found = _listed_in(part, listed)
        if found is None:
            kept.append(pending + part)
            pending = ""
            continue
        head, tail = found
        pending += head
        if tail:
            kept.append((_unlabelled(pending) + " " + tail).strip())
            pending = ""
    if pending and _unlabelled(pending):
        kept.append(_unlabelled(pending))
    return join_list(kept)


_LABEL_AT_END = re.compile(r"(?:^|(?<= ))[A-Z][a-z]+(?: [a-z]+)?: $")  # "Errors fixed: ", "Files: "


def _unlabelled(head: str) -> str:
    return _LABEL_AT_END.sub("", head).strip()


def _listed_in(part: str, listed: frozenset[str]) -> tuple[str, str] | None:
    """(what comes before, what comes after) a listed title that ends ``part``, starting it or after a label's
    ``: ``; None when there is none."""
    starts = [0] + [i + 2 for i in range(len(part)) if part.startswith(": ", i)]
    for at in starts:
        head, rest = part[:at], part[at:]
        stripped = rest.rstrip(".")
        if stripped in listed or rest in listed:
            return head, ""
        if stripped.endswith("…"):  # a title cut short, or the list cut in the middle of one
            stem = stripped[:-1].rstrip()
            if len(stem) >= LISTED_MIN and any(title.startswith(stem) for title in listed):
                return head, ""
        for title in listed:  # a cut title, then the period that closes the list and another sentence
            if title.endswith("…") and rest.startswith(title + ". "):
                return head, rest[len(title) + 2:]
    return None


def without_runs(text: str | None) -> str:
    """A summary's ``learned`` without the parts that only log a command and how it ended (``ran `mix test` → 79
    passed``, the offline extractor's run facts): a log, not a lesson, and the block's last test result says how
    the work was left."""
    clean = clean_line(text)
    return join_list(part for part in clean.split("; ") if not _RUN.match(part))


def last_test_result(observations: Sequence[MemoryItem]) -> str:
    """The newest sentence of ``observations`` (newest first) that reports a test run's result, with its id;
    "" when none does."""
    for item in observations:
        sentences = _SENTENCE.split(clean_line(item.narrative))
        found = [s for s in sentences if TEST_RESULT.search(s) and not _INTENT.search(s)]
        if found:
            best = max(found, key=lambda s: max(int(n.replace(",", "")) for n in _NUMBER.findall(s)))
            return f"{clean_line(best, OUTCOME_CHARS)} (#{item.id})"
    return ""


# a run fact of the offline extractor (capture.offline.drafts, episodes): ``ran `cmd` → ok``, ``verified: `cmd` →
# 12 passed``, ``ran `cmd` (3 runs) → failed → ok``; the command and how its last run ended
_RUN_FACT = re.compile(r"^(?:ran|verified:) `([^`]+)`(?: \(\d+ runs\))? → (?:.* → )?"
                       r"((?:[\w .-]+: )?\d[^:→]*|ok|no output|[^:→]+)")
# what checks work, in any ecosystem's words: test runners, linters, type checkers, builds
_CHECK_WORD = re.compile(r"\b(?:test|tests|lint|typecheck|type-check|check|build|vet|fmt|verify|clippy|mypy|ruff|"
                         r"eslint|tsc|pytest|ci)\b", re.I)
_PLUMBING = re.compile(r"\s*\d?>&\d|\s*\|\s*(?:tail|head|tee|less|cat|grep)\b.*$")
CHECKS_SHOWN = 4
_NOT_CHECKS = ("cd ", "git ", "test ", "[ ", "echo ", "printf ")  # moving around, the shell's own test, printing


def how_to_check(observations: Sequence[MemoryItem]) -> str:
    """The commands that checked the work and passed (test runs, linters, type checks, builds), newest first and
    each once, with how they ended: how to run and verify the project a week later. From the offline extractor's
    run facts, so the same for every agent and language; a command cut short (``…``) or part of a chain that only
    moves around or prints (``cd``, ``git stash``, the shell's ``test``) is left out."""
    shown: dict[str, str] = {}
    for item in observations:  # newest first
        for fact in item.facts:
            found = _RUN_FACT.match(fact)
            if found is None or "failed" in found.group(2) or "interrupted" in found.group(2):
                continue
            for part in re.split(r"&&|;", found.group(1)):
                command = _PLUMBING.sub("", " ".join(part.split())).strip()
                if (command and not command.endswith("…") and _CHECK_WORD.search(command)
                        and not command.startswith(_NOT_CHECKS) and command not in shown):
                    shown[command] = found.group(2).strip()
            if len(shown) >= CHECKS_SHOWN:
                return "; ".join(f"`{c}` {o}" for c, o in list(shown.items())[:CHECKS_SHOWN])
    return "; ".join(f"`{c}` {o}" for c, o in shown.items())


# a task named by an identifier (``spotter-gqc.6 (in_progress): …``, ``PROJ-142 …``, ``#31 …``): a word with a
# digit and a letter, or ``#`` and a number
_TASK_NAME = re.compile(r"^[\s*\-•]*(#\d+|[A-Za-z0-9][\w./-]*\d[\w./-]*)")


def _task_names(task: str) -> set[str]:
    """The name a task starts with, and its last ``-`` part when that holds a letter and a digit (``gqc.6`` of
    ``spotter-gqc.6``): what a later turn may call it. None when it starts with a plain word, a bare number or a
    name too short to tell (``v2``)."""
    named = _TASK_NAME.match(task)
    name = named.group(1).rstrip("./-") if named else ""
    if not name.startswith("#") and (len(name) < 4 or not re.search(r"[A-Za-z]", name)):
        return set()
    tail = name.rsplit("-", 1)[-1]
    return {name, tail} if tail != name and re.search(r"[A-Za-z]", tail) and re.search(r"\d", tail) else {name}


def not_done_since(listed: str, done: str) -> str:
    """The ``; ``-separated tasks of ``listed`` less those whose name (``_task_names``) ``done``, what later turns
    completed, names too. A task without a name is kept: nothing says it was done."""
    def named_in_done(name: str) -> bool:
        return re.search(rf"(?<![\w./-]){re.escape(name)}(?!\w)", done, re.IGNORECASE) is not None

    tasks = [t.strip() for t in listed.split("; ") if t.strip()]
    return "; ".join(t for t in tasks if not any(named_in_done(n) for n in _task_names(t)))
