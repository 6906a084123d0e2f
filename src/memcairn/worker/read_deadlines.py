"""Read deadlines of an HTTP/1.1 connection, for uvicorn's protocols (the worker's h11 one, the team server's).

uvicorn times out only a connection idle between requests (keep-alive). A client sending its request head a
byte a second, or a body two bytes a second, held its connection (and the request's task) for as long as it
liked. Here a request head must arrive whole within ``HEAD_SECONDS`` of its first byte (of the connection, for
a new one), and a body within ``BODY_FLOOR_SECONDS`` plus one second per ``BODY_BYTES_PER_SECOND`` of its size
(its ``Content-Length``, or what arrived of a chunked one): a client on loopback sends megabytes a second, so
an honest one never comes near. Past its deadline the client gets 408 when no answer has started, and the
connection is closed (a new connection that sent nothing at all is closed without a word, as uvicorn closes
an idle one).

The protocol tells the mixin where the request is (``_expect_head``, ``_expect_body``, ``_body_arrived``,
``_request_read``): h11 and httptools report it differently.
"""

from __future__ import annotations

import asyncio
from typing import Any

HEAD_SECONDS = 5.0
BODY_FLOOR_SECONDS = 5.0
BODY_BYTES_PER_SECOND = 64 * 1024
_BODY = b'{"error": "request_timeout", "detail": "the request did not arrive in time; send it whole, at once"}'
REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                   b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_BODY)) + _BODY


def declared_length(headers: list[tuple[bytes, bytes]]) -> int:
    """A request's ``Content-Length`` (0 when absent or not a number: the parser refuses the latter itself)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return max(0, int(value))
            except ValueError:
                return 0
    return 0


class ReadDeadlines:
    """Mixed into a uvicorn HTTP protocol (first among its bases): see the module docstring."""

    head_seconds = HEAD_SECONDS
    body_floor_seconds = BODY_FLOOR_SECONDS
    body_bytes_per_second = BODY_BYTES_PER_SECOND
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _deadline: asyncio.TimerHandle | None = None
    _in_body = False
    _nothing_sent = False  # the deadline is a new connection's, which has sent no byte yet
    _body_since = 0.0
    _body_declared = 0
    _body_received = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._expect_head()  # a new connection owes its first request head
        self._nothing_sent = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _expect_head(self) -> None:
        """A request head has begun (or is owed): it must be whole in time. A running deadline is kept."""
        self._nothing_sent = False
        if self._deadline is None and not self._in_body:
            self._deadline = self.loop.call_later(self.head_seconds, self._too_slow)

    def _expect_body(self, declared: int) -> None:
        self._disarm()
        self._nothing_sent = False
        self._in_body, self._body_since, self._body_declared, self._body_received = True, self.loop.time(), declared, 0
        self._deadline = self.loop.call_at(self._body_deadline(), self._too_slow)

    def _body_arrived(self, count: int) -> None:
        if self._in_body:
            self._body_received += count  # a chunked body's allowance grows with what came

    def _request_read(self) -> None:
        self._in_body = self._nothing_sent = False
        self._disarm()

    def _body_deadline(self) -> float:
        size = max(self._body_declared, self._body_received)
        return self._body_since + self.body_floor_seconds + size / self.body_bytes_per_second

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self._in_body and self.loop.time() < self._body_deadline():  # more of a chunked body came meanwhile
            self._deadline = self.loop.call_at(self._body_deadline(), self._too_slow)
            return
        if self.transport.is_closing():
            return
        cycle = getattr(self, "cycle", None)
        if not self._nothing_sent and (cycle is None or not cycle.response_started):
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()
