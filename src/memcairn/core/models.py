"""Records that cross module boundaries: what goes into the store and what comes out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memcairn.core import fields

KINDS: tuple[str, ...] = ("observation", "summary", "prompt", "manual")
MAX_ITEM_ID = 2**63 - 1  # the largest SQLite INTEGER
# Half of a UTF-16 pair on its own (an emoji cut in two, a non-UTF-8 byte Python decoded): no UTF-8 text can hold
# it, so SQLite cannot store it.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 control characters and DEL: no project name holds one on purpose (a newline breaks every listing,
# a NUL ends C strings); project.py maps them to U+FFFD when naming a directory.
CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")
ARRAY_FIELDS: tuple[str, ...] = fields.names("list")
OBJECT_FIELDS: tuple[str, ...] = fields.names("object")
SUMMARY_SECTIONS: tuple[str, ...] = ("request", "investigated", "learned", "completed", "next_steps", "notes")
TEXT_FIELDS: tuple[str, ...] = fields.names("text")
DEFAULT_TYPES = {"observation": "discovery", "summary": "summary", "prompt": "prompt", "manual": "note"}
# The observation types the compression prompt and the offline extractor produce.
OBSERVATION_TYPES: tuple[str, ...] = ("bugfix", "feature", "refactor", "change", "discovery", "decision")


# The dataclasses declare the fields of ``core/fields.py``'s table (tests/test_fields.py holds them together).
@dataclass(frozen=True)
class NewItem:
    """A memory to be stored. ``session`` is the agent's own session id (with ``platform_source``)."""

    project: str
    kind: str
    type: str | None = None
    title: str | None = None
    subtitle: str | None = None
    text: str | None = None
    narrative: str | None = None
    facts: Sequence[str] = ()
    concepts: Sequence[str] = ()
    files_read: Sequence[str] = ()
    files_modified: Sequence[str] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    anchors: dict[str, Any] = field(default_factory=dict)
    correction: dict[str, Any] = field(default_factory=dict)
    request: str | None = None
    investigated: str | None = None
    learned: str | None = None
    completed: str | None = None
    next_steps: str | None = None
    notes: str | None = None
    prompt_number: int | None = None
    session: str | None = None
    platform_source: str | None = None
    created_at_epoch: int | None = None  # milliseconds; now when None
    source: tuple[str, str, str] | None = None  # provenance: (source_type, source_table, source_id)


@dataclass(frozen=True)
class AddResult:
    """What an insert did: ``created`` a row, or found the same content already stored (its ``id``), or
    refused it because the user deleted that content before (``forgotten``: ``id`` is 0, nothing written)."""

    id: int
    created: bool
    forgotten: bool = False


# Keyword-only: a field added to the table gets a default here, and every place that builds an item with the
# fields it knows (the team store's reads, a team server's record) reads it back empty.
@dataclass(frozen=True, kw_only=True)
class MemoryItem:
    id: int
    uuid: str
    project: str
    merged_into_project: str | None
    session: str | None
    kind: str
    type: str
    title: str | None
    subtitle: str | None
    text: str | None
    narrative: str | None
    facts: list[str]
    concepts: list[str]
    files_read: list[str]
    files_modified: list[str]
    metadata: dict[str, Any]
    anchors: dict[str, Any] = field(default_factory=dict)
    correction: dict[str, Any] = field(default_factory=dict)
    request: str | None
    investigated: str | None
    learned: str | None
    completed: str | None
    next_steps: str | None
    notes: str | None
    prompt_number: int | None
    platform_source: str | None
    content_hash: str
    created_at_epoch: int
    updated_at_epoch: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def searchable_chars(self) -> int:
        """Characters of stored text; /4 estimates the tokens it costs to read the full record."""
        total = sum(len(getattr(self, f) or "") for f in TEXT_FIELDS)
        total += sum(len(x) for name in ARRAY_FIELDS for x in getattr(self, name))
        return total


@dataclass(frozen=True)
class ItemFilter:
    """Structured filters shared by list, keyword search and the vector leg's hydration."""

    projects: Sequence[str] | None = None  # a project matches by name or by merged_into_project
    kinds: Sequence[str] | None = None
    types: Sequence[str] | None = None
    concepts: Sequence[str] | None = None
    files: Sequence[str] | None = None  # matches files_read or files_modified (substring of a path)
    date_start: int | None = None  # epoch ms, inclusive
    date_end: int | None = None  # epoch ms, inclusive
    platform_source: str | None = None
    # with platform_source: also items no agent recorded (platform_source NULL, e.g. notes saved by hand)
    platform_source_or_none: bool = False
    session: str | None = None
