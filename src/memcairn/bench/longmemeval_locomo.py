"""LoCoMo's conversations as LongMemEval questions, read directly (no conversion step).

A LoCoMo file is a JSON list of samples, each with a ``conversation`` (``session_<n>`` lists of turns and their
``session_<n>_date_time``) and its ``qa``. Every question of categories 1-4 with evidence becomes one question
whose haystack is its own conversation's sessions (ids ``<sample>_S<n>``); its answer sessions are those holding
an evidence turn (``D<n>:<turn>``). Both speakers are people, so every turn is a ``user`` turn with the speaker's
name in front. Category 5 (adversarial: nothing answers it) is left out, and the question is dated a day after the
conversation's last session.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from memcairn.bench.longmemeval_data import Question, Session
from memcairn.core.errors import ValidationError

SCORED_CATEGORIES = (1, 2, 3, 4)
_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"\s*D(\d+):")


def is_locomo(data: Any) -> bool:
    """Whether parsed JSON looks like LoCoMo (samples holding a conversation and its questions)."""
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict)
            and "conversation" in data[0] and "qa" in data[0])


def _epoch_ms(value: Any, where: str) -> int:
    """``"1:56 pm on 8 May, 2023"`` as epoch ms (UTC)."""
    try:
        parsed = datetime.strptime(str(value).strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        raise ValidationError(f"{where}: {value!r} is not a LoCoMo date such as '1:56 pm on 8 May, 2023'") from None
    return int(parsed.timestamp() * 1000)


def _sessions(sample_id: str, conv: dict[str, Any], where: str) -> list[Session]:
    numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION.fullmatch(key)))
    out = []
    for n in numbers:
        turns = conv[f"session_{n}"]
        if not isinstance(turns, list):
            raise ValidationError(f"{where}, session_{n}: a list of turns expected")
        text = tuple(("user", f"{t.get('speaker', '')}: {t.get('text', '')}") for t in turns if isinstance(t, dict))
        out.append(Session(f"{sample_id}_S{n}", _epoch_ms(conv.get(f"session_{n}_date_time"),
                                                          f"{where}, session_{n}_date_time"), text))
    return out


def parse_locomo(data: Any) -> list[Question]:
    """The scored questions of parsed LoCoMo JSON (module doc).

    Raises:
        ValidationError: a sample lacks its conversation, questions or a session's date.
    """
    questions = []
    for n, sample in enumerate(data):
        where = f"sample {n}"
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict) \
                or not isinstance(sample.get("qa"), list):
            raise ValidationError(f"{where}: a LoCoMo sample holds a 'conversation' object and a 'qa' list")
        sample_id = str(sample.get("sample_id") or f"conv{n}")
        sessions = tuple(_sessions(sample_id, sample["conversation"], where))
        held = {s.id for s in sessions}
        asked_at = max((s.epoch_ms for s in sessions), default=0) + int(timedelta(days=1).total_seconds() * 1000)
        for i, qa in enumerate(sample["qa"]):
            if not isinstance(qa, dict) or qa.get("category") not in SCORED_CATEGORIES or not qa.get("evidence"):
                continue
            gold = sorted({f"{sample_id}_S{int(m.group(1))}" for e in qa["evidence"]
                           if isinstance(e, str) and (m := _EVIDENCE.match(e))} & held)
            if not gold or not str(qa.get("question") or "").strip():
                continue
            questions.append(Question(id=f"{sample_id}_q{i}", type=f"locomo-cat{qa['category']}",
                                      text=str(qa["question"]), now_ms=asked_at, sessions=sessions,
                                      answer_ids=tuple(gold)))
    return questions
