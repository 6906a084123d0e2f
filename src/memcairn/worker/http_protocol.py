"""The worker's HTTP/1.1 connection: uvicorn's h11 protocol, with an oversized request head answered instead of
reset, and read deadlines (``read_deadlines``: a head or a body trickled in is answered 408 and closed).

uvicorn hands h11 every byte and, when the request line and headers outgrow h11's buffer, writes a 400 and
closes the socket at once. The client is still sending its long query string, so the kernel answers the unread
bytes with a reset and the client sees ``connection reset`` instead of an answer. Here a head longer than
``MAX_HEAD_BYTES`` is refused before h11 sees it: 414 when the request line itself is that long (a query string
of 200 KB), 431 when the headers are; the answer is written, the sending side of the socket closed, and what the
client still sends is read and dropped for ``LINGER_SECONDS`` (a lingering close), so the answer arrives.
"""

from __future__ import annotations

import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from memcairn.transfer.transcript_access import CALLER
from memcairn.worker.read_deadlines import ReadDeadlines, declared_length

MAX_HEAD_BYTES = 64 * 1024  # a request line and headers, together; the hooks' longest is a few KB
H11_BUFFER_BYTES = MAX_HEAD_BYTES + 1024 * 1024  # h11's own limit: never reached first (see data_received)
LINGER_SECONDS = 2.0


def _refusal(status: int, reason: str, error: str, detail: str) -> bytes:
    body = json.dumps({"error": error, "detail": detail}).encode("utf-8")
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode("ascii") + body


URI_TOO_LONG = _refusal(414, "URI Too Long", "uri_too_long",
                        f"the request line is longer than {MAX_HEAD_BYTES:,} bytes; send long input in a JSON body "
                        "(POST) or shorten the query")
HEADERS_TOO_LARGE = _refusal(431, "Request Header Fields Too Large", "headers_too_large",
                             f"the request headers are larger than {MAX_HEAD_BYTES:,} bytes")


class BoundedHeadProtocol(ReadDeadlines, H11Protocol):
    """``H11Protocol`` refusing a request head over ``MAX_HEAD_BYTES`` with 414 or 431 (module docstring), with
    read deadlines for a head or a body that arrives too slowly (``read_deadlines``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the answer is out: what the client still sends is dropped
        # the request's task (made below, by h11's handling) inherits who is connected: whose files it may read
        CALLER.set((self.client, self.server) if self.client and self.server else None)
        if self.conn.their_state is h11.IDLE:  # no whole request head yet: is this one too long?
            pending = self.conn.trailing_data[0]
            if len(pending) + len(data) > MAX_HEAD_BYTES:
                head = (pending + data[:MAX_HEAD_BYTES + 4])[:MAX_HEAD_BYTES + 4]
                if b"\r\n\r\n" not in head and b"\n\n" not in head:  # else: the head ends in time, a body follows
                    self._refuse(HEADERS_TOO_LARGE if b"\n" in head else URI_TOO_LONG)
                    return
        in_body = self._in_body
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.IDLE:
            if self.conn.trailing_data[0]:
                self._expect_head()
        elif state is h11.SEND_BODY:
            if in_body:
                self._body_arrived(len(data))
            else:
                self._expect_body(declared_length(self.headers))
        else:
            self._request_read()

    def _refuse(self, answer: bytes) -> None:
        self._refused = True
        self._request_read()  # no read deadline once the answer is out
        self.transport.write(answer)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
