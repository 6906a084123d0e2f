"""``get_observations``' answer, bounded: records go into the agent's context, where a saved memory may hold
256 KiB in each of its fields (and in its metadata, and in each list: thousands of short facts), and Claude Code
refuses a tool result over 25,000 tokens.

A text is cut past ``MAX_FIELD_CHARS``, a list or an object (metadata) past ``MAX_ENTRIES`` entries, nesting past
``MAX_DEPTH`` levels, and one record past ``MAX_RECORDS_CHARS`` characters of JSON (so the first record, always
shown, is bounded too); records past ``MAX_RECORDS_CHARS`` in all are left for another call.
"""

from __future__ import annotations

from memcairn.wire.fastjson import dumps

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_FIELD_CHARS = 8_000
MAX_ENTRIES = 50
MAX_DEPTH = 8
MAX_RECORDS_CHARS = 60_000
# Where a cut record can be read whole (the CLI reads the store; the note names the first cut id).
SHOW_IN_FULL = "memcairn show {id} --json"


def compact(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its empty fields (null, "", [] and {} say nothing and cost tokens)."""
    return {k: v for k, v in record.items() if v not in (None, "", [], {})}


class _Budget:
    """Characters of JSON one record may still spend, and whether anything of it was cut."""

    def __init__(self, chars: int) -> None:
        self.left = chars
        self.cut = False

    def spend(self, chars: int) -> None:
        self.left -= chars


def _cost(value: Any) -> int:
    """Characters ``value`` takes in the tool's answer (JSON escapes such as ``\\n`` count double or more)."""
    return len(dumps(value, ensure_ascii=False))


def _fitting(text: str, room: int) -> int:
    """How many leading characters of ``text`` (at most ``MAX_FIELD_CHARS``) fit in ``room`` characters of JSON."""
    high = min(len(text), MAX_FIELD_CHARS)
    if _cost(text[:high]) - 2 <= room:
        return high
    low = 0
    while low < high:  # the encoded length grows with the prefix: bisect
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _cost(text[:middle]) - 2 <= room else (low, middle - 1)
    return low


def _cut_text(text: str, budget: _Budget) -> str:
    from memcairn.wire.fence import defuse

    text = defuse(text)  # stored text in the agent's context: no fence or chat-template role marker passes
    keep = _fitting(text, max(0, budget.left))
    if keep < len(text):
        text = f"{text[:keep]}… [cut: {len(text) - keep:,} more characters]"
        budget.cut = True
    budget.spend(_cost(text))
    return text


def _cut_list(values: list[Any], budget: _Budget, depth: int) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if len(out) == MAX_ENTRIES or budget.left <= 0:
            break
        out.append(_cut(value, budget, depth + 1))
        budget.spend(2)  # ", "
    if len(out) < len(values):
        budget.cut = True
        out.append(f"… [cut: {len(values) - len(out):,} more entries]")
    return out


def _cut_object(fields: dict[str, Any], budget: _Budget, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if len(out) == MAX_ENTRIES or budget.left <= 0:
            break
        budget.spend(_cost(key) + 4)  # ": " and ", "
        out[key] = _cut(value, budget, depth + 1)
    if len(out) < len(fields):
        budget.cut = True
        out["…"] = f"[cut: {len(fields) - len(out):,} more keys]"
    return out


def _cut(value: Any, budget: _Budget, depth: int = 0) -> Any:
    """``value`` (one field of a record) within ``budget``: texts, lists and objects cut and marked."""
    if isinstance(value, str):
        return _cut_text(value, budget)
    if isinstance(value, list | dict) and depth >= MAX_DEPTH:
        budget.cut = True
        marker = f"… [cut: nested deeper than {MAX_DEPTH} levels]"
        budget.spend(_cost(marker))
        return marker
    if isinstance(value, list):
        return _cut_list(value, budget, depth)
    if isinstance(value, dict):
        return _cut_object(value, budget, depth)
    budget.spend(_cost(value))
    return value


def bounded(record: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``record`` within ``MAX_RECORDS_CHARS`` characters of JSON (plus the cut markers), and whether it was cut.

    Every field is kept (with a marker when cut), in the record's order; the budget goes to the plain fields
    first (id, title, text...), then the lists, then objects (metadata), so a large metadata cannot push the
    memory's own text out."""
    budget = _Budget(MAX_RECORDS_CHARS)

    def rank(key: str) -> int:
        value = record[key]
        return 2 if isinstance(value, dict) else 1 if isinstance(value, list) else 0

    cut: dict[str, Any] = {}
    for key in sorted(record, key=rank):
        budget.spend(_cost(key) + 4)
        cut[key] = _cut(record[key], budget, 1)
    return {key: cut[key] for key in record}, budget.cut

