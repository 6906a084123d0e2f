"""Property-based run of the worker's own OpenAPI document against the app, in process: no 5xx, and
answers that conform to the document (status codes, content types, bodies)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import positive_data_acceptance

from memcairn.core.models import NewItem
from memcairn.wire.config import Settings
from memcairn.worker.app import make_app
from memcairn.worker.openapi import build_openapi

pytestmark = pytest.mark.slow

PORT = 37877
BASE = f"http://127.0.0.1:{PORT}"


# The document is the app's own (the test below checks the served one is the same); loading it from the
# dict keeps collection free of side effects: the app starts only when the tests run.
DOC = build_openapi(Settings(home=Path("unused"), port=PORT))
schema = schemathesis.openapi.from_dict(DOC).exclude(path="/stream")  # endless; covered in test_worker_api


@pytest.fixture
def worker_app(tmp_path: Path) -> Iterator[Any]:
    """A fresh app per operation: schemathesis ends every ASGI lifespan when a test item ends."""
    cfg = Settings(home=tmp_path / "home", port=PORT, embedding_model="hash")
    app = make_app(None, cfg, static_dir=tmp_path / "static")
    with asgi.get_client(app) as client:  # starts the lifespan; schemathesis reuses it and ends it after the test
        assert client.get(f"{BASE}/openapi.json").json() == DOC
    state = app.state.worker
    deadline = time.monotonic() + 30
    while state.phase != "ready":
        assert state.phase == "starting" and time.monotonic() < deadline, state.detail
        time.sleep(0.01)
    store = state.runtime.store
    for n in range(1, 4):  # something for the id routes to find
        store.add_item(NewItem(project="demo", kind="observation", title=f"observation {n}", text="body"))
    store.add_item(NewItem(project="demo", kind="summary", request="a request", completed="done"))
    store.add_item(NewItem(project="demo", kind="prompt", text="a prompt", prompt_number=1))
    yield app
    asgi.shutdown_lifespans()  # (again, in case the plugin did not): drain, stop the mirror, close the store


@schema.parametrize()
@settings(max_examples=25, derandomize=True, database=None, deadline=None,
          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any, worker_app: Any) -> None:
    # Every check but positive_data_acceptance: some rules cannot be written in a schema (a start date
    # before the end date, exactly one of anchor and query), so a schema-valid request may rightly get 400.
    case.call_and_validate(base_url=BASE, app=worker_app, excluded_checks=[positive_data_acceptance])
