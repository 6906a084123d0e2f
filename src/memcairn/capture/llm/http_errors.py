"""What a model server's failed answer stands for: HTTP statuses, error bodies (also relayed with HTTP 200),
``Retry-After``."""

from __future__ import annotations

import json
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any

from memcairn.capture.llm.transport import ServerFailed, one_line

ERROR_BODY_CHARS = 2000


def error_text(raw: bytes) -> str:
    """The useful part of an error body: type, code and message of a JSON error, else the raw text."""
    text = raw[:ERROR_BODY_CHARS].decode("utf-8", errors="replace")
    try:
        payload = json.loads(raw)
    except ValueError:
        return one_line(text)
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        parts = [str(error.get(key)) for key in ("type", "code", "message") if error.get(key)]
        return one_line(": ".join(parts)) if parts else one_line(text)
    if isinstance(error, str):
        return one_line(error)
    return one_line(text)


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
    text = error_text(json.dumps({"error": error}).encode("utf-8"))
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
    if choice_text(choice, message).strip():
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


def choice_text(choice: dict[str, Any], message: dict[str, Any]) -> str:
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
