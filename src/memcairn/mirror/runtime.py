"""Composition: the store, the vector mirror and the embedding model, opened from settings.

The worker opens one runtime and keeps it; the CLI opens one per command. Nothing here holds logic of
its own beyond choosing and wiring the pieces.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from memcairn.core.errors import EmbeddingError, VectorIndexUnavailableError
from memcairn.store import Store
from memcairn.store.protocols import LocalStore, MirrorStore
from memcairn.wire.config import Settings

log = logging.getLogger("memcairn.runtime")


def index_key(cfg: Settings) -> str:
    """Names the mirror a watermark belongs to: the backend and, for a server, its URL."""
    if cfg.vector_backend == "chroma":
        return f"chroma:{cfg.chroma_url or 'embedded'}"
    return cfg.vector_backend


@dataclass
class Runtime:
    settings: Settings
    store: LocalStore
    mirror: Any = None  # MirrorSync, imported lazily (it pulls numpy and the backends)
    mirror_error: str | None = None
    _closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:  # closing must not raise on the way out
                pass
        self.store.close()


def open_embedder(cfg: Settings, threads: int | None = None):  # noqa: ANN201
    """The configured model; ``threads`` per call (None or 0: every core)."""
    from memcairn.vectors.embedder import load_embedder

    return load_embedder(cfg.embedding_model, threads=threads or None)


def open_mirror(cfg: Settings, store: MirrorStore, embedder: Any = None,  # noqa: ANN201
                embedding_threads: int | None = None):
    """The mirror for these settings, or None when disabled.

    Raises:
        VectorIndexUnavailableError: the index cannot be opened (corrupt file, server down, ...).
        EmbeddingError: the model cannot be loaded.
    """
    if cfg.vector_backend == "none":
        return None
    from memcairn.mirror.sync import MirrorSync
    from memcairn.vectors.factory import open_index

    embedder = embedder or open_embedder(cfg, embedding_threads)
    index = open_index(cfg.vector_backend, home=cfg.home, dimension=embedder.dimension,
                       chroma_url=cfg.chroma_url or None, model=embedder.model_id)
    return MirrorSync(store, index, embedder, index_key=index_key(cfg))


def open_runtime(cfg: Settings, *, with_mirror: bool = True, embedder: Any = None,
                 embedding_threads: int | None = None) -> Runtime:
    store = Store(cfg.db_path)
    runtime = Runtime(cfg, store)
    if with_mirror and cfg.vector_backend != "none":
        try:
            runtime.mirror = open_mirror(cfg, store, embedder, embedding_threads)
        except (VectorIndexUnavailableError, EmbeddingError) as exc:
            runtime.mirror_error = str(exc)
            log.warning("semantic mirror unavailable: %s", exc)
        if runtime.mirror is not None:
            runtime._closers.append(runtime.mirror.index.close)
    return runtime
