"""Checks on caller input before anything is written. Oversized fields are rejected, not truncated:
a silently cut memory is worse than a clear error the caller can act on."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from memcairn.core.errors import ValidationError
from memcairn.core.fields import FIELDS
from memcairn.core.models import (
    ARRAY_FIELDS,
    DEFAULT_TYPES,
    KINDS,
    LONE_SURROGATE,
    MAX_ITEM_ID,
    OBJECT_FIELDS,
    TEXT_FIELDS,
    NewItem,
)
from memcairn.core.project import MAX_PROJECT_CHARS
from memcairn.store.records import MAX_EPOCH_MS, MAX_FIELD_BYTES

__all__ = ["MAX_EPOCH_MS", "MAX_FIELD_BYTES", "MAX_PROJECT_CHARS", "validate_item"]

_TYPE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


def _check_unicode(name: str, value: str) -> None:
    """A lone surrogate (half of an emoji cut by a tool, or a non-UTF-8 byte decoded by Python) cannot be
    written as UTF-8: refuse it here with a clear error instead of failing inside SQLite."""
    if LONE_SURROGATE.search(value):
        raise ValidationError(f"{name} contains text that is not valid Unicode (a lone surrogate); "
                              "re-encode it as UTF-8")


def _clean_text(value: str) -> str | None:
    """A text field as stored: None when blank (NULs and whitespace only); NUL becomes U+FFFD. NUL separates
    the fields in the content hash (a NUL inside a field would make two different memories hash alike and one
    be dropped as a duplicate of the other), and C-string consumers of SQLite text stop at it."""
    if not value.replace("\x00", "").strip():
        return None
    return value.replace("\x00", "\ufffd")


def _whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_size(name: str, value: str) -> None:
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > MAX_FIELD_BYTES:
        raise ValidationError(
            f"{name} is {size:,} bytes; the limit is {MAX_FIELD_BYTES:,} bytes (256 KiB) per field. "
            "Split it into several memories or shorten it"
        )


def _check_object(name: str, value: object) -> None:
    if not isinstance(value, dict):
        raise ValidationError(f"{name} must be a JSON object")
    try:
        encoded = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} must be JSON-serialisable: {exc}") from None
    _check_unicode(name, encoded)
    _check_size(name, encoded)


def _check_count(name: str, value: object) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_ITEM_ID):
        raise ValidationError(f"{name} must be a whole number >= 0")


def validate_item(item: NewItem) -> NewItem:
    """Return the item with defaults filled in, or raise ValidationError saying what to fix."""
    if not isinstance(item.project, str) or not item.project.strip():
        raise ValidationError("project is required (a non-empty name, e.g. the repository's directory name)")
    _check_unicode("project", item.project)
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
    texts: dict[str, str | None] = {}
    for name in TEXT_FIELDS:
        value = getattr(item, name)
        if value is None:
            texts[name] = None
            continue
        if not isinstance(value, str):
            raise ValidationError(f"{name} must be text, got {type(value).__name__}")
        _check_unicode(name, value)
        _check_size(name, value)
        texts[name] = _clean_text(value)
    arrays = {}
    for name in ARRAY_FIELDS:
        values = getattr(item, name)
        if values is None:
            values = ()
        if isinstance(values, str | bytes):
            raise ValidationError(f"{name} must be a list of strings, e.g. [\"first\", \"second\"]")
        values = list(values)  # a generator would be used up by the type check below
        if not all(isinstance(v, str) for v in values):
            raise ValidationError(f"{name} must be a list of strings, e.g. [\"first\", \"second\"]")
        values = [v for v in values if v.strip()]
        for value in values:
            _check_unicode(name, value)
        _check_size(name, json.dumps(values, ensure_ascii=False))
        arrays[name] = tuple(values)
    for name in OBJECT_FIELDS:
        _check_object(name, getattr(item, name))
    for name in (f.name for f in FIELDS if f.shape == "count"):
        _check_count(name, getattr(item, name))
    if item.created_at_epoch is not None and (
        not _whole_number(item.created_at_epoch) or not 0 <= item.created_at_epoch <= MAX_EPOCH_MS
    ):
        raise ValidationError("created_at_epoch must be milliseconds since 1970 (a whole number from 0 to "
                              f"{MAX_EPOCH_MS}, the year 9999)")
    if item.session is not None and (not isinstance(item.session, str) or not item.session.strip()):
        raise ValidationError("session must be a non-empty string when given")
    if item.platform_source is not None and not isinstance(item.platform_source, str):
        raise ValidationError("platform_source must be text such as claude-code, codex or gemini-cli")
    for name in ("session", "platform_source"):
        if getattr(item, name) is not None:
            _check_unicode(name, getattr(item, name))
    if not any(texts.values()) and not any(arrays.values()):
        raise ValidationError("a memory needs some content: a title, text, narrative, facts or summary section")
    return replace(item, type=kind_type, project=item.project.strip(), **texts, **arrays)
