"""LongMemEval's data: its questions and haystack sessions, read from a JSON or JSONL file and checked."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memcairn.core.errors import ValidationError
from memcairn.search.request import parse_time

_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(?:(\d{1,2}):(\d{2})(?::(\d{2}))?)?\s*$")


@dataclass(frozen=True)
class Session:
    id: str
    epoch_ms: int
    turns: tuple[tuple[str, str], ...]  # (role, content)


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    text: str
    now_ms: int
    sessions: tuple[Session, ...]
    answer_ids: tuple[str, ...]

    @property
    def scored(self) -> bool:
        """Abstention questions (``_abs``) have no evidence to retrieve; questions without gold neither."""
        return not self.id.endswith("_abs") and bool(self.answer_ids)


def parse_date(value: Any) -> int:
    """Epoch ms (UTC) for a LongMemEval date such as ``2023/05/30 (Tue) 10:18``; ISO forms work too.

    Raises:
        ValidationError: the value is not a date in either form.
    """
    if isinstance(value, str):
        match = _DATE.match(value)
        if match:
            year, month, day, hour, minute, second = (int(g) if g else 0 for g in match.groups())
            try:
                parsed = int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() * 1000)
            except ValueError:
                raise ValidationError(f"{value!r} is not a calendar date") from None
            if parsed < 0:
                raise ValidationError(f"{value!r} is before 1970, which the store cannot hold")
            return parsed
    parsed = parse_time(value, tz=UTC, what="date")
    if parsed is None:
        raise ValidationError("a date is empty")
    return parsed


def _date(value: Any, where: str) -> int:
    try:
        return parse_date(value)
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}") from None


def _turns(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list):
        raise ValidationError(f"{where}: a haystack session must be a list of turns")
    out = []
    for n, turn in enumerate(raw):
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
            raise ValidationError(f"{where}, turn {n}: a turn is an object with 'role' and 'content'")
        out.append((str(turn.get("role") or "user"), turn["content"]))
    return tuple(out)


def _text(value: Any, where: str, what: str) -> str:
    """A non-empty string (numbers are taken as their text, as LongMemEval's ids and answers sometimes are)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float) or not str(value).strip():
        raise ValidationError(f"{where}: {what} must be a non-empty string, got {json.dumps(value)[:60]}")
    return str(value)


def parse_questions(data: Any) -> list[Question]:
    """Questions from parsed LongMemEval JSON (a list of records).

    Raises:
        ValidationError: a record lacks a field, a field has the wrong shape or its lists disagree in length;
            the message names the record's index and question id.
    """
    if not isinstance(data, list):
        raise ValidationError("a LongMemEval file holds a JSON list of question records (or one record a line, "
                              f"JSONL), not a JSON {type(data).__name__}")
    questions = []
    for n, rec in enumerate(data):
        where = f"record {n}"
        if not isinstance(rec, dict):
            raise ValidationError(f"{where} is not an object")
        missing = [k for k in ("question_id", "question_type", "question", "question_date", "haystack_session_ids",
                               "haystack_dates", "haystack_sessions", "answer_session_ids") if k not in rec]
        if missing:
            qid = rec.get("question_id")
            raise ValidationError(f"{where}{f' (question {qid})' if qid is not None else ''} lacks "
                                  f"{', '.join(missing)}")
        qid = _text(rec["question_id"], where, "question_id")
        where = f"record {n}, question {qid}"
        ids, dates, raw = rec["haystack_session_ids"], rec["haystack_dates"], rec["haystack_sessions"]
        if not (isinstance(ids, list) and isinstance(dates, list) and isinstance(raw, list)
                and len(ids) == len(dates) == len(raw)):
            raise ValidationError(f"{where}: haystack_session_ids, haystack_dates and haystack_sessions must be "
                                  "lists of the same length")
        gold = rec["answer_session_ids"]
        if gold is None:
            gold = []
        if not isinstance(gold, list):
            raise ValidationError(f"{where}: answer_session_ids must be a list of session ids, got "
                                  f"{json.dumps(gold)[:60]}")
        sessions = []
        for m, (sid, date, turns) in enumerate(zip(ids, dates, raw, strict=True)):
            sid = _text(sid, f"{where}, session {m}", "the haystack session id")
            sessions.append(Session(sid, _date(date, f"{where}, session {sid}: haystack date"),
                                    _turns(turns, f"{where}, session {sid}")))
        questions.append(Question(
            id=qid, type=_text(rec["question_type"], where, "question_type"),
            text=_text(rec["question"], where, "question"),
            now_ms=_date(rec["question_date"], f"{where}: question_date"), sessions=tuple(sessions),
            answer_ids=tuple(_text(a, where, "an answer session id") for a in gold),
        ))
    return questions


def read_records(path: str | Path) -> Any:
    """The parsed content of a LongMemEval file: JSON (a UTF-8 byte-order mark is allowed), or JSONL (one
    record a line).

    Raises:
        ValidationError: the file cannot be read, is not UTF-8 or is neither JSON nor JSONL.
    """
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{path} is not UTF-8 text (byte {exc.start}); a LongMemEval file is JSON") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        first = exc
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if first.msg != "Extra data" or len(lines) < 2:
        raise ValidationError(f"{path} is not JSON: {first.msg} at line {first.lineno}, column {first.colno}")
    records = []
    for n, line in lines:  # JSONL: one record a line
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{path} is neither JSON nor JSONL: line {n}: {exc.msg} at column {exc.colno}"
                                  ) from None
    return records


def load_questions(path: str | Path, limit: int | None = None) -> list[Question]:
    """The first ``limit`` questions (all when None) of a LongMemEval JSON or JSONL file, or of a LoCoMo file
    (``bench.longmemeval_locomo``), told apart by their records.

    Raises:
        ValidationError: the file cannot be read or is not in the LongMemEval format.
    """
    from memcairn.bench.longmemeval_locomo import is_locomo, parse_locomo

    data = read_records(path)
    questions = parse_locomo(data) if is_locomo(data) else None
    if questions is not None:
        return questions if limit is None else questions[:max(limit, 0)]
    if isinstance(data, list) and limit is not None:
        data = data[:max(limit, 0)]
    return parse_questions(data)
