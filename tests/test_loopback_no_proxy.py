"""A proxy set in the environment (``http_proxy``, common on corporate machines) never carries a request to a
model server on this machine (Ollama, LM Studio, vLLM on 127.0.0.1 or localhost): the proxy cannot reach the
person's loopback. Other hosts keep going through the proxy. The worker clients (the CLI's ``http.client``, the
hooks' own socket) never use a proxy at all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hook_helpers import Foreign

from memcairn.capture.llm import AnthropicClient, OpenAIClient
from memcairn.capture.llm.http_post import is_loopback_url
from memcairn.capture.records import CompressionFailed
from memcairn.wire.client import WorkerClient
from memcairn.wire.config import Settings
from memcairn.wire.transport import Worker

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy",
              "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def _reply(text: str) -> dict[str, Any]:
    """An answer both APIs' clients accept: OpenAI's ``choices`` and Anthropic's ``content``."""
    return {"id": "x", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": text}}],
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "input_tokens": 1, "output_tokens": 1}}


class Recorder(Foreign):
    """A loopback HTTP server answering every request with a model reply of ``text``; ``lines`` are the request
    lines it got (a proxy sees absolute URLs)."""

    def __init__(self, text: str) -> None:
        super().__init__(200, "application/json", json.dumps(_reply(text)).encode())

    @property
    def lines(self) -> list[str]:
        return [f"{command} {path}" for command, path in self.requests]


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """A recording "proxy", named by every proxy variable; no ``no_proxy``."""
    server = Recorder("from the proxy")
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    address = f"http://127.0.0.1:{server.port}"
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, address)
    yield server
    server.close()


@pytest.fixture
def model() -> Iterator[Recorder]:
    server = Recorder("from the local model")
    yield server
    server.close()


def _settings(tmp_path: Path, backend: str, url: str) -> Settings:
    return Settings(home=tmp_path / "home", capture_backend=backend, llm_base_url=url, llm_model="m",
                    llm_timeout_seconds=5)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_local_model_server_is_reached_directly_past_a_proxy(proxy: Recorder, model: Recorder, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    base = f"http://{host}:{model.port}"
    openai = OpenAIClient(_settings(tmp_path, "openai", base + "/v1"))
    assert openai.complete("system", "user", 50)[0] == "from the local model"
    anthropic = AnthropicClient(_settings(tmp_path, "anthropic", base))
    assert anthropic.complete("system", "user", 50)[0] == "from the local model"
    assert model.lines == ["POST /v1/chat/completions", "POST /v1/messages"]
    assert proxy.lines == []


def test_another_host_still_goes_through_the_proxy(proxy: Recorder, tmp_path: Path) -> None:
    url = "http://models.memcairn-test.invalid:8000/v1"  # a made-up name: only the proxy can answer for it
    client = OpenAIClient(_settings(tmp_path, "openai", url))
    assert client.complete("system", "user", 50)[0] == "from the proxy"
    assert proxy.lines == ["POST http://models.memcairn-test.invalid:8000/v1/chat/completions"]


def test_no_proxy_still_applies_to_other_hosts(proxy: Recorder, model: Recorder, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``no_proxy`` keeps working as before for the hosts it names (here a made-up one the proxy would take)."""
    monkeypatch.setenv("no_proxy", "models.memcairn-test.invalid")
    client = OpenAIClient(_settings(tmp_path, "openai", "http://models.memcairn-test.invalid:9/v1"))
    with pytest.raises(CompressionFailed, match="cannot reach"):
        client.complete("system", "user", 50)
    assert proxy.lines == []


@pytest.mark.parametrize(("url", "loopback"), [
    ("http://127.0.0.1:11434/v1", True),
    ("http://127.1.2.3:8000", True),
    ("http://localhost:1234/v1", True),
    ("http://LOCALHOST./v1", True),
    ("http://ollama.localhost:11434", True),
    ("http://[::1]:8000/v1", True),
    ("http://[::ffff:127.0.0.1]:8000", True),
    ("https://api.openai.com/v1", False),
    ("http://10.0.0.5:11434", False),
    ("http://localhost.example.com", False),
    ("http://mylocalhost:80", False),
    ("http://[::2]:80", False),
    ("http://[bad", False),
])
def test_loopback_urls(url: str, loopback: bool) -> None:
    assert is_loopback_url(url) is loopback


def test_the_worker_clients_never_use_a_proxy(proxy: Recorder, model: Recorder) -> None:
    """Confirmation, not a change: ``http.client`` (the CLI's ``WorkerClient``) and the hooks' own socket
    transport never consult the proxy variables."""
    assert WorkerClient(port=model.port, token="").get_json("/api/health")["model"] == "m"
    assert Worker("127.0.0.1", model.port).request("GET", "/api/health").ok
    assert model.lines == ["GET /api/health", "GET /api/health"]
    assert proxy.lines == []
