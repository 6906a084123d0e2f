"""What every model transport shares: the client protocol, the failures it raises, and its small readers.

Each client answers ``complete(system, user, max_tokens) -> (reply text, Usage)`` and turns every transport
problem into ``CompressionFailed`` with one of its reasons, so the pipeline can fall back to the offline
extractor and tell the person why. Only the standard library is used.
"""

from __future__ import annotations

from typing import Any, Protocol

from memcairn.capture.records import CompressionFailed, Usage

# A reply asked for with max_tokens of a few thousand is some kilobytes; a body far larger is not one.
MAX_BODY_BYTES = 8 * 1024 * 1024
READ_CHUNK = 64 * 1024


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


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def usage_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
