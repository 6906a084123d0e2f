"""The bundled PostgreSQL that `memcairn server --embedded` starts is durable: pg0 starts PostgreSQL with ``-F``
(fsync off), which a power cut could turn into lost or corrupt memories; the server turns it back on."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from memcairn.pgstore import db  # noqa: E402
from memcairn.server.run import owner_database  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_the_embedded_cluster_of_the_server_syncs_to_disk(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # the very function `memcairn server --embedded` starts its cluster with (server/run.py ``serve``)
    with owner_database(home, None, owns_cluster=True) as owner, db.connect(owner) as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                    for name in ("fsync", "full_page_writes")}
    assert settings == {"fsync": "on", "full_page_writes": "on"}
