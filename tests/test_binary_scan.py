"""The binary scan: sign-bit codes ranked by Hamming distance, and the sqlite-vec queries it serves."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from memcairn.vectors import binary_scan as bs
from memcairn.vectors import sqlite_vec_file as svf
from memcairn.vectors import sqlite_vec_scan as svs
from memcairn.vectors.base import VectorRecord
from memcairn.vectors.binary_scan import BinaryScan
from memcairn.vectors.sqlite_vec import SqliteVecIndex

DIM = 160  # not a multiple of 64: the last word is padded
K = 20


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def hamming(codes_of: np.ndarray, q: np.ndarray) -> np.ndarray:
    return ((codes_of > 0) != (q > 0)).sum(axis=1)


def clustered(rng: np.random.Generator, n: int, clusters: int = 40, spread: float = 0.35) -> np.ndarray:
    centers = unit(rng.standard_normal((clusters, DIM)))
    return unit(centers[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, DIM)) / np.sqrt(DIM) * 3)


def rec(doc_id: str, vec: np.ndarray, project: str, sqlite_id: int) -> VectorRecord:
    meta = {"sqlite_id": sqlite_id, "kind": "observation", "project": project}
    return VectorRecord(id=doc_id, project=project, vector=vec.tolist(), document="text", metadata=meta)


# ----------------------------------------------------------------------------- the scan alone


@pytest.mark.parametrize("native_popcount", [True, False])
def test_candidates_are_the_nearest_by_hamming(monkeypatch: pytest.MonkeyPatch, native_popcount: bool) -> None:
    if not native_popcount:
        monkeypatch.setattr(bs, "_BITWISE_COUNT", None)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3000, DIM)).astype(np.float32)
    projects = np.array(["a", "b", "c"])[rng.integers(0, 3, len(x))]
    rowids = np.arange(10, 10 + len(x))
    scan = BinaryScan.from_rows(DIM, zip(rowids.tolist(), projects.tolist(), x, strict=True))
    assert scan.ready and scan.size() == 3000
    assert scan.size(["a", "b"]) == int(np.isin(projects, ["a", "b"]).sum())
    for wanted in (None, ["a"], ["b", "c", "nowhere"]):
        mask = np.ones(len(x), bool) if wanted is None else np.isin(projects, wanted)
        for _ in range(5):
            q = rng.standard_normal(DIM).astype(np.float32)
            got = scan.candidates(q, wanted, 150)
            assert len(got) == 150 == len(set(got.tolist()))
            assert set(got.tolist()) <= set(rowids[mask].tolist())
            truth = np.sort(hamming(x[mask], q))[:150]
            assert np.array_equal(np.sort(hamming(x[got - 10], q)), truth)
    assert len(scan.candidates(x[0], ["a"], 10**6)) == scan.size(["a"])
    assert len(scan.candidates(x[0], ["nowhere"], 10)) == 0


def test_changes_are_pending_until_a_query_and_last_wins() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((100, DIM)).astype(np.float32)
    scan = BinaryScan.from_rows(DIM, [(i, "a", x[i]) for i in range(100)])
    arrays = scan._parts["a"].rowids
    scan.add([(200, "a", x[0]), (5, "a", -x[5])])  # a new rowid, and a replaced code
    scan.remove([(7, "a"), (8, "b"), (9999, "a")])  # 8 is not in b, 9999 nowhere: ignored
    scan.add([(7, "b", x[7])])  # a reused rowid in another partition
    assert scan._parts["a"].rowids is arrays  # nothing copied yet
    assert scan.size(["a"]) == 100 and scan.size(["b"]) == 1
    everything = set(scan.candidates(x[0], ["a"], 1000).tolist())
    assert everything == (set(range(100)) - {7}) | {200}
    nearest_minus_x5 = scan.candidates(-x[5], ["a"], 1)
    assert nearest_minus_x5.tolist() == [5]
    scan.add([(9, "a", x[9])])
    scan.remove([(9, "a")])
    assert 9 not in set(scan.candidates(x[9], None, 1000).tolist())


def test_build_replays_changes_recorded_while_reading() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, DIM)).astype(np.float32)
    scan = BinaryScan(DIM)
    assert not scan.ready
    scan.add([(100, "a", x[0])])  # after the snapshot
    scan.add([(3, "a", x[3])])  # already in the snapshot too
    scan.remove([(4, "a")])
    scan.add([(1, "z", x[1])])  # a partition the snapshot does not have
    blobs = [(i, "a", x[i].astype("<f4").tobytes()) for i in range(50)]  # as read from sqlite
    assert scan.build(iter(blobs), {"a": 10, "elsewhere": 5})  # a wrong size hint only costs a copy
    assert scan.ready and scan.wait(0)
    assert set(scan.candidates(x[0], ["a"], 10**6).tolist()) == (set(range(50)) - {4}) | {100}
    assert scan.candidates(x[1], ["z"], 5).tolist() == [1]


def test_cancel_and_clear() -> None:
    x = np.ones((3, DIM), np.float32)
    scan = BinaryScan(DIM)
    scan.cancel()
    assert not scan.build([(1, "a", x[0])]) and not scan.ready
    scan.clear()
    assert scan.ready and scan.size() == 0
    scan.add([(1, "a", x[0])])
    assert scan.size() == 1
    failed = BinaryScan(DIM)
    failed.fail()
    assert failed.failed and not failed.wait(0)


def test_nearest_picks_the_n_smallest_distances_earliest_first_on_ties() -> None:
    rng = np.random.default_rng(21)

    def reference(dist: np.ndarray, n: int) -> list[int]:
        return sorted(np.argsort(dist, kind="stable")[:n].tolist())

    cases = [rng.binomial(384, 0.5, 100_000).astype(np.uint16),  # long: the sampled cut-off
             rng.binomial(384, 0.5, 3000).astype(np.uint16),  # short: counted whole
             np.full(50_000, 7, dtype=np.uint16)]  # every distance tied
    misjudged = np.full(100_000, 300, dtype=np.uint16)
    misjudged[:320:16] = 5  # the sample sees 20 close ones, the rest lie between its points
    misjudged[1::16][:500] = 6
    cases.append(misjudged)
    for dist in cases:
        for n in (1, 100, 2000):
            assert bs.nearest(dist, n, 384).tolist() == reference(dist, n)


def test_the_shortlist_orders_candidates_by_their_int8_cosine() -> None:
    rng = np.random.default_rng(11)
    x = clustered(rng, 2000)
    projects = ["a" if i % 3 else "b" for i in range(len(x))]
    scan = BinaryScan.from_rows(DIM, zip(range(1, len(x) + 1), projects, x, strict=True))
    for wanted in (None, ["a"]):
        for _ in range(5):
            q = unit(x[rng.integers(0, len(x))] + 0.3 * rng.standard_normal(DIM) / np.sqrt(DIM) * 3)
            pool = set(scan.candidates(q, wanted, 300).tolist())
            short = scan.shortlist(q, wanted, 300, keep=40)
            assert len(short) == 40 and set(short.tolist()) <= pool
            exact_cos = {int(r): float(x[r - 1] @ q) for r in pool}
            got = [exact_cos[int(r)] for r in short]
            best = sorted(exact_cos.values(), reverse=True)
            # the int8 estimate is within ~1e-3: the shortlist holds the pool's true best 30 and is ordered
            assert set(best[:30]) <= set(got)
            assert all(a >= b - 3e-3 for a, b in zip(got, got[1:], strict=False))
    # a document added later (pending, then merged) carries its int8 entries too
    new = unit(rng.standard_normal(DIM))
    scan.add([(9999, "b", new)])
    assert scan.shortlist(new, ["b"], 300, keep=1).tolist() == [9999]
    assert scan.shortlist(new, None, 300, keep=0).tolist() == []
    assert scan.shortlist(new, ["nowhere"], 300, keep=5).tolist() == []


def test_a_shortlist_per_owner_keeps_each_owners_best_document() -> None:
    rng = np.random.default_rng(12)
    x = clustered(rng, 1500)
    owners = [1 + i // 3 for i in range(len(x))]  # three documents a row, as narrative + facts
    scan = BinaryScan.from_rows(DIM, zip(range(1, len(x) + 1), ["a"] * len(x), x, owners, strict=True))
    for _ in range(5):
        q = unit(x[rng.integers(0, len(x))] + 0.3 * rng.standard_normal(DIM) / np.sqrt(DIM) * 3)
        pool = scan.candidates(q, None, 400).tolist()
        short = scan.shortlist(q, None, 400, keep=30, per_owner=True).tolist()
        assert len(short) == 30
        assert len({owners[r - 1] for r in short}) == 30  # thirty different rows
        best_of: dict[int, float] = {}
        for r in pool:
            best_of[owners[r - 1]] = max(best_of.get(owners[r - 1], -2.0), float(x[r - 1] @ q))
        for r in short:  # each is its row's best candidate, to the int8 estimate's ~1e-3
            assert float(x[r - 1] @ q) >= best_of[owners[r - 1]] - 3e-3
        assert set(sorted(best_of, key=best_of.get, reverse=True)[:20]) <= {owners[r - 1] for r in short}
    # rows without an owner are their own group; an added document joins its owner's group
    scan.add([(5000, "a", x[0], 1), (5001, "a", -x[0])])
    got = scan.shortlist(x[0], None, 400, keep=5, per_owner=True).tolist()
    assert got[0] in (1, 5000) and not {1, 5000} <= set(got)
    assert 5001 in scan.shortlist(-x[0], None, 400, keep=1, per_owner=True).tolist()


# ----------------------------------------------------------------------------- sqlite-vec through the scan


@pytest.fixture
def few_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-rank only max(4 k, 100) candidates so the approximation really approximates."""
    monkeypatch.setattr(svs, "MIN_CANDIDATES", 100)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the queries the scan served."""
    calls: list[int] = []
    original = BinaryScan.shortlist

    def shortlist(self: BinaryScan, *args: object, **kwargs: object) -> np.ndarray:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BinaryScan, "shortlist", shortlist)
    return calls


def fill(index: SqliteVecIndex, x: np.ndarray, project: str, start: int = 0) -> list[str]:
    ids = [f"obs_{start + i}_narrative" for i in range(len(x))]
    index.upsert([rec(ids[i], x[i], project, start + i + 1) for i in range(len(x))])
    return ids


@pytest.fixture
def loaded(tmp_path: Path) -> tuple[SqliteVecIndex, np.ndarray]:
    x = clustered(np.random.default_rng(4), 4000)
    index = SqliteVecIndex(tmp_path / "vectors.sqlite", DIM, scan_threshold=1000)
    fill(index, x[:2500], "alpha")
    fill(index, x[2500:], "beta", start=2500)
    yield index, x
    index.close()


def exact(index: SqliteVecIndex, q: np.ndarray, projects: list[str] | None, k: int = K) -> list:
    threshold, index.scan_threshold = index.scan_threshold, 10**9
    try:
        return index.query(q.tolist(), projects=projects, limit=k)
    finally:
        index.scan_threshold = threshold


def ready(index: SqliteVecIndex, q: np.ndarray) -> None:
    index.warm()  # starts the reader (no query: the spy counts queries only)
    assert index.wait_for_scan(10)


def test_scan_answers_like_the_exact_knn(loaded, few_candidates, spy) -> None:
    index, x = loaded
    rng = np.random.default_rng(5)
    queries = unit(x[rng.integers(0, len(x), 30)] + 0.2 * rng.standard_normal((30, DIM)) / np.sqrt(DIM) * 3)
    assert not index.wait_for_scan(0)
    first = index.query(queries[0].tolist(), projects=None, limit=K)  # exact while the scan is read
    assert spy == [] and first == exact(index, queries[0], None)
    ready(index, queries[0])
    recalls = []
    for projects in (None, ["alpha"], ["beta", "alpha"]):
        for q in queries:
            want = exact(index, q, projects)
            got = index.query(q.tolist(), projects=projects, limit=K)
            assert len(got) == K
            assert got[0] == want[0]  # same id, distance and metadata
            truth = {m.id: m.distance for m in want}
            assert all(m.distance == truth[m.id] for m in got if m.id in truth)
            assert [m.distance for m in got] == sorted(m.distance for m in got)
            recalls.append(len({m.id for m in got} & set(truth)) / K)
    assert len(spy) == 90
    assert np.mean(recalls) >= 0.95


def test_a_query_per_row_gives_each_rows_nearest_document(tmp_path: Path, spy) -> None:
    rng = np.random.default_rng(13)
    x = clustered(rng, 3000)
    owner = [1 + i // 3 for i in range(len(x))]  # documents 3r, 3r+1, 3r+2 belong to row r + 1
    index = SqliteVecIndex(tmp_path / "vectors.sqlite", DIM, scan_threshold=1000)
    try:
        index.upsert([rec(f"obs_{owner[i]}_fact_{i % 3}", x[i], "alpha", owner[i]) for i in range(len(x))])
        queries = unit(x[rng.integers(0, len(x), 10)] + 0.2 * rng.standard_normal((10, DIM)) / np.sqrt(DIM) * 3)

        def truth(q: np.ndarray) -> list[tuple[int, float]]:
            best: dict[int, float] = {}
            for i, d in enumerate(1.0 - x @ q):
                best[owner[i]] = min(best.get(owner[i], 9.0), float(d))
            return sorted(best.items(), key=lambda kv: kv[1])[:K]

        def rows_of(matches: list) -> list[int]:
            return [m.metadata["sqlite_id"] for m in matches]

        index.scan_threshold = 10**9
        for q in queries:  # the exact path
            got = index.query(q.tolist(), projects=["alpha"], limit=K, per_row=True)
            assert rows_of(got) == [r for r, _ in truth(q)]
            assert [m.distance for m in got] == pytest.approx([d for _, d in truth(q)], abs=1e-5)
        assert spy == []
        index.scan_threshold = 1000
        ready(index, queries[0])
        recalls = []
        for q in queries:  # the scan's path
            got = index.query(q.tolist(), projects=None, limit=K, per_row=True, metadata=False)
            assert len(got) == K
            want = truth(q)
            ids = [int(m.id.split("_")[1]) for m in got]
            assert len(set(ids)) == K and ids[0] == want[0][0]
            recalls.append(len(set(ids) & {r for r, _ in want}) / K)
        assert len(spy) == len(queries) and np.mean(recalls) >= 0.95
    finally:
        index.close()


def test_scan_respects_projects_deletes_and_upserts(loaded, spy) -> None:
    index, x = loaded
    ready(index, x[0])
    beta = index.query(x[2600].tolist(), projects=["beta"], limit=50)
    assert {m.metadata["project"] for m in beta} == {"beta"} and beta[0].id == "obs_2600_narrative"
    assert {m.metadata["project"] for m in index.query(x[0].tolist(), projects=["alpha"], limit=50)} == {"alpha"}

    top = index.query(x[10].tolist(), projects=None, limit=5)
    index.delete([top[0].id, top[1].id])
    index.delete_where_sqlite_ids([top[2].metadata["sqlite_id"]], project=top[2].metadata["project"])
    after = index.query(x[10].tolist(), projects=None, limit=200)
    assert not {m.id for m in top[:3]} & {m.id for m in after}

    new = unit(np.random.default_rng(6).standard_normal(DIM))
    index.upsert([rec("prompt_9001", new, "beta", 9001)])
    hit = index.query(new.tolist(), projects=["beta"], limit=3)[0]
    assert hit.id == "prompt_9001" and hit.distance < 1e-5
    index.upsert([rec("obs_20_narrative", new, "alpha", 21)])  # an existing document moves
    assert index.query(new.tolist(), projects=["alpha"], limit=1)[0].id == "obs_20_narrative"
    assert "obs_20_narrative" not in {m.id for m in index.query(x[20].tolist(), projects=["alpha"], limit=5)}
    assert len(spy) == 7
    assert index._scan is not None and index._scan.size() == index.count()


def test_scan_survives_reset(loaded, spy) -> None:
    index, x = loaded
    ready(index, x[0])
    index.reset()
    assert index.query(x[0].tolist(), projects=None, limit=5) == []
    fill(index, x[:1200], "gamma")
    assert index.wait_for_scan(0)  # still there, kept in step by the upserts
    calls = len(spy)
    got = index.query(x[3].tolist(), projects=["gamma"], limit=K)
    assert len(spy) == calls + 1
    assert got[0].id == "obs_3_narrative" and got == exact(index, x[3], ["gamma"])


def test_exact_path_below_the_threshold(tmp_path: Path, spy) -> None:
    x = clustered(np.random.default_rng(7), 1500)
    index = SqliteVecIndex(tmp_path / "vectors.sqlite", DIM, scan_threshold=1000)
    try:
        fill(index, x[:900], "alpha")
        fill(index, x[900:], "beta", start=900)
        index.query(x[0].tolist(), projects=["alpha"], limit=K)
        assert index._scan is None and not index.wait_for_scan(0)  # 900 < 1000: nothing started
        ready(index, x[0])  # 1500 documents in all
        assert index.query(x[0].tolist(), projects=["alpha"], limit=K)[0].id == "obs_0_narrative"
        assert spy == []
        assert index.query(x[0].tolist(), projects=None, limit=K)[0].id == "obs_0_narrative"
        assert len(spy) == 1
    finally:
        index.close()


def test_changes_while_the_scan_is_read_are_kept(loaded, monkeypatch: pytest.MonkeyPatch, spy) -> None:
    index, x = loaded
    gate = threading.Event()
    original = BinaryScan.build

    def slow_build(self: BinaryScan, rows, sizes=None) -> bool:
        rows = list(rows)  # the snapshot is taken ...
        gate.wait(10)  # ... and the index changes before it is installed
        return original(self, rows, sizes)

    monkeypatch.setattr(BinaryScan, "build", slow_build)
    index.query(x[0].tolist(), projects=None, limit=1)
    new = unit(np.random.default_rng(8).standard_normal(DIM))
    index.upsert([rec("prompt_77", new, "alpha", 77)])
    index.delete(["obs_100_narrative"])
    assert not index.wait_for_scan(0.2)
    gate.set()
    assert index.wait_for_scan(10)
    assert index.query(new.tolist(), projects=None, limit=1)[0].id == "prompt_77"
    assert "obs_100_narrative" not in {m.id for m in index.query(x[100].tolist(), projects=None, limit=50)}
    assert len(spy) == 2


def test_another_connection_writing_drops_the_scan(loaded, spy) -> None:
    index, x = loaded
    ready(index, x[0])
    other = SqliteVecIndex(index.path, DIM, scan_threshold=10**9)
    new = unit(np.random.default_rng(9).standard_normal(DIM))
    try:
        other.upsert([rec("prompt_5", new, "beta", 5)])
        other.delete(["obs_0_narrative"])
    finally:
        other.close()
    calls = len(spy)
    assert index.query(new.tolist(), projects=None, limit=1)[0].id == "prompt_5"  # exact: scan dropped
    assert index.query(x[0].tolist(), projects=None, limit=1)[0].id != "obs_0_narrative"
    assert len(spy) == calls and index._scan is None


def test_a_failing_reader_keeps_the_exact_path(loaded, monkeypatch: pytest.MonkeyPatch, spy) -> None:
    index, x = loaded

    def broken(self: BinaryScan, rows, sizes=None) -> bool:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(BinaryScan, "build", broken)
    index.query(x[0].tolist(), projects=None, limit=1)
    assert not index.wait_for_scan(10)
    for _ in range(2):
        assert index.query(x[5].tolist(), projects=None, limit=3)[0].id == "obs_5_narrative"
    assert index._scan is None and spy == []


def test_concurrent_queries_and_writes_through_the_scan(loaded, spy) -> None:
    index, x = loaded
    ready(index, x[0])
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for i in range(20):
                first = offset + 5 * i
                index.upsert([rec(f"manual_{first + j}_text", x[first + j], "alpha", 10_000 + j) for j in range(5)])
                index.delete([f"obs_{offset + i}_narrative"])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def reader(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            for _ in range(20):
                got = index.query(x[rng.integers(0, len(x))].tolist(), projects=None, limit=K)
                assert len(got) == K
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(o,)) for o in (0, 1000)]
    threads += [threading.Thread(target=reader, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert index._scan is not None and index._scan.size() == index.count() == 4000 + 200 - 40
    assert len(spy) >= 40


def test_a_failing_scan_query_falls_back_to_the_exact_knn(loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    index, x = loaded
    ready(index, x[0])

    def broken(self: BinaryScan, *args: object, **kwargs: object) -> np.ndarray:
        raise MemoryError("no room")

    monkeypatch.setattr(BinaryScan, "shortlist", broken)
    assert index.query(x[7].tolist(), projects=None, limit=K) == exact(index, x[7], None)
    assert index._scan is None


# ----------------------------------------------------------------------------- schema 1 (vec0) -> 2


def _schema_one_file(path: Path, x: np.ndarray) -> None:
    """A sidecar as schema 1 wrote it: the vectors in a sqlite-vec vec0 table partitioned by project."""
    import json

    import apsw
    import sqlite_vec

    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.execute("PRAGMA journal_mode = WAL")
    with conn:
        conn.execute("CREATE TABLE mc_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.executemany("INSERT INTO mc_meta VALUES (?, ?)", [("schema", "1"), ("dimension", str(DIM)),
                                                                  ("metric", "cosine")])
        conn.execute("CREATE TABLE mc_docs(rowid INTEGER PRIMARY KEY, project TEXT NOT NULL, doc_id TEXT NOT NULL, "
                     "kind TEXT, sqlite_id INTEGER, document TEXT NOT NULL, metadata TEXT NOT NULL, "
                     "UNIQUE(doc_id, project))")
        conn.execute(f"CREATE VIRTUAL TABLE mc_vectors USING vec0(project TEXT PARTITION KEY, "
                     f"embedding FLOAT[{DIM}] distance_metric=cosine, chunk_size=256)")
        for i, vec in enumerate(x):
            project = "alpha" if i % 2 else "beta"
            meta = {"sqlite_id": i + 1, "kind": "observation", "project": project}
            conn.execute("INSERT INTO mc_docs VALUES (?, ?, ?, 'observation', ?, 'text', ?)",
                         (i + 1, project, f"obs_{i + 1}_narrative", i + 1, json.dumps(meta, sort_keys=True)))
            conn.execute("INSERT INTO mc_vectors(rowid, project, embedding) VALUES (?, ?, ?)",
                         (i + 1, project, vec.astype("<f4").tobytes()))
    conn.close()


def test_a_schema_one_file_moves_its_vectors_without_re_embedding(tmp_path: Path) -> None:
    import apsw

    x = clustered(np.random.default_rng(30), 1300)
    path = tmp_path / "vectors.sqlite"
    _schema_one_file(path, x)
    size_before = path.stat().st_size
    index = SqliteVecIndex(path, DIM)
    assert path.stat().st_size < 1.5 * size_before  # compacted after the move, not both copies kept
    try:
        assert index.count() == 1300 and index.count("alpha") == 650
        for i in (0, 1, 777):
            project = "alpha" if i % 2 else "beta"
            best = index.query(x[i].tolist(), projects=[project], limit=5)[0]
            assert best.id == f"obs_{i + 1}_narrative" and best.distance < 1e-5
            assert best.metadata["sqlite_id"] == i + 1
        index.upsert([rec("prompt_5000", x[3], "alpha", 5000)])  # the new table takes writes
        assert {m.id for m in index.query(x[3].tolist(), projects=["alpha"], limit=2)} == {
            "obs_4_narrative", "prompt_5000"}
    finally:
        index.close()
    conn = apsw.Connection(str(path))
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "mc_vectors" not in tables and "mc_embeddings" in tables
        assert dict(conn.execute("SELECT key, value FROM mc_meta"))["schema"] == str(svf.SCHEMA_VERSION)
        stored = conn.execute("SELECT embedding FROM mc_embeddings WHERE rowid = 778").fetchone()[0]
        assert np.array_equal(np.frombuffer(stored, dtype="<f4"), x[777])  # the same bytes, not re-embedded
    finally:
        conn.close()
    SqliteVecIndex(path, DIM).close()  # a second open finds schema 2 and changes nothing


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    import apsw

    from memcairn.core.errors import VectorIndexUnavailableError

    path = tmp_path / "vectors.sqlite"
    SqliteVecIndex(path, DIM).close()
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE mc_meta SET value = ? WHERE key = 'schema'", (str(svf.SCHEMA_VERSION + 1),))
    conn.close()
    with pytest.raises(VectorIndexUnavailableError, match="newer memcairn"):
        SqliteVecIndex(path, DIM)


def test_warm_reads_the_scan_before_any_query(tmp_path: Path, spy) -> None:
    x = clustered(np.random.default_rng(31), 1200)
    index = SqliteVecIndex(tmp_path / "vectors.sqlite", DIM)
    try:
        fill(index, x, "alpha")
        small = SqliteVecIndex(tmp_path / "small.sqlite", DIM)
        fill(small, x[:10], "alpha")
        small.warm()
        assert small._scan is None  # below the threshold: nothing to read
        small.close()
        index.warm()
        assert index.wait_for_scan(10)
        assert index.query(x[7].tolist(), projects=["alpha"], limit=3)[0].id == "obs_7_narrative"
        assert len(spy) == 1
    finally:
        index.close()


def test_both_paths_report_exact_cosine_distances(loaded) -> None:
    index, x = loaded
    q = unit(np.random.default_rng(32).standard_normal(DIM))
    want = {f"obs_{i}_narrative": 1.0 - float(np.dot(x[i].astype(np.float64), q)) for i in range(len(x))}
    got_exact = exact(index, q, None, k=50)
    ready(index, q)
    got_scan = index.query(q.tolist(), projects=None, limit=50)
    truth = sorted(want, key=lambda i: (want[i], i))[:50]
    assert [m.id for m in got_exact] == truth  # the exact path is exact
    assert len(set(truth) & {m.id for m in got_scan}) >= 45  # the scan's recall: a random query, far from any
    for got in (got_exact, got_scan):
        assert all(abs(m.distance - want[m.id]) < 1e-6 for m in got)


def test_a_query_per_row_stays_per_row_when_rowids_are_reused_during_the_shortlist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortlist runs outside the connection's lock: a rowid it names can be deleted and reused by another
    document of a row it already holds before the ranking reads it. The answer stays one document a row."""
    rng = np.random.default_rng(21)
    x = clustered(rng, 3000)
    owner = [1 + i // 3 for i in range(len(x))]
    index = SqliteVecIndex(tmp_path / "vectors.sqlite", DIM, scan_threshold=1000)
    try:
        index.upsert([rec(f"obs_{owner[i]}_fact_{i % 3}", x[i], "alpha", owner[i]) for i in range(len(x))])
        ready(index, x[0])
        q = x[-1]  # the document with the largest rowid is the nearest
        original = BinaryScan.shortlist

        def shortlist(self: BinaryScan, *args: object, **kwargs: object) -> np.ndarray:
            rowids = original(self, *args, **kwargs)
            with index._db() as conn:
                last = conn.execute("SELECT max(rowid) FROM mc_docs").fetchone()[0]
                other = conn.execute("SELECT sqlite_id FROM mc_docs WHERE rowid = ?", (int(rowids[1]),)).fetchone()[0]
            assert int(rowids[0]) == last
            # meanwhile (another thread): the newest document goes, and a row already listed gets a new one,
            # which takes the freed rowid
            index.delete([f"obs_{owner[-1]}_fact_{(len(x) - 1) % 3}"], project="alpha")
            index.upsert([rec(f"obs_{other}_fact_9", q, "alpha", other)])
            return rowids

        monkeypatch.setattr(BinaryScan, "shortlist", shortlist)
        got = index.query(q.tolist(), projects=["alpha"], limit=K, per_row=True)
        rows = [m.metadata["sqlite_id"] for m in got]
        assert len(rows) == len(set(rows)), rows
    finally:
        index.close()


@pytest.mark.parametrize("projects", [None, ["alpha"]])
def test_an_exact_query_per_row_finds_k_rows_when_rows_have_many_documents(tmp_path: Path, projects) -> None:
    """A row with many documents (a long field's chunks) must not leave the exact path short of rows."""
    rng = np.random.default_rng(22)
    centers = unit(rng.standard_normal((60, DIM)))
    chunks = 12
    index = SqliteVecIndex(tmp_path / "vectors.sqlite", DIM, scan_threshold=10**9)
    try:
        x = unit(np.repeat(centers, chunks, axis=0) + 0.01 * rng.standard_normal((len(centers) * chunks, DIM)))
        index.upsert([rec(f"obs_{i // chunks + 1}_narrative_c{i % chunks}", x[i], "alpha", i // chunks + 1)
                      for i in range(len(x))])
        got = index.query(centers[0].tolist(), projects=projects, limit=K, per_row=True)
        rows = [m.metadata["sqlite_id"] for m in got]
        assert len(rows) == K and len(set(rows)) == K
        best = (1.0 - x @ centers[0]).reshape(len(centers), chunks).min(axis=1)
        assert rows == (np.argsort(best, kind="stable")[:K] + 1).tolist()
    finally:
        index.close()
