"""The worker in the foreground: ``run_foreground`` serves until SIGTERM/SIGINT, then drains.

It holds ``worker.lock`` for its whole life and writes ``worker.pid`` once the port is bound (the files and
starting, stopping and finding a worker in the background are ``memcairn.wire.lifecycle``'s); ``logs/worker.log``
is the rotating log (``logs.py``) and ``logs/worker-stderr.log`` is cut to its recent tail while the worker
runs (``logs.watch_stderr_file``). This module imports the web stack only when it serves.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from memcairn.wire.config import Settings, check_bind, is_loopback_host, load_settings, private_home
from memcairn.wire.lifecycle import (
    POLL,
    STDERR_FILE,
    current_version,
    lock_path,
    logs_unusable,
    read_pid_file,
    remove_pid_file,
    try_flock,
    write_pid_file,
)
from memcairn.worker.logs import setup_logging, watch_stderr_file
from memcairn.worker.security import TOKEN_PARAM

GRACEFUL_SECONDS = 10


# -- run --------------------------------------------------------------------------------------------
TOKEN_PLACEHOLDER = "<MEMCAIRN_TOKEN>"


def _outward_address() -> str | None:
    """This machine's address on its default route (a UDP ``connect`` sends nothing), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe_sock:
            probe_sock.connect(("10.255.255.255", 9))
            address = probe_sock.getsockname()[0]
    except OSError:
        return None
    return None if is_loopback_host(address) or address == "0.0.0.0" else address


def viewer_url(cfg: Settings) -> str:
    """The viewer's address as the worker logs it. Off loopback it ends in ``?token=<MEMCAIRN_TOKEN>``: the
    person opens it once per browser with their token in its place (the worker answers with a cookie and
    drops the token from the address). The token itself is never written: logs are kept and shared, and the
    person who set the token knows it."""
    host = cfg.host.strip().strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = _outward_address() or "<this machine's address>"
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{cfg.port}/"
    return url if is_loopback_host(cfg.host) else f"{url}?{TOKEN_PARAM}={TOKEN_PLACEHOLDER}"


def _bind(cfg: Settings) -> socket.socket:
    """The listening socket, created with an explicit TCP protocol number.

    asyncio turns Nagle's algorithm off only for sockets whose ``proto`` is ``IPPROTO_TCP``; connections
    accepted from a ``proto=0`` socket keep it on, and every answer after the first on a keep-alive
    connection then waits ~40 ms for the client's delayed ACK.
    """
    infos = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    family, _, proto, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def run_foreground(cfg: Settings | None = None, echo: Callable[[str], None] | None = None) -> int:
    """Serve in this process until SIGTERM/SIGINT. Exit code 0 also when another worker already runs.

    Raises:
        ConfigError: a non-loopback host without a token.
    """
    # numpy's BLAS would start a thread per core for the vector index's small products and spin them while
    # requests wait; the worker's parallelism comes from serving requests side by side. Set before numpy
    # is first imported (the store and the mirror import it later); a value the person set is kept.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    say = echo or (lambda text: print(text, file=sys.stderr))
    cfg = cfg or load_settings()
    check_bind(cfg)
    private_home(cfg.home, create=True)  # 0700, and 0600 for the files it creates
    lock_fd = None
    for _ in range(10):  # a probe (status, start) may hold the lock for a moment
        lock_fd = try_flock(lock_path(cfg))
        if lock_fd is not None:
            break
        time.sleep(POLL)
    if lock_fd is None:
        other = read_pid_file(cfg) or {}
        say(f"a memcairn worker is already running for {cfg.home} (pid {other.get('pid', '?')}, "
            f"port {other.get('port', '?')})")
        return 0
    holder: dict[str, Any] = {}

    def on_signal(sig: int, frame: Any) -> None:
        holder["signalled"] = True
        server = holder.get("server")
        if server is not None:
            server.handle_exit(sig, frame)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            setup_logging(cfg)
        except OSError as exc:
            say(f"error: {logs_unusable(cfg, exc)}")
            return 1
        watch_stderr_file(cfg.logs_dir / STDERR_FILE, cfg.log_max_bytes)
        log = logging.getLogger("memcairn.worker")
        try:
            sock = _bind(cfg)
        except OSError as exc:
            log.error("cannot listen on %s:%s: %s", cfg.host, cfg.port, exc)
            if exc.errno == errno.EADDRINUSE:
                advice = "another program uses the port: set MEMCAIRN_PORT to a free one"
            else:
                advice = f"check MEMCAIRN_HOST ({cfg.host!r} must be an address of this machine) and MEMCAIRN_PORT"
            say(f"error: cannot listen on {cfg.host}:{cfg.port} ({exc.strerror or exc}); {advice}")
            return 1
        write_pid_file(cfg, {"pid": os.getpid(), "port": cfg.port, "host": cfg.host, "version": current_version(),
                             "started_at": int(time.time())})
        try:
            if not holder.get("signalled"):
                log.info("worker %s (pid %d) listening on %s:%d", current_version(), os.getpid(), cfg.host, cfg.port)
                log.info("viewer: %s", viewer_url(cfg))
                _serve(cfg, sock, holder)
        finally:
            sock.close()
            remove_pid_file(cfg, os.getpid())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(lock_fd)  # releases the lock, after the pid file is gone
    return 0


def _serve(cfg: Settings, sock: socket.socket, holder: dict[str, Any]) -> None:
    # here: the app imports numpy (the store, the mirror), which must come after run_foreground set the BLAS
    # thread counts; `memcairn worker` commands other than run import this module without serving
    import uvicorn

    from memcairn.worker.app import make_app
    from memcairn.worker.http_protocol import H11_BUFFER_BYTES, BoundedHeadProtocol

    app = make_app(None, cfg)
    state = app.state.worker

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            state.begin_drain()  # new writes get 503 and event streams end, so the drain can finish
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_config=None, access_log=False, lifespan="on",
                            loop="asyncio", http=BoundedHeadProtocol, ws="none", server_header=False,
                            proxy_headers=False, timeout_graceful_shutdown=GRACEFUL_SECONDS,
                            h11_max_incomplete_event_size=H11_BUFFER_BYTES)
    server = Server(config)
    holder["server"] = server
    if holder.get("signalled"):
        return
    server.run(sockets=[sock])
