"""Finding the processes a test started, by the ``MEMCAIRN_HOME`` they serve (read from /proc), and waiting for
what they do."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def processes_of(home: Path, match: Callable[[list[bytes]], bool]) -> list[int]:
    """Live (not zombie) processes whose environment has ``MEMCAIRN_HOME=home`` and whose argv ``match``es."""
    marker = f"MEMCAIRN_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and marker in environ and match(argv):
            found.append(int(entry.name))
    return found


def with_args(*words: bytes) -> Callable[[list[bytes]], bool]:
    """argv holds every one of ``words`` as a whole argument."""
    return lambda argv: all(w in argv for w in words)


def mentioning(*parts: bytes) -> Callable[[list[bytes]], bool]:
    """The command line holds every one of ``parts`` somewhere (also inside ``-c`` code)."""
    return lambda argv: all(p in b" ".join(argv) for p in parts)


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "the condition",
             interval: float = 0.1) -> Any:
    """``check()``'s first true value, asked every ``interval`` seconds; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
