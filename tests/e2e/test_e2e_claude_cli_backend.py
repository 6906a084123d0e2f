"""The claude-cli compression backend against the real ``claude`` (both cached releases), offline against a stub
of the Anthropic API that records each request: the model it asks is offered no tool at all, only text to write.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from e2e_clients import CLAUDE_NATIVE, CLAUDE_NPM, Cli, missing_message
from e2e_harness import NODE_DIR
from e2e_stubs import Anthropic, ModelStub, say

from memcairn.capture.llm.claude_cli import ClaudeCliClient
from memcairn.wire.config import Settings

pytestmark = pytest.mark.slow

REPLY = "<observation><type>bugfix</type><title>Pager rounded the page count down</title></observation>"


@pytest.mark.parametrize("cli", [CLAUDE_NATIVE, CLAUDE_NPM], ids=["native-2.1.332", "npm"])
def test_claude_cli_backend_offers_the_model_no_tools(cli: Cli, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.installed(), missing_message(cli)
    executable = str(cli.executable())
    stub = ModelStub(Anthropic(), [say(REPLY)])
    home = tmp_path / "home"
    home.mkdir()
    # the child inherits this environment (ClaudeCliClient.child_env): a fresh HOME and the stub as the API
    for name, value in {"HOME": str(home), "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                        "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
                        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{NODE_DIR}:{Path(executable).parent}:/usr/bin:/bin")
    settings = dataclasses.replace(Settings(home=tmp_path / "memcairn"), claude_cli=executable)
    try:
        text, usage = ClaudeCliClient(settings, timeout=120).complete("You compress tool use.", "<tool_calls/>", 500)
    finally:
        stub.close(tmp_path / "stub-requests.jsonl")

    assert text == REPLY and usage.backend == "claude-cli"
    assert len(stub.requests) == 1, [r.path for r in stub.requests]
    body = stub.requests[0].body
    assert body.get("tools", []) == [], [tool.get("name") for tool in body["tools"]]
    # nor named as deferred tools reachable through a search tool
    assert "ToolSearch" not in str(body["messages"]), body["messages"]
