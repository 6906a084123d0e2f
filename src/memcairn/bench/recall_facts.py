"""The questions of ``memcairn bench recall`` and the rule that decides whether a text holds a fact.

A QA file is JSON: ``{"questions": [{"id", "question", "facts", "session"?, "project"?, "kind"?}, ...]}``.
Each fact is a list of alternative keywords; the fact holds when any one of them occurs in the text.
``"facts": []`` marks a question nothing in the sessions answers (the right answer is no result).

Matching rule (the same for memcairn and the raw-transcript baseline): both the keyword and the text are
normalised, then the keyword must occur as a substring. Normalising:

- Unicode NFKC, then lower case;
- typographic quotes and dashes become their ASCII forms (``’`` → ``'``, ``—`` → ``-``), backticks go
  (Markdown formatting, not content);
- whitespace is insignificant next to punctuation (``{:shared, self()}`` = ``{:shared,self()}``), and any
  other run of whitespace is one space.

Punctuation itself stays significant: ``:close`` needs the colon, ``msg[:id]`` its brackets, so a keyword does not
match a mere mention of a common word.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
                              "\u2014": "-", "\u2212": "-", "`": None})
_SPACE = re.compile(r"\s+")
# whitespace with punctuation (anything but a letter, digit or underscore) on either side
_SPACE_BY_PUNCT = re.compile(r"\s+(?=[^\w\s])|(?<=[^\w\s])\s+")


def normalise(text: str) -> str:
    """``text`` in the form facts are matched in (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).lower().translate(_TYPOGRAPHIC)
    text = _SPACE_BY_PUNCT.sub("", text)
    return _SPACE.sub(" ", text).strip()


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    facts: tuple[tuple[str, ...], ...]  # each fact: alternative keywords
    session: str | None = None  # the transcript's session id (the file name without .jsonl), when given
    kind: str | None = None
    source: str = ""  # the QA file it came from
    project: str | None = None  # the project it is asked in (``recall_sets``)
    dataset: str = ""  # the data set it belongs to

    @property
    def unanswerable(self) -> bool:
        return not self.facts


def facts_held(question: Question, normalised_text: str) -> list[bool]:
    """Per fact of ``question``: whether ``normalised_text`` (already :func:`normalise`d) holds it."""
    return [any(normalise(k) in normalised_text for k in fact if normalise(k)) for fact in question.facts]


def _session_of(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return Path(value.strip()).name.removesuffix(".jsonl").removesuffix(".json")


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _fact(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(k, str) and k.strip() for k in value):
        raise ValueError(f"{where}: a fact is a non-empty list of keywords (alternatives), got {value!r}")
    return tuple(value)


def load_questions(paths: Sequence[Path]) -> list[Question]:
    """Every question of every file, in order.

    Raises:
        ValueError: a file that is not a QA file, a question without id or text, a malformed fact, or an id
            used twice.
    """
    out: list[Question] = []
    seen: set[str] = set()
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
        questions = data.get("questions") if isinstance(data, dict) else None
        if not isinstance(questions, list):
            raise ValueError(f"{path}: expected an object with a \"questions\" list")
        for n, raw in enumerate(questions, start=1):
            where = f"{path}, question {n}"
            if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not isinstance(
                    raw.get("question"), str) or not raw["question"].strip():
                raise ValueError(f"{where}: each question needs an \"id\" and a \"question\" text")
            if raw["id"] in seen:
                raise ValueError(f"{where}: the id {raw['id']!r} is used twice")
            seen.add(raw["id"])
            facts = raw.get("facts", [])
            if not isinstance(facts, list):
                raise ValueError(f"{where}: \"facts\" is a list of facts (each a list of keywords)")
            out.append(Question(raw["id"], raw["question"], tuple(_fact(f, where) for f in facts),
                                _session_of(raw.get("session")), raw.get("kind") if isinstance(raw.get("kind"), str)
                                else None, str(path), _text(raw.get("project"))))
    return out
