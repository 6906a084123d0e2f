"""The field table of a memory record (core/fields.py) agrees with the dataclasses, the keyword index, the migrated
schema, the mirror's documents and the worker's OpenAPI document."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memcairn.core.fields import FIELDS, KEYWORD_FIELDS, MIRRORED_FIELDS, NAMES
from memcairn.core.models import MemoryItem, NewItem
from memcairn.mirror.documents import documents_for
from memcairn.store.items import Store
from memcairn.store.schema import FTS_COLUMNS
from memcairn.wire.config import load_settings
from memcairn.worker.openapi import build_openapi

# What each shape is declared as: (in NewItem, in MemoryItem).
_DECLARED: dict[str, tuple[Any, Any]] = {
    "text": (str | None, str | None), "label": (str | None, str | None), "count": (int | None, int | None),
    "list": (Sequence[str], list[str]), "object": (dict[str, Any], dict[str, Any]),
}
_NEW_ITEM_OWN = ["project", "kind", "type", "session", "created_at_epoch", "source"]
_MEMORY_ITEM_OWN = ["id", "uuid", "project", "merged_into_project", "session", "kind", "type", "content_hash",
                    "created_at_epoch", "updated_at_epoch"]


def _table_fields(cls: type, own: list[str]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in own]


def test_the_table_and_the_dataclasses_agree() -> None:
    assert _table_fields(NewItem, _NEW_ITEM_OWN) == list(NAMES)
    assert _table_fields(MemoryItem, _MEMORY_ITEM_OWN) == list(NAMES)
    new_hints, item_hints = typing.get_type_hints(NewItem), typing.get_type_hints(MemoryItem)
    for f in FIELDS:
        assert (new_hints[f.name], item_hints[f.name]) == _DECLARED[f.shape], f.name


def test_the_keyword_index_reads_the_fields_marked_keyword() -> None:
    assert set(KEYWORD_FIELDS) == set(FTS_COLUMNS)


def test_a_migrated_store_has_a_column_of_each_field_as_the_table_says(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    try:
        columns = {row[1]: row for row in store._conn.execute("PRAGMA table_info(memory_items)")}
    finally:
        store.close()
    for f in FIELDS:
        _, _, sql_type, not_null, default, _ = columns[f.name]
        assert (sql_type, bool(not_null), default) == (f.sql_type, f.sql_default is not None, f.sql_default), f.name


def test_mirror_documents_hold_only_the_fields_marked_mirrored() -> None:
    values: dict[str, Any] = {}
    for f in FIELDS:
        token = f"tok{f.name.replace('_', '')}"
        values[f.name] = {"list": [token], "object": {"k": token}, "count": 3}.get(f.shape, token)
    values["platform_source"] = "claude-code"
    embedded: set[str] = set()
    for kind in ("observation", "summary", "prompt", "manual"):
        item = MemoryItem(id=1, uuid="u", project="p", merged_into_project=None, session=None, kind=kind,
                          type="change", content_hash="h", created_at_epoch=0, updated_at_epoch=0, **values)
        text = " ".join(d.text for d in documents_for(item))
        embedded |= {f.name for f in FIELDS if f"tok{f.name.replace('_', '')}" in text}
    assert embedded <= set(MIRRORED_FIELDS)


def test_the_openapi_memory_item_names_every_field() -> None:
    schema = build_openapi(load_settings())["components"]["schemas"]["MemoryItem"]["properties"]
    assert set(NAMES) <= set(schema)
    assert all(schema[f.name]["description"] for f in FIELDS)
