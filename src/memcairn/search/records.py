"""Full records as an agent reads them: only what it can use, and what reading one costs.

``agent_record`` keeps a memory's id, its time as ISO 8601 in the caller's zone, its project and every
non-empty field of content. It drops what an agent cannot act on: the uuid, the content hash, the epoch
fields (the ISO time replaces them), the session's uuid, the concept tags (search facets), provenance
metadata and empty fields, and it lists a file read or modified
only when the record's text does not name it already (an episode's facts say "edited lib/x.ex: added f/2";
listing lib/x.ex again costs tokens and tells nothing). ``format=raw`` over HTTP (and
``memcairn show --json``) keeps the whole stored row.

``record_tokens`` is the cost of one record inside a ``get_observations`` answer, so the ``~N tok`` printed
beside an index row is what fetching that id will cost (``memcairn.core.tokens``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, tzinfo
from typing import Any

from memcairn.core import fields
from memcairn.core.models import MemoryItem
from memcairn.core.tokens import estimate_tokens
from memcairn.search.freshness import UNKNOWN, Freshness

# Content fields in the order an agent reads them best (``core/fields.py``'s ``agent_order``): what it is, then
# what it says, then where. Concepts are search facets (``concept=`` filters on them), not content: left out, like
# the session's uuid.
AGENT_FIELDS: tuple[str, ...] = fields.AGENT_FIELDS
FORMATS = ("agent", "raw")
_FILE_FIELDS = ("files_read", "files_modified")


def iso_time(epoch_ms: int, tz: tzinfo | None = None) -> str:
    """``2026-12-01T14:03:00+01:00``: the moment in ``tz`` (None: this process's local zone), to the second."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz).astimezone(tz).isoformat(timespec="seconds")


def agent_record(item: MemoryItem, tz: tzinfo | None = None, freshness: Freshness | None = None) -> dict[str, Any]:
    """The record an agent is given (module doc): no uuid, hash or epochs, no empty fields; ``freshness`` when
    it was checked and says something (``search.freshness``: not ``unknown``)."""
    record: dict[str, Any] = {"id": item.id, "time": iso_time(item.created_at_epoch, tz), "project": item.project,
                              "kind": item.kind, "type": item.type}
    for name in AGENT_FIELDS:
        value = getattr(item, name)
        if value not in (None, "", [], {}):
            record[name] = value
    said = json.dumps([v for k, v in record.items() if k not in _FILE_FIELDS], ensure_ascii=False)
    for name in _FILE_FIELDS:
        if isinstance(record.get(name), (list, tuple)):
            unsaid = [p for p in record[name] if not (isinstance(p, str) and json.dumps(p)[1:-1] in said)]
            if unsaid:
                record[name] = unsaid
            else:
                del record[name]
    if freshness is not None and freshness.state != UNKNOWN:  # unknown: nothing to act on, like an empty field
        record["freshness"] = freshness_json(freshness, tz)
    return record


def raw_record(item: MemoryItem, freshness: Freshness | None = None) -> dict[str, Any]:
    """The whole stored row, and its ``freshness`` when it was checked."""
    record = item.to_dict()
    if freshness is not None:
        record["freshness"] = freshness_json(freshness)
    return record


def freshness_json(freshness: Freshness, tz: tzinfo | None = None) -> dict[str, Any]:
    """``{"state", "reasons", "checked_at"}`` as a record carries it (the check's time in ``tz``)."""
    return {"state": freshness.state, "reasons": list(freshness.reasons),
            "checked_at": iso_time(freshness.checked_at, tz) if freshness.checked_at else None}


def record_json(record: dict[str, Any]) -> str:
    """A record as it appears in a ``get_observations`` answer."""
    return json.dumps(record, ensure_ascii=False)


def record_tokens(item: MemoryItem, tz: tzinfo | None = None) -> int:
    """What reading ``item`` through ``get_observations`` costs (its record, and the comma that joins it)."""
    return estimate_tokens(record_json(agent_record(item, tz))) + 1


def check_format(value: str | None) -> str:
    """``agent`` or ``raw`` (default raw: the HTTP API's records are whole unless an agent asks otherwise)."""
    from memcairn.core.errors import ValidationError

    chosen = (value or "raw").strip().lower()
    if chosen not in FORMATS:
        raise ValidationError(f"format must be {' or '.join(FORMATS)}, got {value!r}")
    return chosen


# -- one answer of several records --------------------------------------------------------------------------
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_SPACES = re.compile(r"\s+")
REPEAT_MIN_CHARS = 24  # shorter sentences ("Done.", a file name) may repeat: dropping them saves little
_DEDUPED_FIELDS = tuple(name for name in AGENT_FIELDS if name not in ("title", *_FILE_FIELDS))


def _key(sentence: str) -> str:
    return _SPACES.sub(" ", sentence).strip().rstrip("…").strip().casefold()


def _unsaid_text(text: str, seen: set[str]) -> str:
    """``text`` without the sentences ``seen`` holds (long ones only), line structure kept; adds the rest."""
    kept_lines = []
    for line in text.splitlines():
        kept = []
        for sentence in _SENTENCE_END.split(line):
            key = _key(sentence)
            if len(key) >= REPEAT_MIN_CHARS and key in seen:
                continue
            if len(key) >= REPEAT_MIN_CHARS:
                seen.add(key)
            kept.append(sentence)
        if kept or not line.strip():
            kept_lines.append(" ".join(kept))
    return "\n".join(kept_lines).strip()


def said_once(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of one answer with every long sentence said once: a turn's summary retells its observations
    (and a record's completed and next steps often repeat each other), so the second telling is left out of the
    later field, in the order the records were asked for. Titles stay (they name the record); a field left
    empty goes."""
    seen: set[str] = set()
    for record in records:
        if isinstance(record.get("title"), str):
            seen.add(_key(record["title"]))
        for name in _DEDUPED_FIELDS:
            value = record.get(name)
            if isinstance(value, str):
                value = _unsaid_text(value, seen)
            elif isinstance(value, list):
                value = [v for v in (_unsaid_text(v, seen) if isinstance(v, str) else v for v in value) if v]
            else:
                continue
            if value:
                record[name] = value
            else:
                del record[name]
    return records
