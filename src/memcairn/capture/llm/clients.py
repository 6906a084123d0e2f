"""The three ways to reach a model: the Anthropic Messages API, an OpenAI-compatible chat-completions server
(OpenAI itself, Ollama, vLLM, LM Studio, ...), and the ``claude`` CLI in headless mode.

Each client answers ``complete(system, user, max_tokens) -> (reply text, Usage)`` and turns every transport
problem into ``CompressionFailed`` with one of its reasons, so the pipeline can fall back to the offline
extractor and tell the person why. Only the standard library is used.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import re
import select
import selectors
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from email.utils import parsedate_to_datetime
from typing import IO, Any, Protocol

from memcairn.capture.records import CompressionFailed, Usage
from memcairn.core.errors import ConfigError
from memcairn.wire.config import Settings

ANTHROPIC_DEFAULT_MODEL = "claude-haiku-4-5"
ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
CLAUDE_CLI_DEFAULT_MODEL = "haiku"

# Set in the environment of a ``claude`` child process. The hook runner skips every event while it is set, so
# the child session (which loads the person's settings, hooks included) never feeds memcairn's own capture.
CAPTURE_CHILD_ENV = "MEMCAIRN_CAPTURE_CHILD"

_ERROR_BODY_CHARS = 2000
# A reply asked for with max_tokens of a few thousand is some kilobytes; a body far larger is not one.
MAX_BODY_BYTES = 8 * 1024 * 1024
_READ_CHUNK = 64 * 1024


class LlmClient(Protocol):
    """One transport to a model."""

    name: str
    model: str

    def complete(self, system: str, user: str, max_tokens: int) -> tuple[str, Usage]: ...


class ReplyFailed(CompressionFailed):
    """A call that failed after the model had run, so tokens were spent: ``usage`` is what they were."""

    def __init__(self, reason: str, detail: str, usage: Usage | None = None) -> None:
        super().__init__(reason, detail)
        self.usage = usage


class ServerFailed(CompressionFailed):
    """A failure a server answered; ``retry_after`` is how many seconds it asked to be left alone, if it said,
    and ``status`` the HTTP status it answered with (for an error body relayed with HTTP 200, the status its
    error names, when it names one)."""

    def __init__(self, reason: str, detail: str, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(reason, detail)
        self.retry_after = retry_after
        self.status = status

    @property
    def server_error(self) -> bool:
        """Whether the server answered a 5xx: its own trouble, which a call made right away is likely to meet
        again, so the model is paused (and the server left alone) for a while."""
        return self.status is not None and 500 <= self.status < 600


class ClientUnavailable(CompressionFailed):
    """The transport itself cannot be used (the ``claude`` executable is missing or cannot be run, or the
    server cannot be reached: refused, no route, a name that does not resolve): the next calls fail the same
    way for a while, so the model is paused as after a refused key."""


def estimate_tokens(*texts: str) -> int:
    """Tokens of ``texts`` as chars/4 (rounded up), for servers that report no usage."""
    return (sum(len(text) for text in texts) + 3) // 4


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


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


# -- HTTP --------------------------------------------------------------------------------------------------------

def _error_text(raw: bytes) -> str:
    """The useful part of an error body: type, code and message of a JSON error, else the raw text."""
    text = raw[:_ERROR_BODY_CHARS].decode("utf-8", errors="replace")
    try:
        payload = json.loads(raw)
    except ValueError:
        return _one_line(text)
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        parts = [str(error.get(key)) for key in ("type", "code", "message") if error.get(key)]
        return _one_line(": ".join(parts)) if parts else _one_line(text)
    if isinstance(error, str):
        return _one_line(error)
    return _one_line(text)


_QUOTA_BODY_RE = re.compile(r"overloaded|credit balance|insufficient_quota|rate[ _-]?limit|quota", re.IGNORECASE)
# error types an API names a refused key with, also when a proxy relays the error object with HTTP 200
_AUTH_BODY_RE = re.compile(r"authentication_error|permission_error|invalid_api_key|\bunauthori[sz]ed\b",
                           re.IGNORECASE)


def http_failure(status: int, text: str, label: str, retry_after: float | None = None, *,
                 relayed: bool = False) -> ServerFailed:
    """The failure an HTTP error status (and its body text) stands for; ``relayed`` when the server answered
    HTTP 200 with an error body that stands for ``status``."""
    answered = f"HTTP {status}"
    if relayed:
        answered = "HTTP 200 with an error body" + (f" standing for HTTP {status}" if status != 200 else "")
    detail = f"{label} answered {answered}: {text}" if text else f"{label} answered {answered}"
    if status in (401, 403) or _AUTH_BODY_RE.search(text):
        return ServerFailed("auth", detail, retry_after, status)
    if status in (429, 503, 529) or _QUOTA_BODY_RE.search(text):
        return ServerFailed("quota", detail, retry_after, status)
    if status in (408, 504):
        return ServerFailed("timeout", detail, retry_after, status)
    return ServerFailed("error", detail, retry_after, status)


# -- errors relayed with HTTP 200 ----------------------------------------------------------------------------------
# Some proxies and gateways answer HTTP 200 with the error object the API (or they themselves) produced:
# ``{"error": {"type": "rate_limit_error", "code": 429, "message": ...}}``, ``{"error": "overloaded"}``,
# ``{"type": "error", "error": {"type": "overloaded_error", ...}}``, vLLM's ``{"object": "error", ...}``. Such a
# body is classified as the status its error names would have been answered with.

# Error type names (Anthropic, OpenAI, Google-style ``status``, common gateways), lower-cased, with the status
# each stands for.
_ERROR_TYPE_STATUS = {
    "rate_limit_error": 429, "rate_limit_exceeded": 429, "rate_limited": 429, "too_many_requests": 429,
    "insufficient_quota": 429, "quota_exceeded": 429, "resource_exhausted": 429, "billing_error": 429,
    "overloaded_error": 529, "overloaded": 529,
    "api_error": 500, "server_error": 500, "internal_error": 500, "internal_server_error": 500, "internal": 500,
    "service_unavailable": 503, "unavailable": 503, "bad_gateway": 502, "upstream_error": 502,
    "timeout_error": 504, "timeout": 504, "deadline_exceeded": 504, "gateway_timeout": 504,
    "authentication_error": 401, "invalid_api_key": 401, "unauthenticated": 401, "unauthorized": 401,
    "permission_error": 403, "permission_denied": 403, "forbidden": 403,
    "invalid_request_error": 400, "invalid_argument": 400, "bad_request": 400, "badrequesterror": 400,
    "not_found_error": 404, "not_found": 404, "notfounderror": 404, "request_too_large": 413,
    "context_length_exceeded": 400,
}
# A bare error text naming a server's own trouble (``{"error": "Internal Server Error"}``).
_SERVER_TEXT_RE = re.compile(r"internal[ _-]server[ _-]error|service[ _-]unavailable|bad[ _-]gateway|"
                             r"gateway[ _-]timeout", re.IGNORECASE)


def _has_error(value: Any) -> bool:
    """Whether ``value`` (an ``error`` field) names an error: a non-empty object or text."""
    return bool(value.strip()) if isinstance(value, str) else isinstance(value, dict) and bool(value)


def _status_of_code(value: Any) -> int | None:
    """``value`` as an HTTP error status (429, ``"503"``), else None."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and 400 <= value < 600:
        return value
    return None


def _relayed_status(error: Any) -> int | None:
    """The HTTP status an error object (or text) stands for: a numeric ``code`` or ``status``, else a known
    ``type``, ``code`` or ``status`` name, else a server's own trouble named in its text; None when it names
    none of these."""
    if isinstance(error, dict):
        for key in ("code", "status", "status_code", "http_status"):
            status = _status_of_code(error.get(key))
            if status is not None:
                return status
        for key in ("type", "code", "status"):
            name = error.get(key)
            if isinstance(name, str) and name.strip().lower() in _ERROR_TYPE_STATUS:
                return _ERROR_TYPE_STATUS[name.strip().lower()]
        message = error.get("message")
        text = message if isinstance(message, str) else ""
    else:
        text = error if isinstance(error, str) else ""
    return 502 if _SERVER_TEXT_RE.search(text) else None


def relayed_failure(error: Any, label: str, retry_after: float | None = None) -> ServerFailed:
    """The failure an error object (or text) relayed with HTTP 200 stands for: as the status it names would be
    (a rate limit, overload or server error pauses the model, a refused key is ``auth``, an invalid request
    fails its batch only), else by its text alone. The detail names what the server said, bounded."""
    text = _error_text(json.dumps({"error": error}).encode("utf-8"))
    status = _relayed_status(error)
    return http_failure(200 if status is None else status, text, label, retry_after, relayed=True)


def anthropic_relayed_error(payload: dict[str, Any]) -> Any:
    """The error an Anthropic answer holds instead of a message (``{"type": "error", "error": ...}``, or an
    ``error`` field with no ``content`` from a gateway), else None. A message whose text speaks of errors is
    a message."""
    if payload.get("type") == "error":
        error = payload.get("error")
        return error if _has_error(error) else {"type": "error", "message": str(payload.get("message") or "")}
    if _has_error(payload.get("error")) and not isinstance(payload.get("content"), list):
        return payload["error"]
    return None


def openai_relayed_error(payload: dict[str, Any]) -> Any:
    """The error a chat-completions answer holds instead of a reply, else None: an ``error`` field (OpenAI's
    object, a gateway's text, Anthropic's ``{"type": "error", ...}`` passed through) with no choice holding a
    reply, vLLM's ``{"object": "error", ...}``, or the error of a first choice that holds no reply (OpenRouter's
    ``finish_reason: "error"``). An answer whose text speaks of errors is an answer."""
    choices = payload.get("choices") if isinstance(payload.get("choices"), list) else []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    if _choice_text(choice, message).strip():
        return None
    if _has_error(payload.get("error")):
        return payload["error"]
    if payload.get("object") == "error" and not choices:
        return {key: payload.get(key) for key in ("type", "code", "message") if payload.get(key) is not None}
    if _has_error(choice.get("error")):
        return choice["error"]
    return None


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (a number of seconds or an HTTP date); None when absent or
    unreadable."""
    if not value or not value.strip():
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(seconds, 0.0) if seconds == seconds else None  # NaN is no answer


def _is_timeout(exc: BaseException) -> bool:
    reason = getattr(exc, "reason", None)
    return isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError) or "timed out" in str(reason or "")


def _read_body(response: Any, deadline: float, timeout: float, label: str) -> bytes:
    """The whole body, read piece by piece: a server trickling bytes cannot hold the call past ``deadline``
    (the socket timeout bounds only each read), nor send more than ``MAX_BODY_BYTES``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise CompressionFailed("timeout", f"{label} did not finish its answer within {timeout:g} s")
        chunk = response.read1(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise CompressionFailed("error", f"{label} answered more than {MAX_BODY_BYTES:,} bytes")
        chunks.append(chunk)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: urllib would repeat the POST as a GET without its body, with the API key,
    to wherever ``Location`` points. The 3xx then arrives as an ``HTTPError``."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` names this machine: ``localhost``, a name ending in ``.localhost``, ``127.0.0.0/8``, ``::1``
    (also as ``::ffff:127.x.y.z``)."""
    try:
        host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # without an IPv6 zone (``fe80::1%eth0``)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _opener(url: str) -> urllib.request.OpenerDirector:
    """No redirects; and for a model server on this machine (Ollama, LM Studio, vLLM) no proxy either: urllib
    sends every request through ``http_proxy`` / ``https_proxy`` unless ``no_proxy`` names the host, and a
    proxy cannot reach the person's loopback. Other hosts keep honouring the proxy settings."""
    if is_loopback_url(url):
        return urllib.request.build_opener(_NoRedirects, urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(_NoRedirects)


def post_json(url: str, headers: dict[str, str], body: dict[str, Any], timeout: float, label: str) -> dict[str, Any]:
    """POST ``body`` as JSON and return the JSON object answered; every problem as ``CompressionFailed``."""
    return _post_json(url, headers, body, timeout, label)[0]


def _post_json(url: str, headers: dict[str, str], body: dict[str, Any], timeout: float,
               label: str) -> tuple[dict[str, Any], float | None]:
    """``post_json``, with the seconds the answer's ``Retry-After`` asks for (a gateway relaying a rate limit
    with HTTP 200 may send it)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode("utf-8"), method="POST",
        headers={"content-type": "application/json", "accept": "application/json", **headers},
    )
    deadline = time.monotonic() + timeout
    try:
        with _opener(url).open(request, timeout=timeout) as response:
            raw = _read_body(response, deadline, timeout, label)
            retry_after = retry_after_seconds(response.headers.get("retry-after"))
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            exc.close()
            location = exc.headers.get("location") if exc.headers else None
            target = urllib.parse.urljoin(url, location) if location else ""
            raise CompressionFailed("error", f"{label} answered HTTP {exc.code}, a redirect to "
                                             f"{_one_line(target, 200) or '?'}: "
                                             "set llm_base_url to the address it names") from None
        retry_after = retry_after_seconds(exc.headers.get("retry-after") if exc.headers else None)
        try:
            text = _error_text(exc.read(_ERROR_BODY_CHARS * 4))
        except (OSError, http.client.HTTPException):
            text = ""
        finally:
            exc.close()
        raise http_failure(exc.code, text, label, retry_after) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        if _is_timeout(exc):
            raise CompressionFailed("timeout", f"{label} did not answer within {timeout:g} s") from None
        reason = getattr(exc, "reason", None) or exc
        raise ClientUnavailable("error", f"cannot reach {label} at {url}: {reason}") from None
    try:
        # a byte that is not UTF-8 (a local server cutting a character in two) spoils one character, not the reply
        payload = json.loads(raw.decode("utf-8-sig", errors="replace"))
    except ValueError:
        raise CompressionFailed("error", f"{label} answered something that is not JSON: "
                                         f"{_one_line(raw[:200].decode('utf-8', 'replace'))}") from None
    if not isinstance(payload, dict):
        raise CompressionFailed("error", f"{label} answered JSON that is not an object")
    return payload, retry_after


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


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
        payload, retry_after = _post_json(self.url, headers, body, self.timeout, "the Anthropic API")
        error = anthropic_relayed_error(payload)
        if error is not None:
            raise relayed_failure(error, "the Anthropic API", retry_after)
        blocks = payload.get("content") if isinstance(payload.get("content"), list) else []
        text = "".join(str(b.get("text") or "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        raw_usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        if raw_usage:
            tokens_in = sum(_int(raw_usage.get(key)) for key in
                            ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
            tokens_out = _int(raw_usage.get("output_tokens"))
        else:
            tokens_in, tokens_out = estimate_tokens(system, user), estimate_tokens(text)
        usage = Usage(self.name, str(payload.get("model") or self.model), tokens_in, tokens_out)
        if payload.get("stop_reason") == "refusal":
            raise ReplyFailed("refusal", f"the model declined (stop_reason refusal): {_one_line(text, 200)}", usage)
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
        payload, retry_after = _post_json(self.url, headers, body, self.timeout, label)
        error = openai_relayed_error(payload)
        if error is not None:
            raise relayed_failure(error, label, retry_after)
        choices = payload.get("choices") if isinstance(payload.get("choices"), list) else []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = _choice_text(choice, message)
        raw_usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        tokens_in = _int(raw_usage.get("prompt_tokens")) or estimate_tokens(system, user)
        tokens_out = _int(raw_usage.get("completion_tokens")) or estimate_tokens(text)
        usage = Usage(self.name, str(payload.get("model") or self.model), tokens_in, tokens_out)
        if not choices:
            raise ReplyFailed("error", "the model server answered no choices", usage)
        if message.get("refusal") or choice.get("finish_reason") == "content_filter":
            reason = str(message.get("refusal") or "finish_reason content_filter")
            raise ReplyFailed("refusal", f"the model declined: {_one_line(reason, 200)}", usage)
        if not text.strip() and choice.get("finish_reason") == "length":
            raise ReplyFailed("prose", f"the model stopped at max_tokens {max_tokens} before answering anything "
                                       "(a reasoning model may have spent them thinking)", usage)
        return text, usage


def _choice_text(choice: dict[str, Any], message: dict[str, Any]) -> str:
    """The reply a choice holds: ``message.content`` (chat completions), else ``text`` (the older completions
    shape some OpenAI-compatible servers and proxies still answer with)."""
    content = message.get("content")
    return _message_text(content if content is not None else choice.get("text"))


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return ""


# -- claude CLI --------------------------------------------------------------------------------------------------

_CLI_AUTH_RE = re.compile(r"log ?in|authenticat|api key|unauthori[sz]ed|oauth|credentials", re.IGNORECASE)
_CLI_QUOTA_RE = re.compile(r"limit|quota|\brate\b|rate_|credit|overloaded", re.IGNORECASE)


def cli_failure(text: str, usage: Usage | None = None) -> ReplyFailed:
    """The failure a ``claude`` error message stands for: auth, quota, else error."""
    detail = f"claude failed: {_one_line(text) or 'no message'}"
    if _CLI_AUTH_RE.search(text):
        return ReplyFailed("auth", detail, usage)
    if _CLI_QUOTA_RE.search(text):
        return ReplyFailed("quota", detail, usage)
    return ReplyFailed("error", detail, usage)


class ClaudeCliClient:
    """``claude -p --output-format json`` with the user message on stdin, the system prompt replaced, one turn
    and no tools. Runs in the temporary directory (no project instructions are loaded) with
    ``MEMCAIRN_CAPTURE_CHILD=1`` so its own hooks are ignored by memcairn."""

    name = "claude-cli"

    def __init__(self, settings: Settings, *, timeout: float | None = None) -> None:
        self.executable = settings.claude_cli.strip() or "claude"
        self.model = settings.llm_model.strip() or CLAUDE_CLI_DEFAULT_MODEL
        self.timeout = float(timeout if timeout is not None else settings.llm_timeout_seconds)

    def argv(self, system: str) -> list[str]:
        return [
            self.executable, "-p", "--output-format", "json", "--model", self.model, "--system-prompt", system,
            # ``--tools ""`` is the CLI's own "no tools at all": a deny list names only the tools of the version
            # it was written for (2.1.332 still offered six others, ToolSearch and its deferred tools among them)
            "--max-turns", "1", "--tools", "", "--strict-mcp-config",
        ]

    @staticmethod
    def child_env() -> dict[str, str]:
        env = dict(os.environ)
        env[CAPTURE_CHILD_ENV] = "1"
        # A claude started from inside a Claude Code session would otherwise refuse to run nested.
        env.pop("CLAUDECODE", None)
        return env

    def complete(self, system: str, user: str, max_tokens: int) -> tuple[str, Usage]:
        try:
            done = self._run(system, user)
        except subprocess.TimeoutExpired:
            raise CompressionFailed("timeout", f"claude did not answer within {self.timeout:g} s") from None
        except (FileNotFoundError, NotADirectoryError):
            raise ClientUnavailable("error", f"claude executable not found ({self.executable!r}): "
                                             "set claude_cli") from None
        except PermissionError:
            raise ClientUnavailable("error", f"claude executable {self.executable!r} cannot be run: "
                                             "set claude_cli") from None
        except OSError as exc:
            raise CompressionFailed("error", f"cannot run claude ({self.executable!r}): {exc}") from None
        result = _cli_result(done.stdout)
        if result is None:
            if done.returncode != 0:
                raise cli_failure(done.stderr or done.stdout or f"exit status {done.returncode}")
            text = done.stdout.strip()
            return text, Usage(self.name, self.model, estimate_tokens(system, user), estimate_tokens(text))
        text = str(result.get("result") or "")
        usage = self._usage(result, system, user, text)
        if result.get("is_error") or done.returncode != 0:
            message = text or done.stderr or str(result.get("subtype") or f"exit status {done.returncode}")
            raise cli_failure(message, usage)
        if result.get("subtype") not in (None, "success"):
            raise ReplyFailed("error", f"claude stopped with {result.get('subtype')}", usage)
        return text, usage

    def _run(self, system: str, user: str) -> subprocess.CompletedProcess[str]:
        """Run ``claude`` in a process group of its own: on a timeout, or output past ``MAX_BODY_BYTES``, the
        whole group is killed, so a wrapper script's node process (or anything else it started) does not
        linger, still holding the pipes open."""
        with subprocess.Popen(
            self.argv(system), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.child_env(), cwd=tempfile.gettempdir(), start_new_session=True,
        ) as process:
            try:
                stdout, stderr = _exchange(process, user.encode("utf-8"), self.timeout, MAX_BODY_BYTES)
            except BaseException:  # the timeout, too much output, or the worker stopping mid-call
                _kill_group(process)
                raise
        return subprocess.CompletedProcess(process.args, process.returncode, _cli_text(stdout), _cli_text(stderr))

    def _usage(self, result: dict[str, Any], system: str, user: str, text: str) -> Usage:
        model_usage = result.get("modelUsage")
        model = next(iter(model_usage), self.model) if isinstance(model_usage, dict) and model_usage else self.model
        raw = result.get("usage") if isinstance(result.get("usage"), dict) else {}
        if not raw:
            return Usage(self.name, model, estimate_tokens(system, user), estimate_tokens(text))
        tokens_in = sum(_int(raw.get(key)) for key in
                        ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        return Usage(self.name, model, tokens_in, _int(raw.get("output_tokens")))


def _exchange(process: subprocess.Popen[bytes], data: bytes, timeout: float, limit: int) -> tuple[bytes, bytes]:
    """``process.communicate(data, timeout)`` with the output bounded: a CLI run away (or a wrapper catting a
    log) cannot fill memory. More than ``limit`` bytes on stdout fails the call, as a body that large fails an
    HTTP call; stderr past ``limit`` is dropped (it only ever explains a failure).

    Raises:
        subprocess.TimeoutExpired: the process did not finish within ``timeout`` seconds.
        CompressionFailed: ``error``, stdout went past ``limit``.
    """
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    deadline = time.monotonic() + timeout
    output = {process.stdout: bytearray(), process.stderr: bytearray()}
    pending = memoryview(data)
    with selectors.DefaultSelector() as selector:
        for stream in output:
            selector.register(stream, selectors.EVENT_READ)
        if pending:
            selector.register(process.stdin, selectors.EVENT_WRITE)
        else:
            process.stdin.close()
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(process.args, timeout)
            for key, _ in selector.select(remaining):
                if key.fileobj is process.stdin:
                    pending = _feed(selector, process.stdin, pending)
                    continue
                chunk = os.read(key.fd, _READ_CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                kept = output[key.fileobj]
                if key.fileobj is process.stdout and len(kept) + len(chunk) > limit:
                    raise CompressionFailed("error", f"claude printed more than {limit:,} bytes (MAX_BODY_BYTES, "
                                                     "the bound on one answer); its output was dropped")
                kept += chunk[:max(limit - len(kept), 0)]
    try:
        process.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:  # closed its pipes yet went on running
        raise subprocess.TimeoutExpired(process.args, timeout) from None
    return bytes(output[process.stdout]), bytes(output[process.stderr])


def _feed(selector: selectors.BaseSelector, stdin: IO[bytes], pending: memoryview) -> memoryview:
    """Write the next piece of ``pending`` to ``stdin`` (a pipe ready for it: at most ``PIPE_BUF`` bytes, which
    never block); closed once all is written, or when the process stopped reading."""
    try:
        written = os.write(stdin.fileno(), pending[:select.PIPE_BUF])
    except BrokenPipeError:
        written = len(pending)
    pending = pending[written:]
    if not pending:
        selector.unregister(stdin)
        try:
            stdin.close()
        except BrokenPipeError:
            pass
    return pending


def _cli_text(raw: bytes) -> str:
    """The CLI's output as text, as ``text=True`` would give it: UTF-8 (a broken byte spoils one character) with
    universal newlines."""
    return raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` and everything in its process group, then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def _cli_result(stdout: str) -> dict[str, Any] | None:
    """The result object of ``--output-format json`` (older versions print a list of messages ending in it).
    Lines printed around it (an update notice, a wrapper script's echo) are passed over: else the raw JSON,
    escapes and all, would be taken for the model's reply and its usage and ``is_error`` ignored."""
    whole = _json_result(stdout)
    if whole is not None:
        return whole
    for line in reversed(stdout.splitlines()):
        found = _json_result(line) if line.lstrip().startswith(("{", "[")) else None
        if found is not None and found.get("type") == "result":
            return found
    return None


def _json_result(text: str) -> dict[str, Any] | None:
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    if isinstance(payload, list):
        results = [item for item in payload if isinstance(item, dict) and item.get("type") == "result"]
        return results[-1] if results else None
    return payload if isinstance(payload, dict) else None
