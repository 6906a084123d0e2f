"""LLM capture: API errors a proxy relays with HTTP 200, and session summaries a model wraps in ``<details>``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llm_stubs import FakeClock, MemoryLedger, Stub, anthropic_body, edit_call

from memcairn.capture.llm import AnthropicClient, LlmCompressor, OpenAIClient, parse_summary
from memcairn.capture.records import CompressionFailed, Turn
from memcairn.wire.config import Settings

GOOD = ("<observation><type>bugfix</type><title>Pager rounded the page count down</title>"
        "<facts><fact>src/pager.py: page_count now uses ceiling division</fact></facts>"
        "<narrative>The error was floor division; an error message now names the page.</narrative>"
        "<files_modified><file>src/pager.py</file></files_modified></observation>")

SECTIONS = ("<request>Fix the pager losing the last page</request>"
            "<investigated>src/pager.py and its tests</investigated>"
            "<learned>page_count used floor division</learned>"
            "<completed>Switched to ceiling division; tests pass</completed>"
            "<next_steps>None</next_steps>")


pytestmark = pytest.mark.usefixtures("no_proxies")  # a local server, a clock and a usage ledger: llm_stubs


def openai_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion", "model": "qwen2.5:3b",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 40}, **extra}


def turn() -> Turn:
    return Turn(session_id="s1", platform_source="claude", project="pager", prompt="Fix the pager please",
                prompt_number=1, cwd="/src/pager", tools=(), last_assistant_message="Fixed.")


def compressor(backend: str, stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               clock: FakeClock) -> LlmCompressor:
    if backend == "anthropic":
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        settings = Settings(home=tmp_path / "home", capture_backend="anthropic", llm_base_url=stub.url,
                            llm_timeout_seconds=5)
        return LlmCompressor(AnthropicClient(settings), MemoryLedger(), settings, clock=clock)
    settings = Settings(home=tmp_path / "home", capture_backend="openai", llm_base_url=stub.url + "/v1",
                        llm_model="qwen2.5:3b", llm_timeout_seconds=5)
    return LlmCompressor(OpenAIClient(settings), MemoryLedger(), settings, "openai", clock=clock)


def good_body(backend: str) -> dict[str, Any]:
    return anthropic_body(GOOD) if backend == "anthropic" else openai_body(GOOD)


# -- errors relayed with HTTP 200: the model is paused as after the status they stand for ------------------------

PAUSING = [
    # OpenAI-compatible servers and gateways
    ("openai", {"error": {"message": "The server had an error while processing your request", "type": "server_error"}},
     "error", "The server had an error"),
    ("openai", {"error": {"message": "Too many requests, slow down", "code": 429}}, "quota", "Too many requests"),
    ("openai", {"error": {"message": "Service is busy", "code": "503"}}, "quota", "Service is busy"),  # as a 503
    ("openai", {"error": "Internal Server Error"}, "error", "Internal Server Error"),
    ("openai", {"error": {"message": "Request timed out upstream", "type": "timeout_error"}}, "timeout",
     "Request timed out upstream"),
    ("openai", {"error": {"code": 401, "message": "Invalid credentials"}}, "auth", "Invalid credentials"),
    ("openai", {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}, "error",
     "api_error: Internal server error"),
    ("openai", {"id": "gen-1", "choices": [{"index": 0, "finish_reason": "error", "message": {"role": "assistant",
                "content": ""}, "error": {"code": 502, "message": "Upstream provider returned an error"}}]},
     "error", "Upstream provider returned an error"),
    # the Anthropic API behind a gateway
    ("anthropic", {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}, "error",
     "api_error: Internal server error"),
    ("anthropic", {"error": "overloaded"}, "quota", "overloaded"),
    ("anthropic", {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": 429}}, "quota",
     "Rate limit reached"),
    ("anthropic", {"error": {"type": "permission_error", "message": "This key cannot use the model"}}, "auth",
     "This key cannot use the model"),
]


@pytest.mark.parametrize(("backend", "body", "reason", "said"), PAUSING)
def test_an_error_relayed_with_200_pauses_the_model(stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    backend: str, body: dict[str, Any], reason: str,
                                                    said: str) -> None:
    clock = FakeClock()
    model = compressor(backend, stub, tmp_path, monkeypatch, clock)
    stub.reply(body).reply(good_body(backend))
    with pytest.raises(CompressionFailed) as info:
        model.observe(turn(), [edit_call()])
    assert info.value.reason == reason
    assert said in info.value.detail and "HTTP 200 with an error body" in info.value.detail
    clock.now += 59
    with pytest.raises(CompressionFailed) as info:
        model.observe(turn(), [edit_call()])
    assert info.value.reason == reason and "not calling the model" in info.value.detail
    assert len(stub.requests) == 1
    clock.now += 2
    assert len(model.observe(turn(), [edit_call()]).observations) == 1
    assert len(stub.requests) == 2


def test_a_retry_after_sent_with_a_relayed_error_is_honoured(stub: Stub, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    model = compressor("openai", stub, tmp_path, monkeypatch, clock)
    stub.reply({"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": 429}},
               headers={"retry-after": "300"})
    stub.reply(openai_body(GOOD))
    with pytest.raises(CompressionFailed) as info:
        model.observe(turn(), [edit_call()])
    assert info.value.reason == "quota"
    clock.now += 299
    with pytest.raises(CompressionFailed) as info:
        model.observe(turn(), [edit_call()])
    assert "not calling the model" in info.value.detail
    clock.now += 2
    assert len(model.observe(turn(), [edit_call()]).observations) == 1


@pytest.mark.parametrize(("backend", "body", "said"), [
    ("openai", {"object": "error", "message": "max_tokens must be at most 2048", "type": "BadRequestError",
                "code": 400}, "max_tokens must be at most 2048"),
    ("openai", {"error": {"message": "model 'nope' not found", "type": "invalid_request_error"}},
     "model 'nope' not found"),
    ("anthropic", {"error": {"type": "invalid_request_error", "message": "messages: roles must alternate"}},
     "messages: roles must alternate"),
])
def test_an_invalid_request_relayed_with_200_fails_its_batch_only(stub: Stub, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, backend: str,
                                                                  body: dict[str, Any], said: str) -> None:
    model = compressor(backend, stub, tmp_path, monkeypatch, FakeClock())
    stub.reply(body).reply(good_body(backend))
    with pytest.raises(CompressionFailed) as info:
        model.observe(turn(), [edit_call()])
    assert info.value.reason == "error"
    assert said in info.value.detail and "standing for HTTP 4" in info.value.detail
    assert len(model.observe(turn(), [edit_call()]).observations) == 1  # no pause: the next batch is sent
    assert len(stub.requests) == 2


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_the_message_of_a_relayed_error_is_bounded(stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   backend: str) -> None:
    stub.reply({"error": {"type": "server_error", "message": "Upstream failed: " + "x" * 50_000}})
    model = compressor(backend, stub, tmp_path, monkeypatch, FakeClock())
    with pytest.raises(CompressionFailed) as info:
        model.observe(turn(), [edit_call()])
    assert "Upstream failed: xxx" in info.value.detail and len(info.value.detail) < 600


@pytest.mark.parametrize("extra", [{"error": ""}, {"error": {}}, {"error": None},
                                   {"error": {"message": "a stale error field"}}])
def test_an_openai_answer_beside_an_error_field_is_an_answer(stub: Stub, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            extra: dict[str, Any]) -> None:
    stub.reply(openai_body(GOOD, **extra))
    model = compressor("openai", stub, tmp_path, monkeypatch, FakeClock())
    [obs] = model.observe(turn(), [edit_call()]).observations
    assert obs.title == "Pager rounded the page count down" and "error" in (obs.narrative or "")


def test_an_answer_speaking_of_errors_is_an_answer(stub: Stub, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reply = GOOD.replace("Pager rounded the page count down", "Rate limit error: overloaded_error handling fixed")
    stub.reply(anthropic_body(reply)).reply(openai_body(reply))
    for backend in ("anthropic", "openai"):
        model = compressor(backend, stub, tmp_path, monkeypatch, FakeClock())
        [obs] = model.observe(turn(), [edit_call()]).observations
        assert obs.title == "Rate limit error: overloaded_error handling fixed"


# -- a session summary wrapped in <details> ----------------------------------------------------------------------

@pytest.mark.parametrize("reply", [
    f"<details><summary>Session summary</summary><summary>{SECTIONS}</summary></details>",
    f"<details open>\n<summary>Session summary</summary>\n<summary>\n{SECTIONS}\n</summary>\n</details>\n",
    f"<details><summary>Session summary</summary>\n{SECTIONS}\n</details>",
    f"<details><summary>{SECTIONS}</summary></details>",
    f"<details><summary>{SECTIONS}</summary>",
    f"Here is the summary.\n<details>\n{SECTIONS}\n</details>",
    f"<details><summary>Log</summary><details><summary>Session summary</summary>{SECTIONS}</details></details>",
    "<details><summary>Raw output</summary><pre>ok</pre></details>\n"
    f"<details><summary>Session summary</summary><summary>{SECTIONS}</summary></details>",
])
def test_a_summary_wrapped_in_details_is_the_session_summary(reply: str) -> None:
    summary = parse_summary(reply)
    assert summary is not None
    assert summary.request == "Fix the pager losing the last page"
    assert summary.learned == "page_count used floor division"
    assert summary.completed == "Switched to ceiling division; tests pass"


def test_a_details_wrapped_summary_cut_off_by_the_token_limit_keeps_its_complete_sections() -> None:
    cut_off = SECTIONS[:SECTIONS.index("tests pass")]
    summary = parse_summary(f"<details><summary>Session summary</summary>\n{cut_off}")
    assert summary is not None
    assert summary.learned == "page_count used floor division" and summary.completed is None


def test_a_summary_outside_details_still_wins_over_one_inside() -> None:
    inside = SECTIONS.replace("Fix the pager losing the last page", "an older draft")
    summary = parse_summary(f"<details><summary>Draft</summary><summary>{inside}</summary></details>\n"
                            f"<summary>{SECTIONS}</summary>")
    assert summary is not None and summary.request == "Fix the pager losing the last page"


@pytest.mark.parametrize("reply", [
    "<details><summary>Session summary</summary>Fixed the pager.</details>",
    "<details><summary>Input</summary><request>Fix the pager please</request></details>",
    "<details><summary>Request: fix the pager</summary><pre>done</pre></details>",
])
def test_details_holding_no_summary_sections_has_no_summary(reply: str) -> None:
    with pytest.raises(CompressionFailed) as info:
        parse_summary(reply)
    assert info.value.reason == "prose"
