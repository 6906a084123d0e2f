"""Property-based run of the team server's own OpenAPI document against its app, in process, on a real
PostgreSQL: no 5xx, and answers that conform to the document (status codes, content types, bodies)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("psycopg")

import schemathesis  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from postgres_server import TEST_SECRET, hold  # noqa: E402
from schemathesis.python import asgi  # noqa: E402
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance  # noqa: E402

from memcairn.core.models import NewItem  # noqa: E402
from memcairn.pgstore import db, keys  # noqa: E402
from memcairn.pgstore.items import TeamStore  # noqa: E402
from memcairn.server.app import ServerState, make_app  # noqa: E402
from memcairn.server.openapi import openapi_document  # noqa: E402
from memcairn.vectors.embedder import load_embedder  # noqa: E402

BASE = "http://127.0.0.1:37900"
schema = schemathesis.openapi.from_dict(openapi_document()).exclude(path="/v1/stream")  # endless: test_team_server
_EMBEDDER: list[Any] = []


@pytest.fixture
def server_app(pg_database: str) -> Iterator[tuple[Any, str]]:
    if not _EMBEDDER:
        _EMBEDDER.append(load_embedder())
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=4)
    team = TeamStore(pool, _EMBEDDER[0])
    with db.connect(pg_database) as conn:
        made = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read", "memories:write", "admin"])
        tenant = conn.execute("SELECT id FROM tenants WHERE name = 'acme'").fetchone()[0]
    hold(tenant, made["key"])
    for n in range(1, 4):  # something for the id routes to find
        team.add(tenant, NewItem(project="demo", kind="manual", title=f"memory {n}", text="body"))
    app = make_app(ServerState(pool=pool, team=team, secret=TEST_SECRET))
    with asgi.get_client(app) as client:
        assert client.get(f"{BASE}/v1/openapi.json").json() == openapi_document()
    yield app, made["key"]
    pool.close()


@schema.parametrize()
@settings(max_examples=10, derandomize=True, database=None, deadline=None,
          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any, server_app: tuple[Any, str]) -> None:
    app, key = server_app
    # A schema-valid request may rightly get 400 (a project that is only spaces), so positive data acceptance
    # is not required. ignored_auth sends its keyless probe through the requests transport, which cannot reach an
    # app in process (TypeError on `app`); keyless and bad keys are checked in test_team_server*.py instead.
    case.call_and_validate(base_url=BASE, app=app, headers={"Authorization": f"Bearer {key}"},
                           excluded_checks=[positive_data_acceptance, ignored_auth])
