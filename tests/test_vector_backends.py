"""The vector index backends behave alike: memory, sqlite-vec, Chroma embedded and a real Chroma server."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from chroma_server import ChromaServer, chroma_executable, chroma_server

from memcairn.core.errors import ConfigError, EmbeddingError, ValidationError, VectorIndexUnavailableError
from memcairn.vectors.base import VectorIndex, VectorRecord
from memcairn.vectors.factory import BACKENDS, destroy_index, open_index

DIM = 16
KINDS = ["memory", "sqlite-vec", "chroma-embedded", "chroma-server"]
PERSISTENT = {"sqlite-vec", "chroma-embedded", "chroma-server"}


# ----------------------------------------------------------------------------- helpers


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def cosine_distance(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(1.0 - a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def rec(
    doc_id: str,
    vec: np.ndarray,
    *,
    project: str = "alpha",
    sqlite_id: int = 1,
    kind: str = "observation",
    document: str = "text",
    **extra: object,
) -> VectorRecord:
    meta = {"sqlite_id": sqlite_id, "kind": kind, "project": project, **extra}
    return VectorRecord(id=doc_id, project=project, vector=vec.tolist(), document=document, metadata=meta)


def fill(index: VectorIndex, vectors: np.ndarray, *, project: str = "alpha", prefix: str = "obs") -> list[str]:
    ids = [f"{prefix}_{i}_narrative" for i in range(len(vectors))]
    index.upsert([rec(ids[i], vectors[i], project=project, sqlite_id=i + 1) for i in range(len(vectors))])
    return ids


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def no_chroma_default_embedding(monkeypatch: pytest.MonkeyPatch):
    """Chroma's default embedding function (which downloads a model) must never run."""
    try:
        from chromadb.utils import embedding_functions as efs
        from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

        from memcairn.vectors.chroma import precomputed_only_class
    except ImportError:
        yield
        return
    hits: list[str] = []

    def refuse(name: str):
        def _refuse(self: object, input: object) -> None:  # the signature Chroma checks
            hits.append(name)
            raise AssertionError(f"Chroma's {name} was invoked")

        return _refuse

    def refuse_download(*args: object, **kwargs: object) -> None:
        hits.append("model download")
        raise AssertionError("Chroma tried to download its default model")

    monkeypatch.setattr(efs.DefaultEmbeddingFunction, "__call__", refuse("DefaultEmbeddingFunction"))
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "__call__", refuse("ONNXMiniLM_L6_V2"))
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "_download_model_if_not_exists", refuse_download)
    guard = precomputed_only_class()
    calls_before = guard.calls
    yield
    assert hits == []
    assert guard.calls == calls_before, "the precomputed-only guard was called by a backend operation"


class Opener:
    """Opens (and reopens) the index under test on the same storage; closes everything at the end."""

    def __init__(self, kind: str, home: Path, url: str | None) -> None:
        self.kind = kind
        self.home = home
        self.url = url
        self.opened: list[VectorIndex] = []

    @property
    def backend(self) -> str:
        return {"memory": "memory", "sqlite-vec": "sqlite-vec"}.get(self.kind, "chroma")

    def __call__(self, dimension: int = DIM, model: str | None = None) -> VectorIndex:
        index = open_index(self.backend, home=self.home, dimension=dimension, chroma_url=self.url, model=model)
        self.opened.append(index)
        return index

    def close_all(self) -> None:
        for index in self.opened:
            index.close()


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path):
    kind = request.param
    if kind.startswith("chroma"):
        pytest.importorskip("chromadb")
    url = request.getfixturevalue("chroma_url") if kind == "chroma-server" else None
    op = Opener(kind, tmp_path, url)
    if url:  # the server is shared by the module: start every test from an empty mirror
        destroy_index("chroma", home=tmp_path, chroma_url=url)
    yield op
    op.close_all()


@pytest.fixture
def index(opener: Opener) -> VectorIndex:
    return opener()


# ----------------------------------------------------------------------------- behaviour


def test_satisfies_protocol(index: VectorIndex) -> None:
    assert isinstance(index, VectorIndex)
    assert index.dimension == DIM
    assert index.name in BACKENDS


def test_query_returns_nearest_first_with_cosine_distance(index: VectorIndex) -> None:
    rng = np.random.default_rng(1)
    vectors = unit(rng, 30)
    ids = fill(index, vectors)
    target = vectors[7] + 0.05 * unit(rng, 1)[0]

    matches = index.query(target.tolist(), projects=["alpha"], limit=5)

    expected = sorted(range(30), key=lambda i: cosine_distance(target, vectors[i]))[:5]
    assert [m.id for m in matches] == [ids[i] for i in expected]
    assert matches[0].id == ids[7]
    for match, i in zip(matches, expected, strict=True):
        assert match.distance == pytest.approx(cosine_distance(target, vectors[i]), abs=1e-4)
    assert [m.distance for m in matches] == sorted(m.distance for m in matches)
    assert matches[0].metadata["sqlite_id"] == 8
    assert matches[0].metadata["kind"] == "observation"
    assert matches[0].metadata["project"] == "alpha"


def test_identical_and_opposite_vectors(index: VectorIndex) -> None:
    v = unit(np.random.default_rng(2), 1)[0]
    index.upsert([rec("same", v), rec("opposite", -v, sqlite_id=2)])
    matches = index.query((3.0 * v).tolist(), projects=["alpha"], limit=10)  # scale does not matter
    assert [m.id for m in matches] == ["same", "opposite"]
    assert matches[0].distance == pytest.approx(0.0, abs=1e-4)
    assert matches[1].distance == pytest.approx(2.0, abs=1e-4)


def test_metadata_roundtrip_drops_none(index: VectorIndex) -> None:
    v = unit(np.random.default_rng(3), 1)[0]
    index.upsert([rec("m", v, sqlite_id=5, flag=True, score=0.25, files=None, tag="x")])
    (match,) = index.query(v.tolist(), projects=["alpha"], limit=1)
    assert match.metadata == {
        "sqlite_id": 5,
        "kind": "observation",
        "project": "alpha",
        "flag": True,
        "score": 0.25,
        "tag": "x",
    }
    assert isinstance(match.metadata["sqlite_id"], int)


def test_query_without_metadata_keeps_ids_and_distances(index: VectorIndex) -> None:
    vectors = unit(np.random.default_rng(33), 12)
    fill(index, vectors)
    fill(index, vectors[:4], project="beta", prefix="beta")
    for projects in (["alpha"], None):
        full = index.query(vectors[2].tolist(), projects=projects, limit=6)
        bare = index.query(vectors[2].tolist(), projects=projects, limit=6, metadata=False)
        assert [(m.id, m.distance) for m in bare] == [(m.id, m.distance) for m in full]
        assert all(m.metadata for m in full) and not any(m.metadata for m in bare)


def test_limit_bounds(index: VectorIndex) -> None:
    vectors = unit(np.random.default_rng(4), 4)
    fill(index, vectors)
    assert index.query(vectors[0].tolist(), projects=["alpha"], limit=0) == []
    assert len(index.query(vectors[0].tolist(), projects=["alpha"], limit=50)) == 4
    assert index.query(vectors[0].tolist(), projects=[], limit=5) == []
    assert index.query(vectors[0].tolist(), projects=["nobody"], limit=5) == []


def test_upsert_is_idempotent_and_replaces(index: VectorIndex) -> None:
    rng = np.random.default_rng(5)
    old, new = unit(rng, 2)
    index.upsert([rec("obs_1_narrative", old, document="old")])
    index.upsert([rec("obs_1_narrative", old, document="old")])
    assert index.count() == 1

    index.upsert([rec("obs_1_narrative", new, document="new", version=2)])
    assert index.count() == 1
    (match,) = index.query(new.tolist(), projects=["alpha"], limit=5)
    assert match.id == "obs_1_narrative"
    assert match.distance == pytest.approx(0.0, abs=1e-4)
    assert match.metadata["version"] == 2


def test_duplicate_ids_in_one_batch_last_wins(index: VectorIndex) -> None:
    a, b = unit(np.random.default_rng(6), 2)
    index.upsert([rec("dup", a, version=1), rec("dup", b, version=2)])
    assert index.count() == 1
    (match,) = index.query(b.tolist(), projects=["alpha"], limit=3)
    assert match.metadata["version"] == 2
    assert match.distance == pytest.approx(0.0, abs=1e-4)


def test_delete_by_id(index: VectorIndex) -> None:
    vectors = unit(np.random.default_rng(7), 5)
    ids = fill(index, vectors)
    fill(index, vectors, project="beta")

    index.delete([ids[0], ids[1], "never_existed"], project="alpha")
    assert index.count("alpha") == 3
    assert index.count("beta") == 5
    assert ids[0] not in {m.id for m in index.query(vectors[0].tolist(), projects=["alpha"], limit=10)}

    index.delete([ids[2]])  # no project: every project
    assert index.count("alpha") == 2
    assert index.count("beta") == 4
    index.delete([])
    assert index.count() == 6


def test_delete_where_sqlite_ids(index: VectorIndex) -> None:
    vectors = unit(np.random.default_rng(8), 6)
    fill(index, vectors)  # sqlite ids 1..6
    fill(index, vectors, project="beta")
    index.upsert([rec("summary_2_learned", vectors[0], sqlite_id=2, kind="summary")])

    index.delete_where_sqlite_ids([2, 3, 99], project="alpha")
    remaining = {m.id for m in index.query(vectors[0].tolist(), projects=["alpha"], limit=20)}
    assert remaining == {"obs_0_narrative", "obs_3_narrative", "obs_4_narrative", "obs_5_narrative"}
    assert index.count("beta") == 6

    index.delete_where_sqlite_ids([1])
    assert index.count("alpha") == 3
    assert index.count("beta") == 5
    index.delete_where_sqlite_ids([])
    assert index.count() == 8


def test_projects_partition_the_index(index: VectorIndex) -> None:
    rng = np.random.default_rng(9)
    a_vecs, b_vecs = unit(rng, 20), unit(rng, 20)
    a_ids = fill(index, a_vecs, project="alpha", prefix="a")
    b_ids = fill(index, b_vecs, project="beta", prefix="b")
    query = b_vecs[3]  # the best match overall lives in beta

    only_a = index.query(query.tolist(), projects=["alpha"], limit=10)
    assert len(only_a) == 10 and {m.id for m in only_a} <= set(a_ids)
    assert all(m.metadata["project"] == "alpha" for m in only_a)

    merged = index.query(query.tolist(), projects=["alpha", "beta"], limit=10)
    everything = [*zip(a_ids, a_vecs, strict=True), *zip(b_ids, b_vecs, strict=True)]
    expected = sorted(everything, key=lambda t: cosine_distance(query, t[1]))[:10]
    assert [m.id for m in merged] == [doc_id for doc_id, _ in expected]
    assert merged[0].id == b_ids[3]
    assert {m.metadata["project"] for m in merged} == {"alpha", "beta"}

    every_project = index.query(query.tolist(), projects=None, limit=10)
    assert [m.id for m in every_project] == [m.id for m in merged]
    assert index.query(query.tolist(), projects=["alpha", "alpha"], limit=10) == only_a


def test_same_id_in_two_projects_is_two_documents(index: VectorIndex) -> None:
    v = unit(np.random.default_rng(10), 1)[0]
    index.upsert([rec("obs_1_narrative", v, project="alpha"), rec("obs_1_narrative", v, project="beta")])
    assert index.count() == 2
    index.delete(["obs_1_narrative"], project="beta")
    assert index.count("alpha") == 1 and index.count("beta") == 0


def test_odd_project_names(index: VectorIndex) -> None:
    rng = np.random.default_rng(11)
    names = ["My Project!", "my-project", "/home/me/src/ünïcode repo", "a", "x" * 300]
    for i, name in enumerate(names):
        fill(index, unit(rng, 2), project=name, prefix=f"p{i}")
    assert sorted(index.projects()) == sorted(names)
    for name in names:
        assert index.count(name) == 2
        hits = index.query(unit(rng, 1)[0].tolist(), projects=[name], limit=5)
        assert {m.metadata["project"] for m in hits} == {name}


def test_max_sqlite_id_per_project_and_kind(index: VectorIndex) -> None:
    rng = np.random.default_rng(12)
    vecs = unit(rng, 6)
    index.upsert(
        [
            rec("obs_3_narrative", vecs[0], sqlite_id=3),
            rec("obs_41_narrative", vecs[1], sqlite_id=41),
            rec("obs_41_title", vecs[2], sqlite_id=41),
            rec("summary_7_learned", vecs[3], sqlite_id=7, kind="summary"),
            rec("obs_90_narrative", vecs[4], sqlite_id=90, project="beta"),
            rec("prompt_12", vecs[5], sqlite_id=12, kind="prompt"),
        ]
    )
    assert index.max_sqlite_id("alpha", "observation") == 41
    assert index.max_sqlite_id("alpha", "summary") == 7
    assert index.max_sqlite_id("alpha", "prompt") == 12
    assert index.max_sqlite_id("beta", "observation") == 90
    assert index.max_sqlite_id("beta", "summary") == 0
    assert index.max_sqlite_id("nobody", "observation") == 0


def test_count_projects_and_reset(index: VectorIndex) -> None:
    rng = np.random.default_rng(13)
    assert index.count() == 0 and index.projects() == []
    fill(index, unit(rng, 3), project="alpha")
    fill(index, unit(rng, 4), project="beta")
    assert index.count() == 7
    assert index.count("alpha") == 3
    assert index.count("nobody") == 0
    assert index.projects() == ["alpha", "beta"]

    index.reset()
    assert index.count() == 0
    assert index.projects() == []
    assert index.query(unit(rng, 1)[0].tolist(), projects=None, limit=5) == []
    fill(index, unit(rng, 2), project="gamma")  # usable after a reset
    assert index.count() == 2 and index.projects() == ["gamma"]


def test_persistence_across_reopen(opener: Opener) -> None:
    if opener.kind not in PERSISTENT:
        pytest.skip("nothing persists in memory")
    rng = np.random.default_rng(14)
    vectors = unit(rng, 10)
    first = opener()
    ids = fill(first, vectors, project="alpha")
    first.delete([ids[9]])
    first.close()

    second = opener()
    assert second.count() == 9
    assert second.projects() == ["alpha"]
    assert second.query(vectors[4].tolist(), projects=["alpha"], limit=1)[0].id == ids[4]
    assert second.max_sqlite_id("alpha", "observation") == 9
    second.upsert([rec(ids[0], vectors[1])])
    assert second.count() == 9


def test_dimension_mismatch_is_rejected(opener: Opener) -> None:
    index = opener()
    rng = np.random.default_rng(15)
    with pytest.raises(ValidationError, match="dimension 8 .* 16-d"):
        index.upsert([rec("short", unit(rng, 1, dim=8)[0])])
    with pytest.raises(ValidationError, match="dimension"):
        index.query(unit(rng, 1, dim=32)[0].tolist(), projects=None, limit=3)
    with pytest.raises(ValidationError, match="all zeros"):
        index.upsert([rec("zero", np.zeros(DIM, dtype=np.float32))])
    assert index.count() == 0

    if opener.kind in PERSISTENT:
        fill(index, unit(rng, 2))
        index.close()
        with pytest.raises(VectorIndexUnavailableError, match=r"16-d.*32-d.*memcairn sync rebuild"):
            opener(dimension=32)
        destroy_index(opener.backend, home=opener.home, chroma_url=opener.url)
        fresh = opener(dimension=32)
        assert fresh.count() == 0
        fill(fresh, unit(rng, 2, dim=32))
        assert fresh.count() == 2


def test_vectors_of_another_model_of_the_same_dimension_are_refused(opener: Opener) -> None:
    """Two models' vectors do not compare even when their dimensions agree: the index records its model and
    refuses to serve another one; one written before models were recorded takes the first model named."""
    if opener.kind not in PERSISTENT:
        pytest.skip("nothing persists")
    rng = np.random.default_rng(17)
    legacy = opener()  # no model named: as written by an older memcairn
    fill(legacy, unit(rng, 2))
    legacy.close()
    adopted = opener(model="model-a")
    assert adopted.count() == 2
    fill(adopted, unit(rng, 2), project="other")  # a partition made now records the model itself
    adopted.close()
    with pytest.raises(VectorIndexUnavailableError, match=r"'model-a'.*'model-b'.*memcairn sync rebuild"):
        opener(model="model-b").count()
    same = opener(model="model-a")
    assert same.count() == 4
    same.close()
    destroy_index(opener.backend, home=opener.home, chroma_url=opener.url)
    fresh = opener(model="model-b")
    fill(fresh, unit(rng, 2))
    assert fresh.count() == 2


def test_bad_records_are_rejected_before_writing(index: VectorIndex) -> None:
    v = unit(np.random.default_rng(16), 2)
    with pytest.raises(ValidationError):
        index.upsert([rec("good", v[0]), rec("", v[1])])
    with pytest.raises(ValidationError, match="sqlite_id"):
        index.upsert([rec("bad_sid", v[0], sqlite_id="abc")])  # type: ignore[arg-type]
    assert index.count() == 0


def test_concurrent_writers_and_readers(index: VectorIndex) -> None:
    rng = np.random.default_rng(17)
    vectors = unit(rng, 200)
    errors: list[BaseException] = []

    def writer(part: int) -> None:
        try:
            for start in range(part * 50, part * 50 + 50, 10):
                index.upsert(
                    [rec(f"w_{i}", vectors[i], project=f"p{part}", sqlite_id=i) for i in range(start, start + 10)]
                )
                index.query(vectors[start].tolist(), projects=[f"p{part}"], limit=5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert index.count() == 200
    assert index.max_sqlite_id("p3", "observation") == 199


# ----------------------------------------------------------------------------- backend specifics


def test_unknown_backend_lists_valid_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sqlite-vec, chroma, memory"):
        open_index("faiss", home=tmp_path, dimension=DIM)
    with pytest.raises(ConfigError):
        open_index("memory", home=tmp_path, dimension=0)


def test_corrupt_sqlite_vec_file_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite"
    path.write_bytes(b"this is not a database, just some bytes " * 200)
    with pytest.raises(VectorIndexUnavailableError) as info:
        open_index("sqlite-vec", home=tmp_path, dimension=DIM)
    assert str(path) in str(info.value)
    assert "memcairn sync rebuild" in str(info.value)

    destroy_index("sqlite-vec", home=tmp_path)
    index = open_index("sqlite-vec", home=tmp_path, dimension=DIM)
    fill(index, unit(np.random.default_rng(18), 3))
    assert index.count() == 3
    index.close()
    with pytest.raises(VectorIndexUnavailableError, match="closed"):
        index.count()



def test_sqlite_vec_follows_a_file_replaced_by_another_process(tmp_path: Path) -> None:
    """A rebuild in another process (the CLI beside a running worker) deletes the file and writes a new one;
    the long-lived index answers from, and writes to, the new file from its next call."""
    rng = np.random.default_rng(31)
    old_vectors, new_vectors = unit(rng, 2), unit(rng, 3)
    worker = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m1")
    fill(worker, old_vectors, prefix="old")

    (tmp_path / "vectors.sqlite").unlink()  # removed by hand: the open file still answers
    assert worker.count() == 2

    destroy_index("sqlite-vec", home=tmp_path)
    rebuilt = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m1")
    fill(rebuilt, new_vectors, prefix="new")
    rebuilt.close()

    assert worker.count() == 3
    best = worker.query(new_vectors[1].tolist(), projects=None, limit=1)
    assert best[0].id == "new_1_narrative"
    fill(worker, unit(rng, 1), prefix="late")
    again = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m1")
    assert again.count() == 4  # the worker wrote into the new file, not the deleted one
    again.close()

    destroy_index("sqlite-vec", home=tmp_path)  # replaced by an index of another model: refused, then usable
    other = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m2")
    other.close()
    with pytest.raises(VectorIndexUnavailableError, match="m2"):
        worker.count()
    destroy_index("sqlite-vec", home=tmp_path)
    assert worker.count() == 0  # the failed reopen is retried, here on a file of its own model
    worker.close()
    with pytest.raises(VectorIndexUnavailableError, match="closed"):
        worker.count()

def test_sqlite_vec_reopen_keeps_the_identity_of_the_file_it_opened(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A file replaced again while the index sets up the one it just opened (it waits on the other process's
    locks there, up to the busy timeout): the index must not take the newer file's identity for its own, or it
    stays on a deleted file for good."""
    from memcairn.vectors.sqlite_vec import SqliteVecIndex

    rng = np.random.default_rng(37)
    worker = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m1")
    fill(worker, unit(rng, 2), prefix="old")
    destroy_index("sqlite-vec", home=tmp_path)
    first = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m1")
    fill(first, unit(rng, 3), prefix="first")
    first.close()

    setup = SqliteVecIndex._setup
    replaced: list[int] = []

    def setup_then_replace(self: SqliteVecIndex, conn: object) -> None:
        setup(self, conn)
        if self is worker and not replaced:  # another rebuild lands while the worker sets up the first one
            replaced.append(1)
            destroy_index("sqlite-vec", home=tmp_path)
            second = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m1")
            fill(second, unit(rng, 4), prefix="second")
            second.close()

    monkeypatch.setattr(SqliteVecIndex, "_setup", setup_then_replace)
    assert worker.count() == 3  # the file it opened
    assert replaced and worker.count() == 4  # and the next call follows the newer one
    fill(worker, unit(rng, 1), prefix="late")
    worker.close()
    again = open_index("sqlite-vec", home=tmp_path, dimension=DIM, model="m1")
    assert again.count() == 5
    again.close()


def test_sqlite_vec_file_layout(tmp_path: Path) -> None:
    import apsw

    index = open_index("sqlite-vec", home=tmp_path, dimension=DIM)
    fill(index, unit(np.random.default_rng(19), 3))
    index.close()
    conn = apsw.Connection(str(tmp_path / "vectors.sqlite"))
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT max(sqlite_id) FROM mc_docs WHERE project = 'alpha' AND kind = 'x'"
            )
        )
        assert "mc_docs_bootstrap" in plan
    finally:
        conn.close()


def test_a_chroma_server_down_when_the_index_opens_is_reached_once_it_is_up(tmp_path: Path) -> None:
    pytest.importorskip("chromadb")
    if chroma_executable() is None:
        pytest.skip("the chroma command is not installed")
    server = ChromaServer(tmp_path / "data")
    index = open_index("chroma", home=tmp_path, dimension=DIM, chroma_url=server.url)  # down: not fatal yet
    vectors = unit(np.random.default_rng(22), 3)
    try:
        with pytest.raises(VectorIndexUnavailableError, match="127.0.0.1.*is a Chroma server running"):
            index.connect()  # type: ignore[attr-defined]
        with pytest.raises(VectorIndexUnavailableError, match=server.url):
            index.query(vectors[0].tolist(), projects=["alpha"], limit=1)
        server.start()
        ids = fill(index, vectors)
        assert index.query(vectors[1].tolist(), projects=["alpha"], limit=1)[0].id == ids[1]
    finally:
        index.close()
        server.stop()


def test_two_stores_sharing_a_chroma_server_keep_their_vectors_apart(chroma_url: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(23)
    mine, theirs = unit(rng, 4), unit(rng, 4)
    a = open_index("chroma", home=tmp_path / "a", dimension=DIM, chroma_url=chroma_url)
    b = open_index("chroma", home=tmp_path / "b", dimension=DIM, chroma_url=chroma_url)
    try:
        ids = fill(a, mine)
        assert fill(b, theirs[:2]) == ids[:2]  # the same document ids: each store numbers its own rows
        assert a.count("alpha") == 4 and b.count("alpha") == 2
        assert a.max_sqlite_id("alpha", "observation") == 4 and b.max_sqlite_id("alpha", "observation") == 2
        best = a.query(mine[0].tolist(), projects=["alpha"], limit=1)[0]
        assert best.id == ids[0] and best.distance < 1e-4  # still A's vector, not B's
        destroy_index("chroma", home=tmp_path / "b", chroma_url=chroma_url)  # B rebuilds: A keeps its mirror
        assert a.count() == 4 and b.count() == 0
    finally:
        a.close()
        b.close()
        destroy_index("chroma", home=tmp_path / "a", chroma_url=chroma_url)


@pytest.mark.parametrize(("status", "content_type", "body", "hint"), [
    (404, "text/html", "<!DOCTYPE HTML>\n<html>\n<body>\n<h1>Error response</h1>\n</body>\n</html>\n",
     "HTML page.*is chroma_url right"),
    (401, "application/json", '{"error": "AuthError", "message": "Unauthorized"}',
     "CHROMA_CLIENT_AUTH_CREDENTIALS"),
])
def test_a_chroma_url_that_is_not_chroma_or_wants_credentials_says_so_in_one_line(
        tmp_path: Path, status: int, content_type: str, body: str, hint: str) -> None:
    pytest.importorskip("chromadb")
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Answer(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    index = open_index("chroma", home=tmp_path, dimension=DIM, chroma_url=f"http://127.0.0.1:{server.server_port}")
    try:
        with pytest.raises(VectorIndexUnavailableError, match=hint) as caught:
            index.connect()  # type: ignore[attr-defined]
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
    finally:
        index.close()
        server.shutdown()
        server.server_close()


def test_chroma_server_crash_and_restart(tmp_path: Path) -> None:
    pytest.importorskip("chromadb")
    if chroma_executable() is None:
        pytest.skip("the chroma command is not installed")
    vectors = unit(np.random.default_rng(20), 5)
    with chroma_server(tmp_path / "data") as server:
        index = open_index("chroma", home=tmp_path, dimension=DIM, chroma_url=server.url)
        try:
            ids = fill(index, vectors)
            server.kill()
            with pytest.raises(VectorIndexUnavailableError, match=server.url):
                index.query(vectors[0].tolist(), projects=["alpha"], limit=3)
            with pytest.raises(VectorIndexUnavailableError):
                fill(index, vectors, project="beta")
            server.start()
            assert index.query(vectors[0].tolist(), projects=["alpha"], limit=1)[0].id == ids[0]
            assert index.count() == 5
        finally:
            index.close()


def test_chroma_bad_url_is_a_config_error(tmp_path: Path) -> None:
    pytest.importorskip("chromadb")
    with pytest.raises(ConfigError, match="http"):
        open_index("chroma", home=tmp_path, dimension=DIM, chroma_url="127.0.0.1:8000")


def test_chroma_never_embeds_text_itself(tmp_path: Path) -> None:
    chromadb = pytest.importorskip("chromadb")
    from chromadb.config import Settings

    from memcairn.vectors.chroma import collection_name, precomputed_only_class

    index = open_index("chroma", home=tmp_path, dimension=DIM)
    fill(index, unit(np.random.default_rng(21), 3))
    guard = precomputed_only_class()
    with pytest.raises(EmbeddingError, match="always passes embeddings"):
        index.embedding_function(["some text"])  # type: ignore[attr-defined]
    guard.calls -= 1  # that call was ours, not a backend operation's

    # Even a client that forgets to pass an embedding function gets the guard back from the stored
    # collection configuration, never Chroma's downloading default.
    client = chromadb.PersistentClient(
        path=str(tmp_path / "chroma"), settings=Settings(anonymized_telemetry=False, allow_reset=True)
    )
    try:
        collection = client.get_collection(collection_name("alpha"))
        with pytest.raises(EmbeddingError):
            collection.query(query_texts=["what did we decide"], n_results=1)
        guard.calls -= 1
        assert collection.configuration_json["embedding_function"]["name"] == "memcairn-precomputed-only"
        assert collection.configuration_json["hnsw"]["space"] == "cosine"
    finally:
        client.close()
        index.close()


def test_chroma_collection_names_are_valid_and_distinct() -> None:
    from memcairn.vectors.chroma import collection_name

    names = {collection_name(p) for p in ["My Project", "my-project", "my_project", "", "é", "x" * 500]}
    assert len(names) == 6
    for name in names:
        assert 3 <= len(name) <= 63
        assert name[0].isalnum() and name[-1].isalnum()
        assert all(c.isalnum() or c in "_-" for c in name)
        assert ".." not in name
