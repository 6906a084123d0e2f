"""A brute-force, in-process vector index (numpy), for tests of the layers above the mirror.

It follows the same contract as the real backends (``sqlite_vec``, ``chroma``) so code tested against
it behaves the same against them:

* documents are keyed by ``(project, id)``: the same id upserted twice in a project is one document
  whose content is replaced; an id is not moved between projects by an upsert (delete it first,
  ``delete(ids)`` without a project reaches every project);
* distances are cosine distances (``1 - cos``, 0 = identical, 2 = opposite), best first, ties broken
  by id;
* metadata values are str/int/float/bool: ``None`` values are dropped, anything else is stringified;
  ``project`` is always set from the record and ``sqlite_id`` is stored as an int;
* vectors of the wrong length, non-finite or all-zero vectors are rejected with ``ValidationError``;
* ``projects()`` lists only projects that hold at least one document.

The small helpers at the top are shared by every backend so they validate and clean the same way.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from memcairn.core.errors import ValidationError
from memcairn.vectors.base import VectorMatch, VectorRecord

# ----------------------------------------------------------------------------- shared helpers


def check_dimension(dimension: int) -> int:
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
        raise ValidationError(f"vector dimension must be a positive integer, got {dimension!r}")
    return dimension


def as_vector(vector: Sequence[float], dimension: int, *, what: str = "vector") -> np.ndarray:
    """Return ``vector`` as a float32 array of ``dimension`` values, or raise ``ValidationError``."""
    try:
        arr = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} is not a sequence of numbers: {exc}") from exc
    if arr.ndim != 1 or arr.shape[0] != dimension:
        got = arr.shape[0] if arr.ndim == 1 else f"shape {arr.shape}"
        raise ValidationError(
            f"{what} has dimension {got} but this index holds {dimension}-d vectors; "
            "if the embedding model changed, run `memcairn sync rebuild`"
        )
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{what} contains NaN or infinite values")
    if not np.any(arr):
        raise ValidationError(f"{what} is all zeros: cosine distance is undefined for it")
    return arr


def clean_metadata(metadata: Mapping[str, Any], project: str) -> dict[str, Any]:
    """Metadata as every backend stores it: scalar values only, ``project`` set, ``sqlite_id`` an int."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if value is None:
            continue
        key = str(key)
        if isinstance(value, bool | int | str):
            out[key] = value
        elif isinstance(value, float):
            out[key] = value if math.isfinite(value) else str(value)
        elif isinstance(value, np.generic):
            out[key] = value.item()
        elif isinstance(value, list | tuple | dict):
            out[key] = json.dumps(value, default=str, sort_keys=True)
        else:
            out[key] = str(value)
    out["project"] = project
    if "sqlite_id" in out:
        sid = out["sqlite_id"]
        try:
            if isinstance(sid, bool) or (isinstance(sid, float) and not sid.is_integer()):
                raise ValueError
            out["sqlite_id"] = int(sid)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"metadata sqlite_id must be an integer, got {sid!r}") from exc
    return out


def check_record(record: VectorRecord, dimension: int) -> tuple[np.ndarray, dict[str, Any]]:
    if not isinstance(record.id, str) or not record.id:
        raise ValidationError(f"vector record id must be a non-empty string, got {record.id!r}")
    if not isinstance(record.project, str) or not record.project:
        raise ValidationError(f"vector record {record.id!r} has no project")
    vec = as_vector(record.vector, dimension, what=f"vector of record {record.id!r}")
    return vec, clean_metadata(record.metadata, record.project)


def last_wins(records: Iterable[VectorRecord]) -> list[VectorRecord]:
    """Drop earlier duplicates of a ``(project, id)`` within one batch, keeping the last one."""
    seen: dict[tuple[str, str], VectorRecord] = {}
    for record in records:
        key = (record.project, record.id)
        seen.pop(key, None)
        seen[key] = record
    return list(seen.values())


def merge_matches(matches: Iterable[VectorMatch], limit: int) -> list[VectorMatch]:
    """Best ``limit`` matches, smallest distance first, ties broken by id."""
    return sorted(matches, key=lambda m: (m.distance, m.id))[: max(limit, 0)]


# ----------------------------------------------------------------------------- the index


class InMemoryIndex:
    """A `VectorIndex` held in a dict of numpy arrays; nothing persists."""

    name = "memory"

    def __init__(self, dimension: int) -> None:
        self.dimension = check_dimension(dimension)
        self._lock = threading.RLock()
        # project -> id -> (unit vector, document, metadata)
        self._docs: dict[str, dict[str, tuple[np.ndarray, str, dict[str, Any]]]] = {}
        # project -> (ids, matrix of unit rows), rebuilt lazily after a change
        self._matrices: dict[str, tuple[list[str], np.ndarray]] = {}

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        prepared = []
        for record in last_wins(records):
            vec, meta = check_record(record, self.dimension)
            unit = vec.astype(np.float64) / float(np.linalg.norm(vec.astype(np.float64)))
            prepared.append((record, unit, meta))
        with self._lock:
            for record, unit, meta in prepared:
                self._docs.setdefault(record.project, {})[record.id] = (unit, str(record.document), meta)
                self._matrices.pop(record.project, None)

    def delete(self, ids: Sequence[str], *, project: str | None = None) -> None:
        wanted = set(ids)
        if not wanted:
            return
        with self._lock:
            for name in self._selected(project):
                docs = self._docs[name]
                for doc_id in wanted & docs.keys():
                    del docs[doc_id]
                    self._matrices.pop(name, None)
            self._drop_empty()

    def delete_where_sqlite_ids(self, sqlite_ids: Sequence[int], *, project: str | None = None) -> None:
        wanted = {int(s) for s in sqlite_ids}
        if not wanted:
            return
        with self._lock:
            for name in self._selected(project):
                docs = self._docs[name]
                doomed = [i for i, (_, _, meta) in docs.items() if meta.get("sqlite_id") in wanted]
                for doc_id in doomed:
                    del docs[doc_id]
                if doomed:
                    self._matrices.pop(name, None)
            self._drop_empty()

    def query(self, vector: Sequence[float], *, projects: Sequence[str] | None, limit: int,
              metadata: bool = True) -> list[VectorMatch]:
        q = as_vector(vector, self.dimension, what="query vector").astype(np.float64)
        q /= float(np.linalg.norm(q))
        if limit <= 0:
            return []
        matches: list[VectorMatch] = []
        with self._lock:
            names = list(self._docs) if projects is None else [p for p in dict.fromkeys(projects)]
            for name in names:
                if name not in self._docs:
                    continue
                ids, matrix = self._matrix(name)
                distances = np.clip(1.0 - matrix @ q, 0.0, 2.0)
                k = min(limit, len(ids))
                best = np.argpartition(distances, k - 1)[:k] if k < len(ids) else range(len(ids))
                docs = self._docs[name]
                for i in best:
                    meta = dict(docs[ids[i]][2]) if metadata else {}
                    matches.append(VectorMatch(id=ids[i], distance=float(distances[i]), metadata=meta))
        return merge_matches(matches, limit)

    def max_sqlite_id(self, project: str, kind: str) -> int:
        with self._lock:
            ids = [
                meta["sqlite_id"]
                for _, _, meta in self._docs.get(project, {}).values()
                if meta.get("kind") == kind and isinstance(meta.get("sqlite_id"), int)
            ]
        return max(ids, default=0)

    def count(self, project: str | None = None) -> int:
        with self._lock:
            if project is not None:
                return len(self._docs.get(project, {}))
            return sum(len(docs) for docs in self._docs.values())

    def projects(self) -> list[str]:
        with self._lock:
            return sorted(name for name, docs in self._docs.items() if docs)

    def reset(self) -> None:
        with self._lock:
            self._docs.clear()
            self._matrices.clear()

    def close(self) -> None:
        """Nothing to release; the contents stay until the object is dropped."""

    # -- internals

    def _selected(self, project: str | None) -> list[str]:
        if project is None:
            return list(self._docs)
        return [project] if project in self._docs else []

    def _drop_empty(self) -> None:
        for name in [n for n, docs in self._docs.items() if not docs]:
            del self._docs[name]
            self._matrices.pop(name, None)

    def _matrix(self, project: str) -> tuple[list[str], np.ndarray]:
        cached = self._matrices.get(project)
        if cached is None:
            docs = self._docs[project]
            ids = list(docs)
            matrix = np.stack([docs[i][0] for i in ids]) if ids else np.zeros((0, self.dimension))
            cached = self._matrices[project] = (ids, matrix)
        return cached
