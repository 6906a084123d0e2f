"""Several server processes on one port, each listening on a socket of its own (``SO_REUSEPORT``).

Why not uvicorn's own workers, which share one listening socket: a process keeps each connection it accepts, and
a keep-alive client (an agent's forwarder, a bench client) stays on it. With one shared socket whichever process
wakes first takes most of a burst of new connections (34 of 50 against 16 in a run here), so one process queues
requests while the other has little to do, and the slowest requests wait on the busy one (a fused search's p95
was twice its median). With a socket each, the kernel spreads new connections over the sockets by a hash of their
addresses.

The parent only supervises: it checks the port is free (as a single process would, so a second server on the
same port fails instead of sharing it), starts the processes, starts another when one dies (a process that dies
within seconds of starting, three times in a row, stops the server), and on SIGTERM or SIGINT stops them all,
each finishing its requests. A process stops by itself when its parent is killed (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import time
from typing import Any

log = logging.getLogger(__name__)

QUICK_EXIT_SECONDS = 5.0  # a process that dies sooner than this after its start counts as failing to start
MAX_QUICK_EXITS = 3
STOP_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1


def listening_socket(host: str, port: int, *, shared: bool) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``shared``: with ``SO_REUSEPORT``, beside the other processes')."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _serve_one(host: str, port: int, options: dict[str, Any]) -> None:
    """One process: its own socket on the port, the app built by ``server.run.worker_app``."""
    import uvicorn

    with contextlib.suppress(OSError, AttributeError):  # not Linux: the parent's stop still reaches it
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the line above
        return
    sock = listening_socket(host, port, shared=True)
    sock.listen(2048)
    config = uvicorn.Config("memcairn.server.run:worker_app", factory=True, **options)
    uvicorn.Server(config).run(sockets=[sock])


def run_processes(host: str, port: int, count: int, options: dict[str, Any]) -> int:
    """Serve with ``count`` processes until SIGTERM or SIGINT (0), or until processes keep failing to start (1).

    Raises:
        OSError: the port is taken (by a program that does not share it).
    """
    listening_socket(host, port, shared=False).close()  # free, or OSError as a single process would raise
    context = multiprocessing.get_context("spawn")
    stopping = False

    def start() -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_serve_one, args=(host, port, options), name="memcairn-server")
        process.start()
        return process

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    processes = [start() for _ in range(count)]
    started = [time.monotonic()] * count
    quick_exits = 0
    try:
        while not stopping:
            time.sleep(0.2)
            for n, process in enumerate(processes):
                if process.is_alive() or stopping:
                    continue
                quick_exits = quick_exits + 1 if time.monotonic() - started[n] < QUICK_EXIT_SECONDS else 0
                if quick_exits >= MAX_QUICK_EXITS:
                    log.error("server processes keep exiting as they start (last exit code %s); stopping",
                              process.exitcode)
                    return 1
                log.warning("server process %s exited (code %s); starting another", process.pid, process.exitcode)
                processes[n], started[n] = start(), time.monotonic()
        return 0
    finally:
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
