"""What a caller asks for, checked once for every door (HTTP, MCP, CLI, context injection).

``SearchRequest`` normalises its own fields when it is built, so a request made by any door is valid or
was refused with a ``ValidationError`` that says what to type instead:

- ``kinds`` accepts ``observation(s)``, ``summary``/``summaries``, ``prompt(s)``, ``manual`` and ``all``,
  as one string (comma-separated allowed) or a list;
- dates accept an ISO date (``2026-12-01``; as an end date it means the end of that day), an ISO datetime
  with or without a zone (no zone = the ``tz`` given, else local time), epoch seconds or milliseconds, or a
  relative time before ``now`` (``30m``, ``24h``, ``7d``, ``2w``);
- ``limit`` out of 1..100 and ``offset`` out of 0..1000 are clamped, and the clamp is said in ``notes``;
- ``mode`` accepts ``auto`` (or nothing), ``keyword`` or ``semantic``, in any case.

Everything else a request carries is plain data: the search service decides what to do with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Any

from memcairn.core.clock import now_ms
from memcairn.core.errors import ValidationError
from memcairn.core.models import KINDS

MIN_LIMIT, MAX_LIMIT, DEFAULT_LIMIT = 1, 100, 20
MAX_OFFSET = 1000
ORDERS = ("relevance", "newest", "oldest")
FUSIONS = ("rrf", "minmax")
# Which legs a query runs: ``auto`` = the service's choice (hybrid when the mirror is up), or one leg alone.
MODES = ("auto", "keyword", "semantic")

KIND_ALIASES = {
    **{k: k for k in KINDS},
    "observations": "observation", "obs": "observation",
    "summaries": "summary",
    "prompts": "prompt",
    "manuals": "manual", "note": "manual", "notes": "manual",
}
ACCEPTED_KINDS = "observation(s), summary/summaries, prompt(s), manual or all"
DATE_FORMATS = (
    "an ISO date (2026-12-01), an ISO datetime with or without a zone (2026-12-01T14:30, "
    "2026-12-01T14:30:00+02:00, 2026-12-01T12:30Z), epoch seconds or milliseconds (1796083200), "
    "or a relative time such as 30m, 24h, 7d, 2w"
)
# Epoch values at or above this are milliseconds (1e11 seconds lies in the year 5138; 1e11 ms in 1973).
_MS_THRESHOLD = 100_000_000_000
_RELATIVE = re.compile(r"^(\d+)\s*(m|min|h|d|w)$", re.IGNORECASE)
_RELATIVE_MS = {"m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


_MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: SQLite integers and datetime both hold it


_OFFSET = re.compile(r"([+-])(\d{2}):?(\d{2})")
TZ_FORMATS = "an IANA zone name (Europe/Paris), UTC, or a UTC offset (+09:00, -0530)"


def parse_tz(value: str | None) -> tzinfo | None:
    """The zone a caller reads and writes times in; None (the process's local time) when blank.

    Raises:
        ValidationError: the value is none of ``TZ_FORMATS``.
    """
    text = (value or "").strip()
    if not text:
        return None
    if text.upper() in ("UTC", "Z", "GMT"):
        return UTC
    match = _OFFSET.fullmatch(text)
    if match:
        sign, hours, minutes = match.groups()
        offset = timedelta(hours=int(hours), minutes=int(minutes))
        if offset < timedelta(hours=24) and int(minutes) < 60:
            return timezone(-offset if sign == "-" else offset)
    else:
        from zoneinfo import ZoneInfo

        try:
            return ZoneInfo(text)
        except (KeyError, ValueError, OSError):  # not found is a KeyError; a malformed name a ValueError
            pass
    raise ValidationError(f"unknown time zone {value!r}; use {TZ_FORMATS}")


def local_tz_name() -> str:
    """This process's local zone as ``parse_tz`` reads it, for a worker that may run in another zone: the
    IANA name when it can be found (``TZ`` or the ``/etc/localtime`` link), else today's UTC offset."""
    import os
    from zoneinfo import ZoneInfo

    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        link = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in link:
            candidates.append(link.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    for name in candidates:
        if name and not name.startswith("/"):
            try:
                ZoneInfo(name)
            except (ValueError, OSError, KeyError):
                continue
            return name
    offset = datetime.now().astimezone().utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def parse_time(value: Any, *, end_of_day: bool = False, now: int | None = None, tz: tzinfo | None = None,
               what: str = "date") -> int | None:
    """Epoch milliseconds for a date given in any accepted form (see the module docstring); None stays None.

    Raises:
        ValidationError: the value is in none of the accepted forms.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValidationError(f"{what} {value!r} is not a date; use {DATE_FORMATS}")
    if isinstance(value, datetime):
        # No zone and no ``tz``: a naive datetime's timestamp() applies the local rules of that date (DST
        # included), as the renderers print it; today's fixed offset would be an hour off half the year.
        dt = value if value.tzinfo or tz is None else value.replace(tzinfo=tz)
        return int(dt.timestamp() * 1000)
    if isinstance(value, date):
        return _day_bound(value, end_of_day, tz)
    if isinstance(value, int | float):
        if value != value or value < 0 or value > _MAX_EPOCH_MS:  # NaN, before 1970 or past year 9999
            raise ValidationError(f"{what} {value!r} is not a date; use {DATE_FORMATS}")
        return int(value) if value >= _MS_THRESHOLD else int(value * 1000)
    if not isinstance(value, str):
        raise ValidationError(f"{what} {value!r} is not a date; use {DATE_FORMATS}")
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():  # isdigit alone also passes "²", which int() refuses
        if len(text) > 20:  # past any epoch; int() would refuse a few thousand digits with a ValueError
            raise ValidationError(f"{what} {value!r} is not a date; use {DATE_FORMATS}")
        return parse_time(int(text), what=what)
    match = _RELATIVE.match(text)
    if match:
        base = now if now is not None else now_ms()
        return max(0, base - min(int(match.group(1)) * _RELATIVE_MS[match.group(2).lower()], base))
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        try:
            return _day_bound(date.fromisoformat(text), end_of_day, tz)
        except ValueError:
            raise ValidationError(f"{what} {value!r} is not a calendar date; use {DATE_FORMATS}") from None
    try:
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
    except ValueError:
        raise ValidationError(f"{what} {value!r} is not a date; use {DATE_FORMATS}") from None
    return parse_time(dt, tz=tz, what=what)


def _day_bound(day: date, end_of_day: bool, tz: tzinfo | None) -> int:
    start = datetime(day.year, day.month, day.day, tzinfo=tz)  # naive = local time of that day (see parse_time)
    if end_of_day:
        return int((start + timedelta(days=1)).timestamp() * 1000) - 1
    return int(start.timestamp() * 1000)


def parse_kinds(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """Store kinds for user input; None (= every kind) for None, empty or ``all``.

    Raises:
        ValidationError: a kind is not one of ``ACCEPTED_KINDS``.
    """
    if value is None:
        return None
    raw = [value] if isinstance(value, str) else list(value)
    wanted: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            raise ValidationError(f"kind {entry!r} is not text; use {ACCEPTED_KINDS}")
        for part in entry.split(","):
            key = part.strip().lower()
            if not key:
                continue
            if key == "all":
                return None
            if key not in KIND_ALIASES:
                raise ValidationError(f"unknown kind {part.strip()!r}; use {ACCEPTED_KINDS}")
            if KIND_ALIASES[key] not in wanted:
                wanted.append(KIND_ALIASES[key])
    return tuple(wanted) or None


def parse_mode(value: Any) -> str | None:
    """``keyword`` or ``semantic``; None for ``auto``, empty or None (the service's own choice).

    Raises:
        ValidationError: anything else.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"mode must be text, got {value!r}; use {', '.join(MODES)}")
    mode = value.strip().lower()
    if mode in ("", "auto"):
        return None
    if mode not in MODES:
        raise ValidationError(f"unknown mode {value!r}; use {', '.join(MODES)}")
    return mode


def _strings(value: str | Sequence[str] | None, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    raw = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            raise ValidationError(f"{what} {entry!r} is not text")
        entry = entry.strip()
        if entry and entry not in out:
            out.append(entry)
    return tuple(out) or None


def _one(value: str | Sequence[str] | None, what: str) -> str | None:
    """The single value of a filter that takes one (a platform, a session); None when blank.

    Raises:
        ValidationError: not text, or several values (only the first would have been used).
    """
    values = _strings(value, what)
    if values and len(values) > 1:
        raise ValidationError(f"give one {what}, not {len(values)}: {', '.join(repr(v) for v in values)}")
    return values[0] if values else None


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValidationError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ValidationError(f"{what} must be a whole number, got {value!r}")


def _choice(value: Any, what: str, choices: Sequence[str], sep: str = ", ") -> str | None:
    """One of ``choices`` (stripped, any case); None when None or blank.

    Raises:
        ValidationError: anything else, also a value that is not text (an ``orderBy`` of 5 must not quietly
            become the default order).
    """
    if value is None:
        return None
    name = value.strip().lower() if isinstance(value, str) else value
    if name == "":
        return None
    if name not in choices:
        raise ValidationError(f"unknown {what} {value!r}; use {sep.join(choices)}")
    return name


def _min_score(value: Any) -> float:
    """The relevance floor a request asks for: a number >= 0 (0 shows every candidate).

    Raises:
        ValidationError: anything else.
    """
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int | float) or not number >= 0 or number == float("inf"):
        raise ValidationError(f"min_score must be a number >= 0 (0 shows every match), got {value!r}")
    return float(number)


def clamp(value: Any, low: int, high: int, what: str, notes: list[str]) -> int:
    """``value`` as an int within low..high; a clamp appends a note such as ``limit 500 clamped to 100``."""
    number = _integer(value, what)
    clamped = max(low, min(high, number))
    if clamped != number:
        notes.append(f"{what} {number} clamped to {clamped}")
    return clamped


@dataclass(frozen=True)
class SearchRequest:
    """One search. Fields accept loose input (strings, lists, dates in any accepted form) and are
    normalised on construction; ``notes`` collects what was adjusted on the way.

    ``order`` None means relevance with query text and newest without. ``fusion`` and
    ``recency_boost_half_life_days`` None mean the service's defaults. ``mode`` None (also given as
    ``auto``) lets the service choose the legs; ``keyword`` or ``semantic`` runs that leg alone. ``now``
    (epoch ms) is the moment the recency window and relative dates count back from; None = the time of the
    search.
    """

    query: str = ""
    projects: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    types: tuple[str, ...] | None = None
    concepts: tuple[str, ...] | None = None
    files: tuple[str, ...] | None = None
    date_start: int | None = None
    date_end: int | None = None
    platform_source: str | None = None
    session: str | None = None
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    order: str | None = None
    fusion: str | None = None
    recency_boost_half_life_days: float | None = None
    mode: str | None = None
    min_score: float | None = None
    now: int | None = None
    tz: tzinfo | None = field(default=None, compare=False, repr=False)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        notes = list(self.notes)
        put = object.__setattr__
        query = self.query
        if query is None:
            query = ""
        if not isinstance(query, str):
            raise ValidationError(f"query must be text, got {type(query).__name__}")
        put(self, "query", query.strip())
        put(self, "projects", _strings(self.projects, "project"))
        put(self, "kinds", parse_kinds(self.kinds))
        put(self, "types", _strings(self.types, "type"))
        put(self, "concepts", _strings(self.concepts, "concept"))
        put(self, "files", _strings(self.files, "file"))
        put(self, "platform_source", _one(self.platform_source, "platform"))
        put(self, "session", _one(self.session, "session"))
        if self.now is not None:
            put(self, "now", parse_time(self.now, what="now"))
        start = parse_time(self.date_start, now=self.now, tz=self.tz, what="start date")
        end = parse_time(self.date_end, end_of_day=True, now=self.now, tz=self.tz, what="end date")
        if start is not None and end is not None and start > end:
            raise ValidationError("the start date is after the end date; swap them or drop one")
        put(self, "date_start", start)
        put(self, "date_end", end)
        put(self, "limit", clamp(self.limit, MIN_LIMIT, MAX_LIMIT, "limit", notes))
        put(self, "offset", clamp(self.offset, 0, MAX_OFFSET, "offset", notes))
        put(self, "order", _choice(self.order, "order", ORDERS))
        put(self, "fusion", _choice(self.fusion, "fusion", FUSIONS, " or "))
        put(self, "mode", parse_mode(self.mode))
        half_life = self.recency_boost_half_life_days
        if half_life is not None:
            if isinstance(half_life, bool) or not isinstance(half_life, int | float) or not half_life >= 0:
                raise ValidationError(f"recency_boost_half_life_days must be a number >= 0, got {half_life!r}")
            put(self, "recency_boost_half_life_days", float(half_life) or None)
        if self.min_score is not None:
            put(self, "min_score", _min_score(self.min_score))
        put(self, "notes", tuple(dict.fromkeys(notes)))

    @property
    def has_date_range(self) -> bool:
        return self.date_start is not None or self.date_end is not None

    @property
    def resolved_order(self) -> str:
        if self.order is not None and (self.query or self.order != "relevance"):
            return self.order
        return "relevance" if self.query else "newest"

    def filter_names(self) -> list[str]:
        """Names (never values) of the filters in use, for telemetry."""
        names = ("projects", "kinds", "types", "concepts", "files", "date_start", "date_end",
                 "platform_source", "session")
        return [n for n in names if getattr(self, n) is not None]

