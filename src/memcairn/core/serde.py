"""The one place JSON columns are written and read.

Reads never raise: a row whose JSON was damaged (by hand, by an old tool) still loads. A string that is
not a JSON array becomes a one-element list so no text is lost; a damaged object is kept under ``_raw``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def dump_array(values: Sequence[str] | None) -> str:
    return json.dumps(list(values or []), ensure_ascii=False)


def dump_object(value: dict[str, Any] | None) -> str:
    return json.dumps(value or {}, ensure_ascii=False, sort_keys=True, default=str)


def load_array(text: str | None) -> list[str]:
    if text is None or text == "":
        return []
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return [str(text)]
    if isinstance(value, list):
        return [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value if v is not None]
    if value is None:
        return []
    return [value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)]


def load_object(text: str | None) -> dict[str, Any]:
    if text is None or text == "":
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {"_raw": str(text)}
    return value if isinstance(value, dict) else {"_raw": value}
