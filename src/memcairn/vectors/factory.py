"""Pick and open a vector index backend by name."""

from __future__ import annotations

import shutil
from pathlib import Path

from memcairn.errors import ConfigError
from memcairn.vectors.base import VectorIndex

BACKENDS = ("sqlite-vec", "chroma", "memory")

SQLITE_VEC_FILE = "vectors.sqlite"
CHROMA_DIR = "chroma"


def _normalise(backend: str) -> str:
    name = str(backend).strip().lower().replace("_", "-")
    if name not in BACKENDS:
        raise ConfigError(f"unknown vector backend {backend!r}; valid names: {', '.join(BACKENDS)}")
    return name


def open_index(backend: str, *, home: Path, dimension: int, chroma_url: str | None = None) -> VectorIndex:
    """Open the mirror: ``sqlite-vec`` (``home/vectors.sqlite``), ``chroma`` (``home/chroma``, or the
    server at ``chroma_url``) or ``memory`` (nothing persists)."""
    name = _normalise(backend)
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
        raise ConfigError(f"vector dimension must be a positive integer, got {dimension!r}")
    if name == "memory":
        from memcairn.vectors.memory import InMemoryIndex

        return InMemoryIndex(dimension)
    if name == "sqlite-vec":
        from memcairn.vectors.sqlite_vec import SqliteVecIndex

        return SqliteVecIndex(Path(home) / SQLITE_VEC_FILE, dimension)
    from memcairn.vectors.chroma import ChromaIndex

    if chroma_url:
        return ChromaIndex(dimension, url=chroma_url)
    return ChromaIndex(dimension, path=Path(home) / CHROMA_DIR)


def destroy_index(backend: str, *, home: Path, chroma_url: str | None = None) -> None:
    """Throw the mirror away even when it cannot be opened (corrupt file, other dimension), so a
    rebuild can start from nothing. Touches nothing but the mirror: the SQLite store stays."""
    name = _normalise(backend)
    if name == "sqlite-vec":
        from memcairn.vectors.sqlite_vec import remove_files

        remove_files(Path(home) / SQLITE_VEC_FILE)
    elif name == "chroma":
        if chroma_url:
            from memcairn.vectors.chroma import ChromaIndex

            index = ChromaIndex(1, url=chroma_url, verify_dimension=False)
            try:
                index.reset()
            finally:
                index.close()
        else:
            shutil.rmtree(Path(home) / CHROMA_DIR, ignore_errors=True)
