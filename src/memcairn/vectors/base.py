"""Protocols for the semantic mirror.

A `VectorIndex` stores and queries vectors and nothing else: it never runs SQL against the store and
never calls an embedding model. The sync layer (``memcairn.sync``) decides what goes in; the search
layer decides what a hit means. Indexes are partitioned by project so the hot query path needs no
slow metadata filter: a query names its projects and gets only their documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from memcairn.core.errors import VectorIndexUnavailableError


@dataclass(frozen=True)
class VectorRecord:
    """One document of the mirror: one searchable field of one SQLite row.

    ``id`` follows the naming scheme ``obs_<id>_narrative``, ``summary_<id>_learned``, ``prompt_<id>``,
    ``manual_<id>_text`` ...; ``metadata`` carries at least ``sqlite_id``, ``kind`` and ``project``.
    """

    id: str
    project: str
    vector: Sequence[float]
    document: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorMatch:
    id: str
    distance: float  # cosine distance: 0 = identical, 2 = opposite
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class VectorIndex(Protocol):
    """A vector store partitioned by project. Upserts are idempotent, keyed by record id."""

    name: str
    dimension: int

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        """Insert or replace every record; raise if any record could not be written."""
        ...

    def delete(self, ids: Sequence[str], *, project: str | None = None) -> None:
        """Remove these document ids (missing ids are ignored)."""
        ...

    def delete_where_sqlite_ids(self, sqlite_ids: Sequence[int], *, project: str | None = None) -> None:
        """Remove every document whose metadata ``sqlite_id`` is one of these."""
        ...

    def query(self, vector: Sequence[float], *, projects: Sequence[str] | None, limit: int,
              metadata: bool = True) -> list[VectorMatch]:
        """Nearest documents across the given projects (all projects when None), best first.

        ``metadata=False``: the matches may come without their metadata (a search needs ids and distances
        only, and reading the metadata of hundreds of documents is a noticeable part of a query)."""
        ...

    def max_sqlite_id(self, project: str, kind: str) -> int:
        """Highest ``sqlite_id`` stored for (project, kind); 0 when none. Used to bootstrap a watermark."""
        ...

    def count(self, project: str | None = None) -> int:
        ...

    def projects(self) -> list[str]:
        ...

    def reset(self) -> None:
        """Drop everything (used by rebuild)."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class Embedder(Protocol):
    """Turns text into unit-length vectors. Loaded once per process (the worker), never in a hook."""

    model_id: str
    dimension: int

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        ...

    def embed_query(self, text: str) -> list[float]:
        ...


def model_mismatch(where: str, stored: str, model: str) -> VectorIndexUnavailableError:
    """The error for an index whose vectors come from another embedding model than the configured one."""
    return VectorIndexUnavailableError(
        f"{where} holds vectors of the embedding model {stored!r}, not of {model!r} (the embedding_model "
        "setting): they do not compare; `memcairn sync rebuild` re-embeds every memory with the new model"
    )
