"""Checks on caller input before anything is written. Oversized fields are rejected, not truncated:
a silently cut memory is worse than a clear error the caller can act on."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from memcairn.errors import ValidationError
from memcairn.models import ARRAY_FIELDS, DEFAULT_TYPES, KINDS, TEXT_FIELDS, NewItem
from memcairn.project import MAX_PROJECT_CHARS

MAX_FIELD_BYTES = 256 * 1024
_TYPE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


def _check_size(name: str, value: str) -> None:
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > MAX_FIELD_BYTES:
        raise ValidationError(
            f"{name} is {size:,} bytes; the limit is {MAX_FIELD_BYTES:,} bytes (256 KiB) per field. "
            "Split it into several memories or shorten it"
        )


def validate_item(item: NewItem) -> NewItem:
    """Return the item with defaults filled in, or raise ValidationError saying what to fix."""
    if not isinstance(item.project, str) or not item.project.strip():
        raise ValidationError("project is required (a non-empty name, e.g. the repository's directory name)")
    if len(item.project) > MAX_PROJECT_CHARS:
        raise ValidationError(f"project name is longer than {MAX_PROJECT_CHARS} characters")
    if item.kind not in KINDS:
        raise ValidationError(f"unknown kind {item.kind!r}; use one of: {', '.join(KINDS)}")
    kind_type = item.type or DEFAULT_TYPES[item.kind]
    if not isinstance(kind_type, str) or not _TYPE.match(kind_type):
        raise ValidationError(
            f"type {kind_type!r} is not valid: use 1-40 lowercase letters, digits, '-' or '_', starting with a "
            "letter (e.g. bugfix, feature, discovery, decision)"
        )
    for name in TEXT_FIELDS:
        value = getattr(item, name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValidationError(f"{name} must be text, got {type(value).__name__}")
        _check_size(name, value)
    arrays = {}
    for name in ARRAY_FIELDS:
        values = getattr(item, name)
        if values is None:
            values = ()
        if isinstance(values, str | bytes) or not all(isinstance(v, str) for v in values):
            raise ValidationError(f"{name} must be a list of strings, e.g. [\"first\", \"second\"]")
        values = [v for v in values if v.strip()]
        _check_size(name, json.dumps(values, ensure_ascii=False))
        arrays[name] = tuple(values)
    if not isinstance(item.metadata, dict):
        raise ValidationError("metadata must be a JSON object")
    try:
        _check_size("metadata", json.dumps(item.metadata, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"metadata must be JSON-serialisable: {exc}") from None
    if item.prompt_number is not None and (not isinstance(item.prompt_number, int) or item.prompt_number < 0):
        raise ValidationError("prompt_number must be a whole number >= 0")
    if item.created_at_epoch is not None and (
        not isinstance(item.created_at_epoch, int) or item.created_at_epoch < 0
    ):
        raise ValidationError("created_at_epoch must be milliseconds since 1970 (a whole number >= 0)")
    if item.session is not None and (not isinstance(item.session, str) or not item.session.strip()):
        raise ValidationError("session must be a non-empty string when given")
    if not any(getattr(item, f) for f in TEXT_FIELDS) and not any(arrays.values()):
        raise ValidationError("a memory needs some content: a title, text, narrative, facts or summary section")
    return replace(item, type=kind_type, project=item.project.strip(), **arrays)
