"""The fields of ``core/fields.py`` the team server keeps beyond a memory's title and text, each a jsonb column of
``items`` of the same name: ``anchors`` (migration 14), sent with a memory and written by every insert, and
``correction`` (migration 15), set only by ``POST /v1/memories/{id}/correction`` (``pgstore/corrections.py``).
Both are read with every row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from memcairn.core.fields import FIELD, Field
from memcairn.core.models import NewItem

WRITTEN: tuple[Field, ...] = (FIELD["anchors"],)
KEPT: tuple[Field, ...] = (*WRITTEN, FIELD["correction"])
WRITTEN_NAMES: tuple[str, ...] = tuple(f.name for f in WRITTEN)
NAMES: tuple[str, ...] = tuple(f.name for f in KEPT)
COLUMNS = ", ".join(WRITTEN_NAMES)  # as an insert names them
SELECTED = ", ".join(f"i.{n}" for n in NAMES)  # as a read of ``items i`` selects them


def values(item: NewItem) -> dict[str, Jsonb]:
    """The item's written fields as the insert's parameters (by name)."""
    return {f.name: Jsonb(getattr(item, f.name) or {}) for f in WRITTEN}


def read(row: Sequence[Any]) -> dict[str, Any]:
    """The kept fields of a row's trailing columns (``SELECTED``), by name."""
    return {f.name: dict(v) if isinstance(v, dict) else {} for f, v in zip(KEPT, row, strict=True)}


def event_fields(item: NewItem) -> dict[str, Any]:
    """The written fields of an item as a queued event holds them (only those with a value)."""
    return {f.name: getattr(item, f.name) for f in WRITTEN if getattr(item, f.name)}
