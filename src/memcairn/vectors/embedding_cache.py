"""A persistent cache in front of an embedder, so that no text is ever embedded twice by the same model.

Vectors are kept in a small SQLite file (WAL), keyed by (model id, sha256 of the text), as little-endian
float32 blobs. ``embed_documents`` sends only the distinct texts it has not seen to the wrapped embedder,
in one call. Document and query vectors are cached under different keys, because some models embed
queries differently. Used by the benchmarks and by anything that re-embeds the same corpus.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from memcairn.vectors.base import Embedder

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model_id TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dimension INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model_id, text_sha256)
) WITHOUT ROWID
"""
_LOOKUP_CHUNK = 500  # keys per SELECT, well under SQLite's bound-parameter limit


def text_key(text: str, *, query: bool = False) -> str:
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256((b"q\x00" if query else b"") + data).hexdigest()


class EmbeddingCache:
    """Wraps ``embedder``; itself an Embedder with the same ``model_id`` and ``dimension``.

    Thread-safe (one connection behind a lock). Close it, or use it as a context manager.
    """

    def __init__(self, embedder: Embedder, path: str | Path) -> None:
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.dimension = embedder.dimension
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.execute(_SCHEMA)

    def _lookup(self, keys: Sequence[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            sql = (
                f"SELECT text_sha256, dimension, vector FROM embeddings WHERE model_id = ? AND text_sha256 IN ({marks})"
            )
            rows = self._conn.execute(sql, (self.model_id, *chunk)).fetchall()
            for key, dimension, blob in rows:
                if dimension == self.dimension and len(blob) == 4 * dimension:
                    found[key] = np.frombuffer(blob, dtype="<f4").astype(np.float64).tolist()
        return found

    def _store(self, pairs: Sequence[tuple[str, Sequence[float]]]) -> None:
        rows = [(self.model_id, key, len(vec), np.asarray(vec, dtype="<f4").tobytes()) for key, vec in pairs]
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.executemany(
                "INSERT OR REPLACE INTO embeddings (model_id, text_sha256, dimension, vector) VALUES (?, ?, ?, ?)",
                rows,
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def _embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        keys = [text_key(t, query=query) for t in texts]
        with self._lock:
            found = self._lookup(list(dict.fromkeys(keys)))
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found and key not in missing:
                missing[key] = text
        if missing:
            todo = list(missing.values())
            vectors = [self.embedder.embed_query(todo[0])] if query else self.embedder.embed_documents(todo)
            if len(vectors) != len(todo):
                raise RuntimeError(f"{self.model_id} returned {len(vectors)} vectors for {len(todo)} texts")
            fresh = list(zip(missing, vectors, strict=True))
            with self._lock:
                self._store(fresh)
            # Return what a later cache hit would return (float32 precision), so results never depend on
            # whether a text was cached.
            for key, vec in fresh:
                found[key] = np.asarray(vec, dtype="<f4").astype(np.float64).tolist()
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        return [list(found[k]) for k in keys]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not one string")
        items = list(texts)
        return self._embed(items, query=False) if items else []

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], query=True)[0]

    def count(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT COUNT(*) FROM embeddings WHERE model_id = ?", (self.model_id,)).fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
