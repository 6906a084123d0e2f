"""The decisive sentences of what the agent wrote while it worked (its narration), without a model.

Coding agents explain themselves between tool calls ("The guard fails because Access.get/2 can't be used
inside a guard; I'll bind it first") and report at the end of a turn. Most of that text is stage directions
("Let me check the router.", "Good.", "Now run the tests."); the sentences worth keeping say why (a cause, a
constraint, a surprise), what was chosen and why, what came out (tests, counts), what was done, and what is
left. This module splits narration into sentences and list items, tags each with those kinds by their cue words,
drops stage directions and filler, and keeps the rest in order within a budget.

Cues are plain English words that agents use across languages and tools; nothing here knows a project. A
sentence with no cue is still kept when it names specific things (code in backticks, CamelCase or snake_case
names, paths, ids) and is not a mere intention to look at something: "Now add the `TranscriptHighlighter` hook
that runs on mount and update." says where something was built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memcairn.capture.offline.text import without_emphasis

CAUSE, DECISION, RESULT, DONE, TODO = "cause", "decision", "result", "done", "todo"
KINDS = (CAUSE, DECISION, RESULT, DONE, TODO)
SENTENCE_MAX = 300  # a longer sentence is clipped (a list item of a report, a run-on)
_SCAN_CHARS = 40_000  # of one text; a report longer than that is read from its head

_CUES: dict[str, re.Pattern[str]] = {
    CAUSE: re.compile(
        r"\b(?:because|since|due to|caused by|root cause|the (?:issue|problem|bug|reason|cause) (?:is|was)"
        r"|turns out|it seems|apparently|actually|doesn't|does not|don't|didn't|did not|can't|cannot|couldn't"
        r"|isn't|is not|aren't|wasn't|won't|never|unable|missing|misleading|unsupported|not supported|requires?"
        r"|expects?|expected|only works|lost|drops?|stale|conflicts?|fails?|failed|failing|errors?"
        r"|broken|wrong|crash(?:es|ed)?|undefined|mismatch|gitignored|ignored by|so that|which means|must)\b"
        r"|\bneeds? (?=`)",
        re.IGNORECASE),
    DECISION: re.compile(
        r"\b(?:I'll|I will|I should|I need to|we need to|we should|decided|decision|instead|rather than|keep"
        r"|prefer|going with|opt(?:ed)? for|to avoid|approach|strategy|trade-?off|chose|choose|better to"
        r"|safer|the fix is|fix is to|workaround)\b",
        re.IGNORECASE),
    RESULT: re.compile(
        r"\b(?:\d+ (?:tests?|failures?|passed|passing|errors?|warnings?|doctests?|files?)|all (?:green|clean|pass"
        r"|tests pass)|pass(?:es|ed)?|succeed(?:s|ed)?|success(?:ful(?:ly)?)?|clean compile|zero|no issues"
        r"|resolved|verified|confirmed|ran cleanly|works now|now works)\b",
        re.IGNORECASE),
    DONE: re.compile(
        r"\b(?:added|adds|implemented|created|creates|rebuilt|built|integrated|removed|renamed|replaced"
        r"|refactored|updated|moved|extracted|introduced|wired|registered|committed|pushed|fixed|rewrote"
        r"|rewritten|migrated|enriched|normalized|normalised|closed|merged|now (?:has|have|uses|carries|returns"
        r"|accepts|supports))\b",
        re.IGNORECASE),
    TODO: re.compile(
        r"\b(?:todo|to-do|remaining|remains|left to|left over|later|follow[- ]?ups?|not yet|still (?:need|to"
        r"|open|missing|fails?|failing)|open (?:bug|issue|question|task)|filed|file (?:a|an|the) \w+|discovered"
        r"|next steps?"
        r"|unfinished|out of scope|not something I|known (?:issue|bug|limitation)|blocked|pending|deferred"
        r"|needs? (?:to be|a|an)|should be (?:fixed|done|added))\b",
        re.IGNORECASE),
}
# Stage directions: an intention to look, wait or run, with nothing learned in it.
_INTENT = re.compile(
    r"^(?:(?:ok(?:ay)?|good|great|now|first|next|then|also|finally|alright|perfect)[,.!]?\s+)*"
    r"(?:let me|let's|let us|i'll|i will|i need to|i'm going to|i am going to|time to)\s+(?:also\s+|now\s+|first\s+)?"
    r"(?:check|look|read|see|explore|find|verify|examine|inspect|review|understand|search|grep|open|run|re-?run"
    r"|wait|start|continue|try|get|view|take|dig|investigate|confirm|double-check|figure|know|find out|test"
    r"|compile|sync|mark|claim|close|commit|push|do|begin|proceed|move|fix|update|add|write|create|implement"
    r"|apply|make|rebuild|install|launch|file|note|record)\b",
    re.IGNORECASE)
# An instruction the agent gives itself ("Now run the tests.", "Close gqc.4, commit, and move on.").
_IMPERATIVE = re.compile(
    r"^(?:(?:now|next|then|first|also|finally)[,]?\s+)?(?:check|run|re-?run|add|update|write|create|close|commit|push"
    r"|look|read|see|verify|wait|move|continue|start|file|mark|claim|sync|install|replace|remove|fix|implement"
    r"|rebuild|compile|test|apply|try|make|open|find|search|explore)\b(?!\s+(?:is|was|are|were)\b)",
    re.IGNORECASE)
# A label heading what follows ("Test counts: 141 passed", "Fix: bind it first"): its first word is a noun here,
# not an instruction, however much it looks like a verb.
_LABEL = re.compile(r"^[A-Z][\w-]*(?:\s+[\w&-]+){0,2}:\s+\S")
# A test run's result in so many words: a count of tests and how they ended ("87 tests + 14 doctests, 0 failures",
# "All 141 tests pass"), or a count that passed or failed. What a summary and the digest take for a run's result.
TEST_RESULT = re.compile(
    r"\b\d[\d,]* (?:[\w-]+ ){0,2}(?:tests?|doctests?|specs?|examples?|assertions?)\b.*?"
    r"\b(?:pass(?:ed|es|ing)?|green|failures?|failed|failing)\b|\b\d[\d,]* (?:passed|failed|failures?)\b",
    re.IGNORECASE)
# The reason an intention may carry.
_WHY = re.compile(r"\b(?:because|since|due to|caused by|so that|in order to|to avoid|otherwise|instead of"
                  r"|rather than)\b", re.IGNORECASE)
_FILLER = re.compile(
    r"^(?:ok(?:ay)?|good|great|perfect|excellent|nice|done|all done|alright|right|yes|no|got it|understood"
    r"|progress|hmm|interesting|sure|exactly|indeed|that(?:'s| is) (?:it|all|done))\b[\s\S]{0,24}$",
    re.IGNORECASE)
# an interjection the agent opens a sentence with ("Good — the errors are safe"): the rest is the sentence
_OPENER = re.compile(r"^(?:ok(?:ay)?|good|great|perfect|excellent|nice|alright|right|hmm|interesting)\s*[—–,:-]+\s+",
                     re.IGNORECASE)
_SPECIFIC = re.compile(
    r"`[^`\n]{2,}`"  # code (counted twice: the agent marked it as a name)
    r"|\b[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+\b"  # CamelCase
    r"|\b[a-z][a-z0-9]*_[a-z0-9_]+\b"  # snake_case
    r"|(?:\w[\w.-]*/)+[\w.-]+"  # a path
    r"|\b\w+\.(?:py|ex|exs|js|ts|tsx|jsx|rs|go|rb|java|kt|c|h|cpp|css|scss|html|heex|json|toml|yaml|yml|md|sh|sql)\b"
    r"|\b[a-z]+-[a-z0-9]+(?:\.\d+)+\b"  # task ids such as spotter-fum.5
    r"|\b\d[\d,.]*\b"
)
_CODE = re.compile(r"`[^`\n]{2,}`")
_SENTENCE_END = re.compile(r"(?:(?<=[^.]\.)|(?<=[!?]))\s+(?=[A-Z0-9`*\"'(\[])")
_FENCE = re.compile(r"^\s*```")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
_LIST_MARK = re.compile(r"^\s*(?:#+|[-*+•]|\d+[.)])\s+")


@dataclass(frozen=True)
class Said:
    """One sentence (or list item) of narration with what it tells."""

    text: str
    kinds: frozenset[str]
    specific: int  # how many specific things it names

    @property
    def intent(self) -> bool:
        """Something the agent was about to do ("Let me check ...", "Now run the tests.")."""
        return bool(_INTENT.match(self.text) or (_IMPERATIVE.match(self.text) and not _LABEL.match(self.text)))

    @property
    def decisive(self) -> bool:
        if _FILLER.match(self.text):
            return False
        if self.intent:
            # an intention counts only for the reason in it ("I'll bind it first, since ...")
            return bool(_WHY.search(self.text))
        return bool(self.kinds) or self.specific >= 2


def _units(text: str) -> Iterable[str]:
    """Sentences and list items of ``text``: a list item, a table row or a heading is a unit of its own;
    fenced code is left out (its text is the tool's, not the agent's)."""
    fenced = False
    paragraph: list[str] = []

    def flush() -> Iterable[str]:
        if paragraph:
            joined = " ".join(paragraph)
            paragraph.clear()
            yield from _SENTENCE_END.split(joined)

    for raw in text[:_SCAN_CHARS].splitlines():
        if _FENCE.match(raw):
            fenced = not fenced
            yield from flush()
            continue
        if fenced:
            continue
        line = raw.strip()
        if not line or _TABLE_RULE.match(line):
            yield from flush()
            continue
        if line.startswith("|"):
            yield from flush()
            cells = [c.strip() for c in line.strip("|").split("|") if c.strip()]
            yield " — ".join(cells)
            continue
        if _LIST_MARK.match(line):
            yield from flush()
            paragraph.append(_LIST_MARK.sub("", line))
            continue
        paragraph.append(line)
    yield from flush()


def _clean(unit: str) -> str:
    text = without_emphasis(unit)
    text = " ".join(text.split()).strip(" -—:")
    opened = _OPENER.match(text)
    if opened and len(text) > opened.end():
        text = text[opened.end()].upper() + text[opened.end() + 1:]
    if len(text) > SENTENCE_MAX:
        cut = text[: SENTENCE_MAX - 1]
        space = cut.rfind(" ")
        text = (cut[:space] if space > SENTENCE_MAX // 2 else cut).rstrip(",;: ") + "…"
    return text


def read(text: str | None) -> list[Said]:
    """Every sentence of ``text`` with its kinds, in order."""
    out: list[Said] = []
    for unit in _units(str(text or "")):
        clean = _clean(unit)
        if len(clean) < 3:
            continue
        kinds = frozenset(kind for kind, cue in _CUES.items() if cue.search(clean))
        out.append(Said(clean, kinds, len(_SPECIFIC.findall(clean)) + len(_CODE.findall(clean))))
    return out


def decisive(texts: Iterable[str | None], limit: int, *, kinds: Iterable[str] | None = None,
             intents: bool = True) -> list[str]:
    """The decisive sentences of ``texts`` (of ``kinds``, when given), in order, without repeats, as many as fit
    in ``limit`` characters (a sentence that does not fit is skipped; a later shorter one may still fit).
    ``intents=False`` leaves out what the agent was about to do, even with its reason (not what is left)."""
    wanted = frozenset(kinds) if kinds is not None else None
    kept: list[str] = []
    seen: set[str] = set()
    used = 0
    for text in texts:
        for said in read(text):
            if not said.decisive or (wanted is not None and not (said.kinds & wanted)):
                continue
            if not intents and said.intent:
                continue
            key = said.text.lower()
            if key in seen:
                continue
            if used + len(said.text) + 1 > limit:
                continue
            seen.add(key)
            kept.append(said.text)
            used += len(said.text) + 1
    return kept


def joined(sentences: Iterable[str]) -> str:
    """Sentences as one text, each ending with its punctuation."""
    return " ".join(s if s.endswith((".", "!", "?", "…", ":")) else s + "." for s in sentences)
