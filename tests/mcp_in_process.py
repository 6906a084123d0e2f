"""A transport for the MCP SDK's client that hands each message to an ``McpServer`` in this process.

The server's own stdio loop is tested over real pipes elsewhere; this keeps the tests that pass a
``MemoryTools`` with a stand-in worker in process, still spoken to by the SDK's client (both eras)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.shared.message import SessionMessage

from memcairn.mcp.protocol import McpServer


@asynccontextmanager
async def in_process(server: McpServer) -> AsyncIterator[tuple[Any, Any]]:
    """(read, write) streams for ``mcp.Client``: what the client writes is answered by ``server.answer``."""
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](32)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](32)

    async def answer(raw: dict[str, Any]) -> None:
        found = await anyio.to_thread.run_sync(server.answer, raw)
        if found is not None:
            await to_client.send(SessionMessage(types.jsonrpc_message_adapter.validate_python(found)))

    async def pump() -> None:
        async with anyio.create_task_group() as calls:
            async for sent in from_client:
                raw = sent.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                calls.start_soon(answer, raw)

    async with to_server, from_client, to_client, from_server, anyio.create_task_group() as tasks:
        tasks.start_soon(pump)
        try:
            yield from_server, to_server
        finally:
            tasks.cancel_scope.cancel()
