"""The field table of a memory record: one row per field a caller writes and reads back, and what every place
that lists fields (insert and select columns, checks, export and import, the HTTP schemas, an agent's record)
derives from it. The record's identity and times (id, uuid, project, session, kind, type, content hash, epochs)
are not rows: each place handles them by name.

DDL is not derived from this table: migrations replay history (``store/schema.py``); a migration that adds a
column takes its SQL from ``column_ddl``. ``tests/test_fields.py`` holds the table, the dataclasses of
``core/models.py``, the keyword index's columns and the migrated schema to agreement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memcairn.core import serde

# What a field holds. text: a string or None, blank stored as None; list: strings, a JSON array column;
# object: a JSON object column; count: a whole number >= 0 or None; label: a short string or None.
SHAPES: tuple[str, ...] = ("text", "list", "object", "count", "label")
_SQL = {"text": ("TEXT", None), "list": ("TEXT", "'[]'"), "object": ("TEXT", "'{}'"), "count": ("INTEGER", None),
        "label": ("TEXT", None)}
_JSON = {"text": {"type": ["string", "null"]}, "list": {"type": "array", "items": {"type": "string"}},
         "object": {"type": "object"}, "count": {"type": ["integer", "null"], "minimum": 0},
         "label": {"type": ["string", "null"]}}


@dataclass(frozen=True)
class Field:
    name: str
    shape: str
    description: str
    keyword: bool = False  # indexed by the keyword table (FTS5)
    mirrored: bool = False  # embedded in the semantic mirror's documents (``mirror/documents.py``)
    agent_order: int | None = None  # its place in the record an agent reads; None: not shown to an agent
    editable: bool = True  # ``Store.update_item`` may change it
    saved: bool = False  # ``POST /api/memory/save`` takes it

    @property
    def sql_type(self) -> str:
        return _SQL[self.shape][0]

    @property
    def sql_default(self) -> str | None:
        """The column's SQL default; a column with one is NOT NULL."""
        return _SQL[self.shape][1]

    def column_ddl(self) -> str:
        """``name TYPE [NOT NULL DEFAULT x]``: the column as ``ALTER TABLE ... ADD COLUMN`` takes it."""
        default = self.sql_default
        return f"{self.name} {self.sql_type}" + (f" NOT NULL DEFAULT {default}" if default else "")

    def json_schema(self) -> dict[str, Any]:
        return {**_JSON[self.shape], "description": self.description}

    def to_column(self, value: Any) -> Any:
        if self.shape == "list":
            return serde.dump_array(value)
        if self.shape == "object":
            return serde.dump_object(value)
        return value

    def from_column(self, value: Any) -> Any:
        if self.shape == "list":
            return serde.load_array(value)
        if self.shape == "object":
            return serde.load_object(value)
        return value


_SECTION = "A summary's section: "
FIELDS: tuple[Field, ...] = (
    Field("title", "text", "A short headline", keyword=True, mirrored=True, agent_order=1, saved=True),
    Field("subtitle", "text", "One line under the title", keyword=True, mirrored=True, agent_order=2),
    Field("text", "text", "The memory's text (a prompt's words, a note)", keyword=True, mirrored=True,
          agent_order=4, saved=True),
    Field("narrative", "text", "What happened, in prose", keyword=True, mirrored=True, agent_order=3),
    Field("facts", "list", "Short statements, each standing alone", keyword=True, mirrored=True, agent_order=5,
          saved=True),
    Field("concepts", "list", "Tags (search facets)", keyword=True, saved=True),
    Field("files_read", "list", "Paths the work read", keyword=True, agent_order=12),
    Field("files_modified", "list", "Paths the work changed", keyword=True, agent_order=13),
    Field("metadata", "object", "Provenance and other data of the writer", saved=True),
    Field("anchors", "object", "What the memory rests on: files with their content hashes, identifiers it names, "
          "the commit and branch", saved=True),
    Field("correction", "object", "Whether the memory still holds: superseded by another, wrong (and why) or a "
          "reverted fix, who said so and when, with the corrections undone before (``store/supersede.py``)"),
    Field("request", "text", _SECTION + "what was asked", keyword=True, mirrored=True, agent_order=6),
    Field("investigated", "text", _SECTION + "what was looked into", keyword=True, mirrored=True, agent_order=7),
    Field("learned", "text", _SECTION + "what was learned", keyword=True, mirrored=True, agent_order=8),
    Field("completed", "text", _SECTION + "what was done", keyword=True, mirrored=True, agent_order=9),
    Field("next_steps", "text", _SECTION + "what is left", keyword=True, mirrored=True, agent_order=10),
    Field("notes", "text", _SECTION + "anything else", keyword=True, mirrored=True, agent_order=11),
    Field("prompt_number", "count", "The prompt of the session it belongs to (1 = the first)"),
    Field("platform_source", "label", "The agent that recorded it (claude-code, codex, gemini-cli...)",
          editable=False),
)
FIELD: dict[str, Field] = {f.name: f for f in FIELDS}
NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)


def names(shape: str) -> tuple[str, ...]:
    """The fields of one shape, in table order."""
    return tuple(f.name for f in FIELDS if f.shape == shape)


KEYWORD_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.keyword)
MIRRORED_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.mirrored)
AGENT_FIELDS: tuple[str, ...] = tuple(f.name for f in sorted((f for f in FIELDS if f.agent_order is not None),
                                                              key=lambda f: f.agent_order or 0))
EDITABLE_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.editable)
SAVED_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.saved)
