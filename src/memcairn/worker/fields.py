"""Checks of a JSON body, a request's or a spooled event's; each failure is a ``ValidationError`` naming the
field (the routes answer it with 400, the spool drainer sets the event aside)."""

from __future__ import annotations

import json
from typing import Any

from memcairn.core.errors import ValidationError
from memcairn.wire.fastjson import NonFiniteNumber
from memcairn.wire.json_depth import loads_bounded


def parse_json(raw: bytes) -> dict[str, Any]:
    """A request body (or a spooled one) as a JSON object."""
    if not raw.strip():
        raise ValidationError("a JSON object body is required")
    try:
        # deeper than MAX_DEPTH levels is cut and named (json_depth.cut_marker): stored, never a recursion error
        # NaN, Infinity and 1e999 refused by name: queued, json would write them back as no JSON (Infinity),
        # which stops SQLite's JSON functions on the row
        data = loads_bounded(raw, nonfinite="refuse")
    except NonFiniteNumber as exc:
        raise ValidationError(str(exc)) from None
    except ValueError as exc:
        raise ValidationError(f"the body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValidationError("the body must be a JSON object")
    try:
        json.dumps(data, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("the body contains text that is not valid Unicode (a lone surrogate)") from None
    except (ValueError, RecursionError):
        raise ValidationError("the JSON body is nested too deeply") from None
    return data


def field(data: dict[str, Any], *names: str, kind: type | tuple[type, ...] = str, what: str = "text") -> Any:
    """The first of ``names`` present in ``data`` (null counts as absent), checked to be of ``kind``."""
    for name in names:
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise ValidationError(f"{name} must be {what}")
        return value
    return None


def text_field(data: dict[str, Any], *names: str, required: bool = False, max_chars: int | None = None,
               hint: str = "", blank_ok: bool = False) -> str | None:
    """A text field; blank text is refused, or counts as absent with ``blank_ok``."""
    value = field(data, *names)
    if value is not None and not value.strip():
        if not blank_ok:
            raise ValidationError(f"{names[0]} must not be blank{hint}")
        value = None
    if value is None and required:
        raise ValidationError(f"{names[0]} is required{hint}")
    if value is not None and max_chars is not None and len(value) > max_chars:
        raise ValidationError(f"{names[0]} is longer than {max_chars} characters")
    return value


def text_list(data: dict[str, Any], name: str) -> list[str]:
    value = data.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f'{name} must be a list of strings, e.g. ["first", "second"]')
    return value
