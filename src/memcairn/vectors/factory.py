"""Pick and open a vector index backend by name."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

from memcairn.core.errors import ConfigError
from memcairn.vectors.base import VectorIndex

BACKENDS = ("sqlite-vec", "chroma", "memory")

SQLITE_VEC_FILE = "vectors.sqlite"
CHROMA_DIR = "chroma"
CHROMA_STORE_ID_FILE = "chroma-store-id"
_STORE_ID = re.compile(r"^[0-9a-f]{32}$")


def normalise_backend(backend: str) -> str:
    """The canonical name of a vector backend setting (``sqlite_vec`` -> ``sqlite-vec``).

    Raises:
        ConfigError: no such backend.
    """
    name = str(backend).strip().lower().replace("_", "-")
    if name not in BACKENDS:
        raise ConfigError(f"unknown vector backend {backend!r}; valid names: {', '.join(BACKENDS)}")
    return name


def chroma_store_id(home: Path) -> str:
    """This store's name on a shared Chroma server, kept in ``home`` (made once, atomically)."""
    path = Path(home) / CHROMA_STORE_ID_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_text(uuid.uuid4().hex + "\n", encoding="utf-8")
            os.link(tmp, path)  # fails if another process made it first: theirs is kept
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    value = path.read_text(encoding="utf-8").strip()
    if not _STORE_ID.match(value):
        raise ConfigError(f"{path} does not hold a store id; delete it and run `memcairn sync rebuild`")
    return value


def open_index(backend: str, *, home: Path, dimension: int, chroma_url: str | None = None,
               model: str | None = None) -> VectorIndex:
    """Open the mirror: ``sqlite-vec`` (``home/vectors.sqlite``), ``chroma`` (``home/chroma``, or the
    server at ``chroma_url``) or ``memory`` (nothing persists).

    ``model`` names the embedding model the vectors come from: a persistent index records it and refuses
    to open for another one (`base.model_mismatch`), since vectors of two models do not compare, even of the
    same dimension."""
    name = normalise_backend(backend)
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
        raise ConfigError(f"vector dimension must be a positive integer, got {dimension!r}")
    if name == "memory":
        from memcairn.vectors.memory import InMemoryIndex

        return InMemoryIndex(dimension)
    if name == "sqlite-vec":
        from memcairn.vectors.sqlite_vec import SqliteVecIndex

        return SqliteVecIndex(Path(home) / SQLITE_VEC_FILE, dimension, model=model)
    from memcairn.vectors.chroma import ChromaIndex

    if chroma_url:
        return ChromaIndex(dimension, url=chroma_url, store_id=chroma_store_id(home), model=model)
    return ChromaIndex(dimension, path=Path(home) / CHROMA_DIR, model=model)


def destroy_index(backend: str, *, home: Path, chroma_url: str | None = None) -> None:
    """Throw the mirror away even when it cannot be opened (corrupt file, other dimension), so a
    rebuild can start from nothing. Touches nothing but the mirror: the SQLite store stays."""
    name = normalise_backend(backend)
    if name == "sqlite-vec":
        from memcairn.vectors.sqlite_vec_file import remove_files

        remove_files(Path(home) / SQLITE_VEC_FILE)
    elif name == "chroma":
        if chroma_url:
            from memcairn.vectors.chroma import ChromaIndex

            index = ChromaIndex(1, url=chroma_url, verify_dimension=False, store_id=chroma_store_id(home))
            try:
                index.reset()
            finally:
                index.close()
        else:
            shutil.rmtree(Path(home) / CHROMA_DIR, ignore_errors=True)

