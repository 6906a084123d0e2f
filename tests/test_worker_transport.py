"""One transport to the worker: the doors' ``WorkerClient`` sends its requests through ``wire/transport.py``, the
raw-socket HTTP the hooks use, so a request to the worker is written once."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hook_helpers import Foreign

from memcairn.core.errors import WorkerUnavailableError
from memcairn.wire import transport
from memcairn.wire.client import WorkerClient
from memcairn.wire.transport import MAX_RESPONSE_BYTES, Unreachable, Worker


def test_the_worker_client_loads_no_http_client() -> None:
    code = "import sys, memcairn.wire.client; print(sorted({'http.client', 'email', 'ssl'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_answer_larger_than_a_hook_takes_reaches_the_worker_client_whole() -> None:
    body = b"x" * (MAX_RESPONSE_BYTES + 1)
    server = Foreign(200, "text/plain", body)
    try:
        with pytest.raises(Unreachable, match="too large"):
            Worker("127.0.0.1", server.port).request("GET", "/big")
        assert Worker("127.0.0.1", server.port).request("GET", "/big", limit=None).body == body
        assert WorkerClient(port=server.port, token="").get_text("/big") == body.decode()
    finally:
        server.close()


@pytest.mark.parametrize(("error", "reason"), [(ConnectionRefusedError, "(connection refused)"),
                                               (TimeoutError, "(no answer within 0.5 s)")])
def test_the_worker_client_connects_through_the_transport(monkeypatch: pytest.MonkeyPatch,
                                                          error: type[OSError], reason: str) -> None:
    server = Foreign(200, "application/json", b"{}")  # would answer, were the client to connect on its own
    try:
        def fail(host: bytes, port: int, timeout: float) -> None:
            raise error()

        monkeypatch.setattr(transport, "connect", fail)
        with pytest.raises(WorkerUnavailableError, match=rf"no memcairn worker answered at .*{re.escape(reason)}"):
            WorkerClient(port=server.port, token="", timeout=0.5).get_json("/api/stats")
        assert server.requests == []
    finally:
        server.close()
