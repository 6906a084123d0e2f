"""Reading a model's reply: the observations or the summary it holds, or why it holds none.

Models wrap the XML asked for in prose or markdown fences, leave a stray ``&`` or ``<`` unescaped, use HTML
entities, omit an optional element or get cut off by the token limit. Each ``<observation>`` (or the
``<summary>``) element is found in the reply and parsed on its own with a real XML parser, after a repair pass
when the first parse fails; one broken element does not lose the others. A reply with nothing usable is
classified (refusal, quota, auth, or plain prose) and raised as ``CompressionFailed``.
"""

from __future__ import annotations

import html.entities
import re
import xml.etree.ElementTree as ET

from memcairn.capture.records import CONCEPTS, CompressionFailed, Observation, Summary
from memcairn.capture.truncate import cut
from memcairn.core.models import OBSERVATION_TYPES, SUMMARY_SECTIONS

_KNOWN_TAGS = (
    "observations", "observation", "type", "title", "subtitle", "facts", "fact", "narrative", "concepts", "concept",
    "files_read", "files_modified", "file", "summary", *SUMMARY_SECTIONS, "skip",
)
_OBSERVATION_RE = re.compile(r"<observation\b[^>]*>.*?</observation\s*>", re.DOTALL | re.IGNORECASE)
_SUMMARY_RE = re.compile(r"<summary\b[^>]*>.*?</summary\s*>", re.DOTALL | re.IGNORECASE)
_OBSERVATION_OPEN_RE = re.compile(r"<observation\b[^>]*>", re.IGNORECASE)
_SUMMARY_OPEN_RE = re.compile(r"<summary\b[^>]*>", re.IGNORECASE)
_TAG_RE = re.compile(r"<(/?)(" + "|".join(_KNOWN_TAGS) + r")\b[^<>]*?(/?)>", re.IGNORECASE)
_CLOSE_RE = re.compile(r"</(?:" + "|".join(_KNOWN_TAGS) + r")\s*>", re.IGNORECASE)
# The elements each element of ours holds; an opening tag left unclosed inside its parent is closed there.
_CHILDREN: dict[str, frozenset[str]] = {
    "observations": frozenset({"observation"}),
    "observation": frozenset({"type", "title", "subtitle", "facts", "narrative", "concepts", "files_read",
                              "files_modified"}),
    "summary": frozenset({*SUMMARY_SECTIONS, "files_read", "files_modified"}),
    "facts": frozenset({"fact"}),
    "concepts": frozenset({"concept"}),
    "files_read": frozenset({"file"}),
    "files_modified": frozenset({"file"}),
}
_SKIP_RE = re.compile(r"<skip\s*/>|<skip\s*>.*?</skip\s*>|<observations\s*/>|<observations\s*>\s*</observations\s*>",
                      re.DOTALL | re.IGNORECASE)
_ENTITY_RE = re.compile(r"&(#[0-9]+;|#x[0-9a-fA-F]+;|[A-Za-z][A-Za-z0-9]*;)?")
_STRAY_LT_RE = re.compile(r"<(?!/?(?:" + "|".join(_KNOWN_TAGS) + r")\b[^<>]*>|!\[CDATA\[|!--)", re.IGNORECASE)
_XML_ENTITIES = {"amp", "lt", "gt", "quot", "apos"}
# Characters XML 1.0 does not allow (control characters a model echoes from a terminal, lone surrogates).
_ILLEGAL_XML_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
# Bounds on what one reply may add: the prompt asks for one to three observations per batch.
MAX_OBSERVATIONS = 20
MAX_TEXT_CHARS = 4000  # a subtitle, narrative, fact or summary section
MAX_LIST_ITEMS = 50  # facts, files, concepts

# Names models use for a type outside the vocabulary, mapped to the closest allowed one.
_TYPE_ALIASES = {
    "bug": "bugfix", "fix": "bugfix", "fixed": "bugfix", "bug-fix": "bugfix", "hotfix": "bugfix", "error-fix": "bugfix",
    "feat": "feature", "added": "feature", "enhancement": "feature", "addition": "feature", "new-feature": "feature",
    "refactoring": "refactor", "cleanup": "refactor", "restructure": "refactor", "rename": "refactor",
    "modification": "change", "update": "change", "config": "change", "configuration": "change",
    "chore": "change", "docs": "change", "documentation": "change",
    "investigation": "discovery", "research": "discovery", "finding": "discovery", "learning": "discovery",
    "insight": "discovery", "observation": "discovery", "exploration": "discovery", "analysis": "discovery",
    "how-it-works": "discovery", "gotcha": "discovery",
    "choice": "decision", "design": "decision", "architecture": "decision", "trade-off": "decision",
}

_REFUSAL_RE = re.compile(
    r"\bi\s*(?:can[’']?t|cannot|can not|won[’']?t|will not|am unable to|[’']?m unable to|am not able to|"
    r"[’']?m not able to)\b|\bi[’']?m sorry,? but\b|\bi am sorry,? but\b|\bsorry, (?:but )?i\b|"
    r"\bcannot (?:help|assist)\b|\bcan[’']?t (?:help|assist)\b",
    re.IGNORECASE,
)
# Error messages a proxy, a CLI or a model relays as its reply; matched only in short replies, so prose about
# rate limiting or login code is not taken for an error.
_QUOTA_RE = re.compile(
    r"rate[ _-]?limit(?:ed|_error| exceeded| reached)|usage limit|exceeded your (?:current )?quota|"
    r"insufficient_quota|quota (?:exceeded|reached)|credit balance|overloaded|too many requests",
    re.IGNORECASE,
)
_AUTH_RE = re.compile(
    r"invalid[ _-]?(?:x-)?api[ _-]?key|incorrect api key|authentication[_ ](?:error|failed)|not logged in|"
    r"please run /login|api key (?:not found|missing|is missing)|missing api key|invalid bearer token",
    re.IGNORECASE,
)
_ERROR_REPLY_CHARS = 400
# A markdown fence that opens or closes a block around the answer: a line holding only the fence (three
# backticks and maybe a language name), or one at the very start or end of the answer touching the XML. Backticks
# inside a line of text (an inline code span a model wrote in a fact) are the model's text, never a fence.
_FENCE_RE = re.compile(r"^[ \t]*```[\w.+-]*[ \t]*$|\A\s*```[\w.+-]*(?=<)|(?<=>)```\s*\Z", re.MULTILINE)
# HTML's collapsible block, whose caption is a ``<summary>`` too: ``<details><summary>Log</summary>...</details>``.
_DETAILS_TAG_RE = re.compile(r"<(/?)details\b[^<>]*>", re.IGNORECASE)
_DETAILS_CAPTION_RE = re.compile(r"<details\b[^<>]*>\s*\Z", re.IGNORECASE)
# A complete section element of a session summary: what tells a summary from a ``<details>`` caption.
_SECTION_RE = re.compile(r"<(" + "|".join(SUMMARY_SECTIONS) + r")\b[^<>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
# The sections the prompt never sends: ``<request>`` alone in a ``<details>`` block may be the input echoed.
_ANSWER_SECTION_RE = re.compile(
    r"<(" + "|".join(name for name in SUMMARY_SECTIONS if name != "request") + r")\b[^<>]*>.*?</\1\s*>",
    re.DOTALL | re.IGNORECASE)
_LEADING_CAPTION_RE = re.compile(r"\s*<summary\b[^<>]*>.*?</summary\s*>", re.DOTALL | re.IGNORECASE)
# The reasoning some models (DeepSeek-R1, Qwen3 on Ollama, vLLM or LM Studio) put before their answer; its drafts
# of the XML are not the answer.
_THINK_RE = re.compile(r"<(think|thinking)>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_CLASSIFY_CHARS = 600


class _Unparsable(Exception):
    pass


def _answer_text(reply: str) -> str:
    """The reply without its reasoning block and the markdown fences around its answer."""
    return _FENCE_RE.sub("", _THINK_RE.sub("\n", reply))


def _repair_entity(match: re.Match[str]) -> str:
    body = match.group(1)
    if body is None:
        return "&amp;"
    if body.startswith("#"):
        if len(body) > 12:  # past any character (and int() refuses thousands of digits): drop it
            return ""
        code = int(body[2:-1], 16) if body.startswith("#x") else int(body[1:-1])
        # a reference to a character XML forbids (&#27; from a terminal) is dropped like the character itself
        return match.group(0) if code <= 0x10FFFF and not _ILLEGAL_XML_RE.match(chr(code)) else ""
    name = body[:-1]
    if name in _XML_ENTITIES:
        return match.group(0)
    char = html.entities.html5.get(name + ";")
    if char is None:
        return "&amp;" + body
    return char.replace("&", "&amp;").replace("<", "&lt;")


def _repair(fragment: str) -> str:
    """Escape stray ampersands and stray ``<`` (ones that open no element of ours), resolve HTML entities."""
    return _STRAY_LT_RE.sub("&lt;", _ENTITY_RE.sub(_repair_entity, fragment))


def _balance(fragment: str) -> str:
    """``fragment`` with its tags of ours nested: one left open inside its parent is closed where the parent
    closes when it belongs there (a forgotten ``</fact>``), else taken for text and escaped (``the <title> of
    the page`` inside a ``<request>``); an opening tag of an element already open is text too, unless it starts
    the next item of a list; a closing tag nothing opened is escaped; the elements still open at the end (a
    reply cut off by the token limit) are closed."""
    # Since none of ours nests in itself, the stack is never deeper than the number of tag names.
    stack: list[tuple[str, str, int]] = []  # (lower-case name, name as written, offset of its "<")
    edits: list[tuple[int, int, str]] = []  # (offset, characters replaced, replacement)
    for match in _TAG_RE.finditer(fragment):
        closing, written, empty = match.group(1), match.group(2), match.group(3)
        name = written.lower()
        if empty:
            continue
        if not closing:
            if any(name == open_name for open_name, _, _ in stack):  # none of ours nests in itself
                if len(stack) > 1 and stack[-1][0] == name and _CHILDREN.get(stack[-2][0]) == {name}:
                    edits.append((match.start(), 0, f"</{stack.pop()[1]}>"))  # the next item of a list
                else:
                    edits.append((match.start(), 1, "&lt;"))  # ``<title>the <title> tag</title>``
                    continue
            stack.append((name, written, match.start()))
            continue
        depth = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == name), None)
        if depth is None:
            edits.append((match.start(), 1, "&lt;"))
            continue
        closes = ""
        for index in range(len(stack) - 1, depth, -1):
            inner, inner_written, start = stack[index]
            if inner in _CHILDREN.get(stack[index - 1][0], ()):
                closes += f"</{inner_written}>"
            else:
                edits.append((start, 1, "&lt;"))
        if closes:
            edits.append((match.start(), 0, closes))
        del stack[depth:]
    pieces: list[str] = []
    position = 0
    for offset, length, replacement in sorted(edits):
        pieces += [fragment[position:offset], replacement]
        position = offset + length
    pieces.append(fragment[position:])
    pieces += [f"</{written}>" for _, written, _ in reversed(stack)]
    return "".join(pieces)


def _cut_off(text: str, opened: re.Match[str] | None) -> str | None:
    """The element ``opened`` starts, cut off by the token limit: kept up to its last complete child element
    (``_balance`` closes the rest); None when not even one child is complete."""
    if opened is None:
        return None
    closes = list(_CLOSE_RE.finditer(text, opened.end()))
    return text[opened.start():closes[-1].end()] if closes else None


def _parse_element(fragment: str) -> ET.Element:
    fragment = _ILLEGAL_XML_RE.sub("", fragment)
    repaired = _repair(fragment)
    for candidate in (fragment, repaired, _balance(repaired)):
        try:
            root = ET.fromstring(candidate)
        except ET.ParseError:
            continue
        for element in root.iter():
            if isinstance(element.tag, str):
                element.tag = _local_name(element.tag)
        return root
    raise _Unparsable(fragment[:80])


def _local_name(tag: str) -> str:
    """``tag`` lower-cased and without the namespace an ``xmlns`` attribute gave it (``{urn:x}title`` is
    ``title``): a namespace a model declares is read as if it had declared none."""
    return tag.rsplit("}", 1)[-1].lower()


def _text_of(element: ET.Element | None) -> str | None:
    if element is None:
        return None
    text = " ".join("".join(element.itertext()).split())
    return cut(text, MAX_TEXT_CHARS) or None


def _dedupe(items: list[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return tuple(seen)


def _list_of(parent: ET.Element, container: str, item: str, *, split_commas: bool) -> tuple[str, ...]:
    """Items of ``<container><item/>…</container>``; a container holding bare text gives one item per line
    (or per comma for short vocabularies)."""
    values: list[str] = []
    for box in parent.findall(container):
        children = [child for child in box if child.tag == item]
        if children:
            values += [_text_of(child) or "" for child in children]
            continue
        raw = "".join(box.itertext())
        pieces = re.split(r"[\n,]" if split_commas else r"\n", raw)
        values += [cut(" ".join(piece.strip().lstrip("-*•").split()), MAX_TEXT_CHARS) for piece in pieces]
    return _dedupe(values)[:MAX_LIST_ITEMS]


def _normalize_name(raw: str) -> str:
    return "-".join(re.split(r"[\s_]+", raw.strip().lower()))


def normalize_type(raw: str | None, files_modified: tuple[str, ...] = ()) -> str:
    """An allowed observation type for what the model wrote: itself, a known alias, a prefix match, or
    (nothing recognizable) ``change`` when files were modified, else ``discovery``."""
    fallback = "change" if files_modified else "discovery"
    if not raw:
        return fallback
    name = _normalize_name(raw)
    if name in OBSERVATION_TYPES:
        return name
    if name in _TYPE_ALIASES:
        return _TYPE_ALIASES[name]
    for allowed in OBSERVATION_TYPES:
        if name.startswith(allowed) or (len(name) >= 3 and allowed.startswith(name)):
            return allowed
    return fallback


def normalize_concepts(raw: tuple[str, ...]) -> tuple[str, ...]:
    """The concepts of the vocabulary among ``raw`` (spelling normalized); the others are dropped."""
    return _dedupe([name for name in (_normalize_name(item) for item in raw) if name in CONCEPTS])


def _observation(root: ET.Element) -> Observation | None:
    facts = _list_of(root, "facts", "fact", split_commas=False)
    files_read = _list_of(root, "files_read", "file", split_commas=True)
    files_modified = _list_of(root, "files_modified", "file", split_commas=True)
    subtitle = _text_of(root.find("subtitle"))
    narrative = _text_of(root.find("narrative"))
    title = _text_of(root.find("title")) or subtitle or (facts[0] if facts else None) or narrative
    if not title:
        return None
    if len(title) > 120:
        title = title[:119].rstrip() + "…"
    return Observation(
        type=normalize_type(_text_of(root.find("type")), files_modified),
        title=title,
        subtitle=subtitle,
        narrative=narrative,
        facts=facts,
        concepts=normalize_concepts(_list_of(root, "concepts", "concept", split_commas=True)),
        files_read=files_read,
        files_modified=files_modified,
    )


def classify_reply(reply: str) -> CompressionFailed:
    """The failure a reply without the XML asked for stands for: quota or auth (a short error message relayed
    as the reply), refusal, else prose."""
    head = " ".join(reply.split())[:_CLASSIFY_CHARS]
    if not head:
        return CompressionFailed("prose", "empty reply")
    detail = head[:200]
    if len(head) <= _ERROR_REPLY_CHARS:
        if _QUOTA_RE.search(head):
            return CompressionFailed("quota", detail)
        if _AUTH_RE.search(head):
            return CompressionFailed("auth", detail)
    if _REFUSAL_RE.search(head):
        return CompressionFailed("refusal", detail)
    return CompressionFailed("prose", detail)


def is_skip(reply: str) -> bool:
    """Whether the reply says explicitly that nothing is worth recording."""
    return _SKIP_RE.search(reply) is not None


def parse_observations(reply: str) -> list[Observation]:
    """Every observation the reply holds; ``[]`` for an explicit skip.

    Raises:
        CompressionFailed: no observation could be read and the reply is not a skip.
    """
    text = _answer_text(reply)
    observations: list[Observation] = []
    broken = 0
    matches = list(_OBSERVATION_RE.finditer(text))
    tail = text[matches[-1].end():] if matches else text
    cut_off = _cut_off(tail, _OBSERVATION_OPEN_RE.search(tail))
    for fragment in [match.group(0) for match in matches] + ([cut_off] if cut_off else []):
        try:
            root = _parse_element(fragment)
        except _Unparsable:
            broken += 1
            continue
        observation = _observation(root)
        if observation is not None:
            observations.append(observation)
            if len(observations) >= MAX_OBSERVATIONS:
                break
    if observations or is_skip(text):
        return observations
    if broken:
        raise CompressionFailed("prose", f"{broken} observation element(s) could not be parsed even after repair")
    raise classify_reply(reply)


def _details_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of each closed HTML ``<details>`` block of ``text``, outermost ones (nested ones counted)."""
    blocks: list[tuple[int, int]] = []
    depth, start = 0, 0
    for match in _DETAILS_TAG_RE.finditer(text):
        if not match.group(1):
            if depth == 0:
                start = match.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                blocks.append((start, match.end()))
    return blocks


def _first_outside_details(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The first match of ``pattern`` that is no HTML ``<details>`` caption: neither inside a closed
    ``<details>`` block nor right after a ``<details>`` opening tag (a block left unclosed). An unclosed
    ``<details>`` mentioned in a section's text does not hide the summary holding it."""
    blocks = _details_blocks(text)
    for match in pattern.finditer(text):
        inside = any(start <= match.start() < end for start, end in blocks)
        if not inside and _DETAILS_CAPTION_RE.search(text, 0, match.start()) is None:
            return match
    return None


def _details_spans(text: str) -> list[tuple[int, int, int]]:
    """(end of the opening tag, start of the closing tag, end of the closing tag) of every HTML ``<details>``
    block of ``text``, nested ones too, in the order they open; a block left unclosed (a reply cut off by the
    token limit) runs to the end of ``text``."""
    spans: dict[int, tuple[int, int, int]] = {}
    stack: list[tuple[int, int]] = []  # (offset of the "<", end of the opening tag)
    for match in _DETAILS_TAG_RE.finditer(text):
        if not match.group(1):
            stack.append((match.start(), match.end()))
        elif stack:
            start, inner = stack.pop()
            spans[start] = (inner, match.start(), match.end())
    for start, inner in stack:
        spans[start] = (inner, len(text), len(text))
    return [spans[start] for start in sorted(spans)]


def _summary_in_details(text: str) -> str | None:
    """The session summary a model wrapped in a ``<details>`` block, as a ``<summary>`` fragment; None when the
    blocks hold captions only.

    A ``<summary>`` inside a block is the session summary when it holds a section element (``<request>``,
    ``<learned>``, ...): a caption holds text or HTML, never our sections. Else the sections written straight
    into a block after its caption are the summary, when one of them is a section the prompt never sends
    (``<request>`` alone may be the input echoed in a "raw input" block). Nested blocks are read on their own.
    A block cut off by the token limit keeps its complete elements."""
    for inner, close, _ in _details_spans(text):
        body = text[inner:close]
        for opened in _SUMMARY_OPEN_RE.finditer(body):
            whole = _SUMMARY_RE.match(body, opened.start())
            fragment = whole.group(0) if whole is not None else _cut_off(body, opened)
            if fragment is not None and _SECTION_RE.search(fragment):
                return fragment
        caption = _LEADING_CAPTION_RE.match(body)
        rest = body[caption.end():] if caption is not None else body
        for start, end in reversed(_details_blocks(rest)):
            rest = rest[:start] + rest[end:]
        if close == len(text):  # unclosed: up to its last complete element
            ends = [match.end() for match in _CLOSE_RE.finditer(rest)]
            rest = rest[:ends[-1]] if ends else ""
        if _ANSWER_SECTION_RE.search(rest):
            return f"<summary>{rest}</summary>"
    return None


def parse_summary(reply: str) -> Summary | None:
    """The summary the reply holds; ``None`` for an explicit skip or a summary with every section empty. One
    outside any ``<details>`` block comes first; else one a model wrapped in ``<details>`` (``_summary_in_details``:
    a ``<summary>`` holding section elements, or sections after the block's caption).

    Raises:
        CompressionFailed: no summary could be read and the reply is not a skip.
    """
    text = _answer_text(reply)
    match = _first_outside_details(_SUMMARY_RE, text)
    fragment = match.group(0) if match is not None else _cut_off(text, _first_outside_details(_SUMMARY_OPEN_RE, text))
    if fragment is None:
        fragment = _summary_in_details(text)
    if fragment is None:
        if is_skip(text):
            return None
        raise classify_reply(reply)
    try:
        root = _parse_element(fragment)
    except _Unparsable:
        raise CompressionFailed("prose", "the summary element could not be parsed even after repair") from None
    sections = {name: _text_of(root.find(name)) for name in SUMMARY_SECTIONS}
    if not any(sections.values()):
        return None
    return Summary(
        **sections,
        files_read=_list_of(root, "files_read", "file", split_commas=True),
        files_modified=_list_of(root, "files_modified", "file", split_commas=True),
    )
