"""Closed-loop HTTP/1.1 clients for the benchmarks: ``clients`` keep-alive connections on one asyncio loop in the
calling thread, each sending its next request when the last was answered.

Why not a thread per client: fifty Python threads in one process take turns on one interpreter lock, and a
thread whose answer has arrived waits its turn before it can stop its clock. Against one server, one run with
25 clients, the same median (53-55 ms), the p95 was 94-103 ms measured by threads and 60 ms measured here: the
difference was the load generator's own queue, not the server's. Independent agents do not share a lock; one
event loop that only reads and writes sockets comes closer to them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

Request = tuple[str, str, bytes | None, dict[str, str]]  # method, path, body, extra headers


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


# called for each request, in the order answers arrive: its index, its latency in ms (from when it was sent, or
# due with a rate), and the reply or what went wrong (a connection error, a timeout, an unreadable answer)
OnReply = Callable[[int, float, Reply | str], None]


def run_clients(port: int, requests: Sequence[Request], clients: int, on_reply: OnReply, *,
                headers: Mapping[str, str] | None = None, rate: float | None = None, timeout: float = 60.0,
                host: str = "127.0.0.1") -> float:
    """Send every request once from ``clients`` connections (opened before the clock starts); with ``rate`` the
    requests are offered at that many per second in all (request n is due at n / rate) and a latency counts
    from when its request was due. A connection that fails is opened again for the next request. Returns the
    wall time in seconds."""
    return asyncio.run(_run(host, port, requests, clients, on_reply, dict(headers or {}), rate, timeout))


async def _run(host: str, port: int, requests: Sequence[Request], clients: int, on_reply: OnReply,
               common: dict[str, str], rate: float | None, timeout: float) -> float:
    work = iter(enumerate(requests))
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None] = list(
        await asyncio.gather(*(_connect(host, port, timeout) for _ in range(clients))))
    start = time.perf_counter()

    async def client(slot: int) -> None:
        for index, (method, path, body, extra) in work:
            if rate:
                t0 = start + index / rate
                await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
            else:
                t0 = time.perf_counter()
            try:
                conn = conns[slot] = conns[slot] or await _connect(host, port, timeout)
                if conn is None:
                    raise ConnectionRefusedError(f"cannot connect to {host}:{port}")
                reply, keep = await asyncio.wait_for(_exchange(*conn, method, path, body, {**common, **extra}),
                                                     timeout)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:  # timeouts too
                _close(conns[slot])
                conns[slot] = None
                on_reply(index, (time.perf_counter() - t0) * 1000, f"{path}: {type(exc).__name__}: {exc}")
                continue
            latency = (time.perf_counter() - t0) * 1000
            if not keep:
                _close(conn)
                conns[slot] = None
            on_reply(index, latency, reply)

    try:
        await asyncio.gather(*(client(slot) for slot in range(clients)))
        return time.perf_counter() - start
    finally:
        for conn in conns:
            _close(conn)


async def _connect(host: str, port: int, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.wait_for(asyncio.open_connection(host, port, limit=2**24), timeout)
    except OSError:  # refused, or timed out
        return None  # the first request tries again and reports what failed


def _close(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None) -> None:
    if conn is not None:
        conn[1].close()


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, path: str,
                    body: bytes | None, headers: dict[str, str]) -> tuple[Reply, bool]:
    """One request and its answer; and whether the connection stays open."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    named = {name.strip().lower(): value.strip() for name, _, value in (f.partition(":") for f in fields if f)}
    if named.get("transfer-encoding", "").lower() == "chunked":
        payload = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            payload += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
    else:
        payload = await reader.readexactly(int(named.get("content-length", "0")))
    return Reply(status, payload), named.get("connection", "").lower() != "close"
