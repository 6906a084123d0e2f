"""One mirror document per searchable field of a row, with an id that names the row.

    obs_<id>_narrative   obs_<id>_text   obs_<id>_fact_<i>   obs_<id>_title (only when nothing else)
    summary_<id>_<section>              prompt_<id>          manual_<id>_text / _narrative / _fact_<i>

A field longer than one chunk (the model reads ~256 tokens) continues in ``..._c<n>`` documents.
Field-level documents let one matching fact find its observation even when the rest is about other things.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memcairn.core.models import SUMMARY_SECTIONS, MemoryItem

CHUNK_CHARS = 1000
MAX_CHUNKS_PER_FIELD = 12
_PREFIX = {"observation": "obs", "summary": "summary", "prompt": "prompt", "manual": "manual"}
_KIND_OF_PREFIX = {v: k for k, v in _PREFIX.items()}
_DOC_ID = re.compile(r"^(obs|summary|prompt|manual)_(\d+)(?:_|$)")


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    metadata: dict[str, Any]


def chunk_text(text: str, size: int = CHUNK_CHARS, limit: int = MAX_CHUNKS_PER_FIELD) -> list[str]:
    """Split on whitespace into pieces of at most ``size`` characters (at most ``limit`` pieces)."""
    text = " ".join(text.split())
    if len(text) <= size:
        return [text] if text else []
    pieces: list[str] = []
    start = 0
    while start < len(text) and len(pieces) < limit:
        end = min(len(text), start + size)
        if end < len(text):
            cut = text.rfind(" ", start + size // 2, end)
            end = cut if cut > start else end
        pieces.append(text[start:end].strip())
        start = end
    return [p for p in pieces if p]


def parse_doc_id(doc_id: str) -> tuple[str, int] | None:
    """(kind, sqlite id) named by a document id, or None for an id that is not ours."""
    match = _DOC_ID.match(doc_id)
    if not match:
        return None
    return _KIND_OF_PREFIX[match.group(1)], int(match.group(2))


def _fields(item: MemoryItem) -> list[tuple[str, str]]:
    title = (item.title or "").strip()
    with_title = (lambda body: f"{title}. {body}" if title and body else body or title)  # noqa: E731
    if item.kind == "summary":
        return [(s, with_title(getattr(item, s) or "")) for s in SUMMARY_SECTIONS if getattr(item, s)]
    if item.kind == "prompt":
        return [("", item.text or title)]
    fields: list[tuple[str, str]] = []
    if item.narrative:
        fields.append(("narrative", with_title(item.narrative)))
    if item.text:
        fields.append(("text", item.text if item.narrative else with_title(item.text)))
    # A bare fact ("busy_timeout 30000") embeds close to anything; its title gives it a subject.
    fields += [(f"fact_{i}", with_title(fact)) for i, fact in enumerate(item.facts)]
    if not fields and title:
        fields.append(("title", " ".join(x for x in (title, item.subtitle or "") if x)))
    return fields


def documents_for(item: MemoryItem) -> list[Document]:
    prefix = f"{_PREFIX[item.kind]}_{item.id}"
    base = {
        "sqlite_id": item.id,
        "kind": item.kind,
        "type": item.type,
        "project": item.project,
        "merged_into_project": item.merged_into_project or "",
        "platform_source": item.platform_source or "",
        "created_at_epoch": item.created_at_epoch,
        "title": (item.title or "")[:200],
    }
    docs: list[Document] = []
    for field, text in _fields(item):
        for n, piece in enumerate(chunk_text(text)):
            doc_id = prefix + (f"_{field}" if field else "") + (f"_c{n}" if n else "")
            docs.append(Document(doc_id, piece, {**base, "field": field or "prompt"}))
    return docs
