"""The team server's HTTP/1.1 connection: uvicorn's httptools protocol (what ``http="auto"`` picks when httptools
is installed) with read deadlines, so a request head or body trickled in is answered 408 and closed
(``worker.read_deadlines``). Importing this module fails without httptools: ``run.http_protocol`` then takes
the worker's h11 protocol, which has the same deadlines."""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from memcairn.worker.read_deadlines import ReadDeadlines, declared_length


class ServerProtocol(ReadDeadlines, HttpToolsProtocol):
    """``HttpToolsProtocol`` telling the deadlines where each request is."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._expect_head()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._expect_body(declared_length(self.headers))

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._body_arrived(len(body))

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._request_read()
