"""The digest's header clock: the only use of the current time in its text, and how a kept text is
restamped with a new one."""

from __future__ import annotations

from datetime import datetime, tzinfo

HEADER = "# memcairn memory · "  # the first line of the text, which ends with the clock


def local_moment(epoch_ms: int, tz: tzinfo | None) -> datetime:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz)
    return moment if tz is not None else moment.astimezone()


def clock_text(now: datetime) -> str:
    return f"{now:%Y-%m-%d %H:%M} {now.tzname() or ''}".rstrip()


def clock(now_ms: int, tz: tzinfo | None = None) -> str:
    """``now`` as the header shows it: the only use of the current time in the text (rows show the items'
    own times), so two renders of the same data with the same clock are byte-identical."""
    return clock_text(local_moment(now_ms, tz))


CLOCK_WIDTH = len("2026-12-03 17:07")  # the fixed-width part of a clock; the zone's name follows


def restamp(text: str, old_clock: str, new_clock: str) -> str | None:
    """``text``, rendered when the header's clock read ``old_clock``, as a render at ``new_clock`` would be;
    None when that is not a matter of replacing the clock (clocks of different widths).

    The clock is the only use of the current time in the text, and a clock's width is fixed for a zone name,
    so the budget fitting (which counts characters) and the footer come out the same. A text without the
    header (the empty-store line, the minimal line) does not show the time at all."""
    if old_clock == new_clock:
        return text
    if len(old_clock) != len(new_clock):
        return None
    start = text.find(HEADER)
    if start < 0:
        return text
    end = text.find("\n", start)
    at = text.rfind(old_clock, start, len(text) if end < 0 else end)
    if at < 0:
        return None
    return text[:at] + new_clock + text[at + len(old_clock):]
