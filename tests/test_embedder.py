"""The bundled embedding model, the hash fake, the embedding cache and the embedding benchmark."""

from __future__ import annotations

import math
import shutil
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from memcairn.core.errors import ConfigError, EmbeddingError
from memcairn.vectors.base import Embedder
from memcairn.vectors.embedder import (
    DEFAULT_MODEL,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    default_model_dir,
    load_embedder,
)
from memcairn.vectors.embedding_cache import EmbeddingCache
from memcairn.vectors.fake import HashEmbedder


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(a: Sequence[float]) -> float:
    return math.sqrt(dot(a, a))


class CountingEmbedder:
    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.seen: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.seen.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.seen.append(text)
        return self.inner.embed_query(text)


@pytest.fixture(scope="module")
def model() -> OnnxEmbedder:
    return OnnxEmbedder(threads=2).load()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError("network access attempted in an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_the_bundled_model_loads_and_embeds_with_the_network_disabled(no_network: None) -> None:
    embedder = OnnxEmbedder(threads=1)
    assert not embedder.loaded  # lazy: nothing is read until the first use
    vectors = embedder.embed_documents(["the worker crashed on startup", "added a retry"])
    assert embedder.loaded
    assert embedder.model_id == DEFAULT_MODEL and embedder.dimension == 384
    assert isinstance(embedder, Embedder)
    assert len(vectors) == 2 and all(len(v) == 384 for v in vectors)


def test_vectors_are_384_dimensional_unit_length_floats(model: OnnxEmbedder) -> None:
    texts = ["fixed the login bug", "x" * 5000, "数据库连接超时", "🚀"]
    for vec in [*model.embed_documents(texts), model.embed_query("search the memory")]:
        assert len(vec) == 384
        assert all(isinstance(x, float) for x in vec)
        assert abs(norm(vec) - 1.0) < 1e-6


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(model: OnnxEmbedder) -> None:
    bug, fix, bread = model.embed_documents(
        ["fixed the login bug", "repaired authentication failure", "banana bread recipe"]
    )
    assert dot(bug, fix) > dot(bug, bread) + 0.2
    assert dot(fix, bug) > dot(fix, bread) + 0.2


@pytest.mark.slow
def test_the_8_bit_kernels_stay_within_a_cosine_of_0_998_of_the_float32_weights(model: OnnxEmbedder) -> None:
    """The session multiplies in int8 (MatMulNBits); the same file with its weights unfolded to float32 is the
    reference the model's README verified against PyTorch."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.disable_quant_qdq", "1")
    opts.log_severity_level = 3
    reference = ort.InferenceSession(str(model.model_dir / "model.onnx"), sess_options=opts,
                                     providers=["CPUExecutionProvider"])
    texts = ["ok", "fix", "busy_timeout 30000", "Le chat dort sur le canapé.", "数据库连接池的配置", "🎉 shipped!",
             "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\nKeyError: 'port'",
             "def double(x: int) -> int:\n    return 2 * x", "how does the importer handle connection pooling",
             "The worker drains in-flight writes before it stops, so no hook event is lost. " * 12]
    got = model.embed_documents(texts)
    for text, vec in zip(texts, got, strict=True):
        enc = model._tokenizer.encode(text[:2000])
        ids = np.array([enc.ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        want = reference.run(None, feed)[0][0]
        assert dot(vec, want.tolist()) >= 0.998, text


def test_outputs_come_back_in_input_order_for_mixed_lengths(model: OnnxEmbedder) -> None:
    texts = [
        "a long note " * 80,
        "ok",
        "",
        "Refactored the SQLite migration to run inside one transaction.",
        "b",
        "medium length text about the vector index and the search ranking",
    ]
    small_batches = OnnxEmbedder(threads=1, batch_size=2, max_batch_tokens=300)  # 4 batches, padded differently
    assert [len(b) for b in small_batches._batches([4, 2, 1, 5, 3, 0], [300, 3, 2, 14, 1, 11])] == [2, 2, 1, 1]
    together = small_batches.embed_documents(texts)
    for text, vec in zip(texts, together, strict=True):
        assert dot(vec, model.embed_query(text)) > 0.9999


def test_empty_inputs_are_handled(model: OnnxEmbedder) -> None:
    assert model.embed_documents([]) == []
    empty = model.embed_query("")
    assert len(empty) == 384 and abs(norm(empty) - 1.0) < 1e-6
    with pytest.raises(TypeError):
        model.embed_documents("not a list")  # type: ignore[arg-type]


def test_a_corrupted_model_file_raises_embedding_error_naming_the_file(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(default_model_dir(), model_dir)
    with (model_dir / "model.onnx").open("r+b") as fh:
        fh.seek(1_000_000)
        byte = fh.read(1)
        fh.seek(1_000_000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    embedder = OnnxEmbedder(model_dir)
    with pytest.raises(EmbeddingError, match="reinstall") as info:
        embedder.embed_query("hello")
    assert str(model_dir / "model.onnx") in str(info.value)
    assert not embedder.loaded


def test_a_missing_model_file_raises_embedding_error(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(default_model_dir(), model_dir)
    (model_dir / "tokenizer.json").unlink()
    with pytest.raises(EmbeddingError, match="tokenizer.json is missing"):
        OnnxEmbedder(model_dir).load()
    (model_dir / "SHA256SUMS").unlink()
    with pytest.raises(EmbeddingError, match="SHA256SUMS"):
        OnnxEmbedder(model_dir).load()


def test_the_cache_embeds_each_distinct_text_once(tmp_path: Path) -> None:
    counting = CountingEmbedder(HashEmbedder())
    with EmbeddingCache(counting, tmp_path / "cache.db") as cache:
        first = cache.embed_documents(["alpha", "beta", "alpha"])
        second = cache.embed_documents(["beta", "gamma", "alpha"])
        assert counting.seen == ["alpha", "beta", "gamma"]
        assert first[0] == first[2] == second[2] and first[1] == second[0]
        assert cache.model_id == "hash-384" and cache.dimension == 384 and cache.count() == 3
    reopened_inner = CountingEmbedder(HashEmbedder())
    with EmbeddingCache(reopened_inner, tmp_path / "cache.db") as cache:
        again = cache.embed_documents(["gamma", "alpha"])
        assert reopened_inner.seen == []  # persisted: a re-run embeds nothing
        assert again[1] == first[0]
        assert all(abs(a - b) < 1e-6 for a, b in zip(again[0], HashEmbedder().embed_query("gamma"), strict=True))


def test_the_cache_keys_vectors_by_model(tmp_path: Path) -> None:
    small = CountingEmbedder(HashEmbedder(dimension=16))
    with EmbeddingCache(CountingEmbedder(HashEmbedder()), tmp_path / "c.db") as cache:
        cache.embed_documents(["alpha"])
    with EmbeddingCache(small, tmp_path / "c.db") as cache:
        assert len(cache.embed_documents(["alpha"])[0]) == 16
    assert small.seen == ["alpha"]


def test_hash_embedder_is_deterministic_and_shares_words() -> None:
    a, b = HashEmbedder(), HashEmbedder()
    text = "Fixed the login bug in auth/service.py"
    assert a.embed_query(text) == b.embed_query(text) == a.embed_documents([text])[0]
    login, fixing, bread = a.embed_documents(["fixed the login bug", "fixing login bugs", "banana bread recipe"])
    assert dot(login, fixing) > dot(login, bread)
    for vec in (login, a.embed_query(""), a.embed_query("!!!")):
        assert len(vec) == 384 and abs(norm(vec) - 1.0) < 1e-9


def test_load_embedder_picks_models_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert isinstance(load_embedder("hash"), HashEmbedder)
    bundled = load_embedder(DEFAULT_MODEL, threads=1)
    assert isinstance(bundled, OnnxEmbedder) and bundled.threads == 1 and not bundled.loaded
    monkeypatch.setenv("MEMCAIRN_HOME", str(tmp_path))
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    assert isinstance(load_embedder(), HashEmbedder)
    with pytest.raises(ConfigError, match="unknown embedding model"):
        load_embedder("word2vec")


def test_a_sentence_transformers_model_without_the_package_asks_for_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # makes the import fail
    with pytest.raises(EmbeddingError, match=r"pip install 'memcairn\[st\]'"):
        load_embedder("sentence-transformers/all-mpnet-base-v2")
    with pytest.raises(EmbeddingError):
        SentenceTransformerEmbedder("sentence-transformers/all-mpnet-base-v2")


def test_the_embedding_benchmark_measures_a_model_and_renders_a_table() -> None:
    from memcairn.bench import embed as bench

    texts = bench.synthetic_texts(20)
    assert texts == bench.synthetic_texts(20) and len(set(texts)) == 20
    assert all(250 <= len(t) <= 350 for t in texts)
    rows = bench.run(["hash"], n_texts=16, batch=8, n_queries=5)
    assert rows[0]["model"] == "hash" and rows[0]["texts_per_s"] > 0 and rows[0]["rss_mb"] > 0
    table = bench.render_table([*rows, {"model": "broken", "error": "boom"}])
    assert "hash" in table and "query_p95_ms" in table and "broken: FAILED: boom" in table
