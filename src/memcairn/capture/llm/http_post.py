"""One JSON POST to a model server: bounded in time and size, no redirects, no proxy for this machine."""

from __future__ import annotations

import http.client
import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from memcairn.capture.llm.http_errors import ERROR_BODY_CHARS, error_text, http_failure, retry_after_seconds
from memcairn.capture.llm.transport import MAX_BODY_BYTES, READ_CHUNK, ClientUnavailable, one_line
from memcairn.capture.records import CompressionFailed


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
        chunk = response.read1(READ_CHUNK)
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
    return post_json_retry_after(url, headers, body, timeout, label)[0]


def post_json_retry_after(url: str, headers: dict[str, str], body: dict[str, Any], timeout: float,
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
                                             f"{one_line(target, 200) or '?'}: "
                                             "set llm_base_url to the address it names") from None
        retry_after = retry_after_seconds(exc.headers.get("retry-after") if exc.headers else None)
        try:
            text = error_text(exc.read(ERROR_BODY_CHARS * 4))
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
                                         f"{one_line(raw[:200].decode('utf-8', 'replace'))}") from None
    if not isinstance(payload, dict):
        raise CompressionFailed("error", f"{label} answered JSON that is not an object")
    return payload, retry_after
