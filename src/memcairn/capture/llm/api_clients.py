"""The model APIs reached over HTTP: the Anthropic Messages API and an OpenAI-compatible chat-completions
server (OpenAI itself, Ollama, vLLM, LM Studio, ...)."""

from __future__ import annotations

import os
import re
import urllib.parse

from memcairn.capture.llm.http_errors import anthropic_relayed_error, choice_text, openai_relayed_error, relayed_failure
from memcairn.capture.llm.http_post import post_json_retry_after
from memcairn.capture.llm.transport import ReplyFailed, estimate_tokens, one_line, usage_int
from memcairn.capture.records import CompressionFailed, Usage
from memcairn.core.errors import ConfigError
from memcairn.wire.config import Settings

ANTHROPIC_DEFAULT_MODEL = "claude-haiku-4-5"
ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"

# What an API key is made of: visible ASCII. A quote, a line break or a non-ASCII character pasted with a key
# cannot go into an HTTP header (http.client would raise, a line break with the key in the message).
_API_KEY_RE = re.compile(r"[\x21-\x7e]+")


def _api_key(settings: Settings, default_env: str) -> tuple[str, str | None]:
    """The environment variable holding the key and its value (None when unset or empty).

    Raises:
        CompressionFailed: ``auth``, the value holds characters no key has; the message never shows the key.
    """
    env_name = settings.llm_api_key_env.strip() or default_env
    value = os.environ.get(env_name, "").strip()
    if value and not _API_KEY_RE.fullmatch(value):
        raise CompressionFailed("auth", f"the API key in {env_name} holds characters no key has (a quote, a space, "
                                        "a line break or a non-ASCII character pasted with it?)")
    return env_name, value or None


# -- Anthropic ---------------------------------------------------------------------------------------------------

def anthropic_url(base: str) -> str:
    """The messages endpoint for a base URL: the host (``https://api.anthropic.com``), a gateway path, one
    ending in ``/v1``, or the full endpoint as copied from the API reference."""
    base = base.strip().rstrip("/")
    if base.endswith("/messages"):
        return base
    return base + ("/messages" if base.endswith("/v1") else "/v1/messages")


class AnthropicClient:
    """The Anthropic Messages API (``POST /v1/messages``); the key comes from ``llm_api_key_env`` or
    ``ANTHROPIC_API_KEY``."""

    name = "anthropic"

    def __init__(self, settings: Settings, *, timeout: float | None = None) -> None:
        self.settings = settings
        self.model = settings.llm_model.strip() or ANTHROPIC_DEFAULT_MODEL
        self.timeout = float(timeout if timeout is not None else settings.llm_timeout_seconds)
        self.url = anthropic_url(settings.llm_base_url.strip() or ANTHROPIC_DEFAULT_URL)

    def complete(self, system: str, user: str, max_tokens: int) -> tuple[str, Usage]:
        env_name, key = _api_key(self.settings, "ANTHROPIC_API_KEY")
        if key is None:
            raise CompressionFailed("auth", f"no Anthropic API key: set the environment variable {env_name}")
        body = {"model": self.model, "max_tokens": max_tokens, "system": system,
                "messages": [{"role": "user", "content": user}]}
        headers = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
        payload, retry_after = post_json_retry_after(self.url, headers, body, self.timeout, "the Anthropic API")
        error = anthropic_relayed_error(payload)
        if error is not None:
            raise relayed_failure(error, "the Anthropic API", retry_after)
        blocks = payload.get("content") if isinstance(payload.get("content"), list) else []
        text = "".join(str(b.get("text") or "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        raw_usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        if raw_usage:
            tokens_in = sum(usage_int(raw_usage.get(key)) for key in
                            ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
            tokens_out = usage_int(raw_usage.get("output_tokens"))
        else:
            tokens_in, tokens_out = estimate_tokens(system, user), estimate_tokens(text)
        usage = Usage(self.name, str(payload.get("model") or self.model), tokens_in, tokens_out)
        if payload.get("stop_reason") == "refusal":
            raise ReplyFailed("refusal", f"the model declined (stop_reason refusal): {one_line(text, 200)}", usage)
        return text, usage


# -- OpenAI-compatible -------------------------------------------------------------------------------------------

def openai_url(base: str) -> str:
    """The chat-completions endpoint for a base URL: one ending in ``/v1`` (or another API path), a bare host
    (the servers' ``/v1`` is added), or the full endpoint as copied from a server's documentation."""
    base = base.strip().rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if urllib.parse.urlsplit(base).path in ("", "/"):
        base += "/v1"
    return base + "/chat/completions"


class OpenAIClient:
    """An OpenAI-compatible ``POST {llm_base_url}/chat/completions``. The base URL is required (for example
    ``http://127.0.0.1:11434/v1`` for Ollama); the bearer key (``llm_api_key_env`` or ``OPENAI_API_KEY``) is
    sent only when set, since local servers need none."""

    name = "openai"

    def __init__(self, settings: Settings, *, timeout: float | None = None) -> None:
        base = settings.llm_base_url.strip().rstrip("/")
        if not base:
            raise ConfigError(
                "capture_backend openai needs llm_base_url, e.g. https://api.openai.com/v1 or "
                "http://127.0.0.1:11434/v1 for Ollama"
            )
        self.settings = settings
        self.model = settings.llm_model.strip() or OPENAI_DEFAULT_MODEL
        self.timeout = float(timeout if timeout is not None else settings.llm_timeout_seconds)
        self.url = openai_url(base)

    def complete(self, system: str, user: str, max_tokens: int) -> tuple[str, Usage]:
        env_name, key = _api_key(self.settings, "OPENAI_API_KEY")
        if key is None and self.settings.llm_api_key_env.strip():
            raise CompressionFailed("auth", f"no API key: the environment variable {env_name} is not set")
        headers = {"authorization": f"Bearer {key}"} if key else {}
        body = {"model": self.model, "max_tokens": max_tokens, "temperature": 0,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
        label = f"the model server {self.url}"
        payload, retry_after = post_json_retry_after(self.url, headers, body, self.timeout, label)
        error = openai_relayed_error(payload)
        if error is not None:
            raise relayed_failure(error, label, retry_after)
        choices = payload.get("choices") if isinstance(payload.get("choices"), list) else []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = choice_text(choice, message)
        raw_usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        tokens_in = usage_int(raw_usage.get("prompt_tokens")) or estimate_tokens(system, user)
        tokens_out = usage_int(raw_usage.get("completion_tokens")) or estimate_tokens(text)
        usage = Usage(self.name, str(payload.get("model") or self.model), tokens_in, tokens_out)
        if not choices:
            raise ReplyFailed("error", "the model server answered no choices", usage)
        if message.get("refusal") or choice.get("finish_reason") == "content_filter":
            reason = str(message.get("refusal") or "finish_reason content_filter")
            raise ReplyFailed("refusal", f"the model declined: {one_line(reason, 200)}", usage)
        if not text.strip() and choice.get("finish_reason") == "length":
            raise ReplyFailed("prose", f"the model stopped at max_tokens {max_tokens} before answering anything "
                                       "(a reasoning model may have spent them thinking)", usage)
        return text, usage
