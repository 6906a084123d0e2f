"""One agent's world for an end-to-end test: a fresh HOME, memcairn installed into it, a worker, and reads of
what reached the worker (the store's SQLite file, read-only)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_helpers import processes_with
from processes import free_port

MEMCAIRN = str(Path(sys.executable).with_name("memcairn"))
NODE_DIR = str(Path(os.path.realpath(shutil.which("node") or "/usr/bin/node")).parent)  # the launchers run node


@dataclass
class World:
    home: Path  # the agent's HOME, fresh
    workspace: Path  # the agent's working directory
    env: dict[str, str]

    @classmethod
    def make(cls, root: Path) -> World:
        home, workspace = root / "home", root / "work" / "e2e-shop"
        home.mkdir(parents=True)
        workspace.mkdir(parents=True)
        keep = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.update({
            "HOME": str(home), "PATH": f"{Path(MEMCAIRN).parent}:{env.get('PATH', '')}:{NODE_DIR}",
            "MEMCAIRN_HOME": str(home / ".memcairn"), "MEMCAIRN_PORT": str(free_port()),
            "MEMCAIRN_EMBEDDING_MODEL": "hash", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        })
        return cls(home, workspace, env)

    @property
    def db(self) -> Path:
        return Path(self.env["MEMCAIRN_HOME"]) / "memcairn.db"

    def memcairn(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([MEMCAIRN, *args], env=self.env, cwd=self.workspace, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"memcairn {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def install(self, agent: str) -> None:
        self.before_install = {path: self._read(path) for path in self.agent_files(agent)}
        self.memcairn("install", agent)

    # -- the agent's own files, before memcairn's install and after its uninstall ---------------------------
    def agent_files(self, agent: str) -> list[Path]:
        """The files ``memcairn install <agent>`` edits in this HOME."""
        return {"claude-code": [self.home / ".claude" / "settings.json", self.home / ".claude.json"],
                "codex": [self.home / ".codex" / "config.toml", self.home / ".codex" / "hooks.json"],
                "gemini": [self.home / ".gemini" / "settings.json"]}[agent]

    @staticmethod
    def _read(path: Path) -> bytes | None:
        return path.read_bytes() if path.exists() else None

    def uninstall_leaves_the_agent_as_before(self, agent: str) -> list[str]:
        """``memcairn uninstall <agent>`` after the agent ran: each file memcairn edited has its bytes from before
        the install, or, where the agent itself rewrote it meanwhile (Claude Code rewrites ~/.claude.json), no
        trace of memcairn; no backup and no install record is left. Returns what differs from before, and why."""
        self.memcairn("uninstall", agent)
        differs = []
        for path, before in self.before_install.items():
            now = self._read(path)
            if now == before:
                continue
            assert now is None or b"memcairn" not in now, f"{path} keeps memcairn's entries:\n{now.decode()[:2000]}"
            differs.append(f"{path.relative_to(self.home)}: {'gone' if now is None else 'rewritten by the agent'}"
                           f" ({'absent' if before is None else f'{len(before)} bytes'} before)")
        leftovers = [str(p.relative_to(self.home)) for p in self.home.rglob("*")
                     if ".memcairn-bak-" in p.name or p.name == "install-state.json"]
        assert leftovers == [], leftovers
        return differs

    def start_worker(self) -> None:
        self.memcairn("worker", "start", "--json")

    def stop(self) -> None:
        try:
            subprocess.run([MEMCAIRN, "worker", "stop"], env=self.env, capture_output=True, timeout=20)
        finally:
            home = Path(self.env["MEMCAIRN_HOME"])
            for pid in processes_with(home, b"worker", b"run") + processes_with(home, b"mcp"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # -- what reached the worker -------------------------------------------------------------------------
    def rows(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10) as conn:
            conn.row_factory = sqlite3.Row
            return list(conn.execute(sql, params))

    def events(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The hook events queued by the worker, oldest first, with their decoded payloads."""
        sql = "SELECT session_id, event_type, tool_use_id, payload, status FROM ingest_events"
        found = self.rows(sql + (" WHERE session_id = ?" if session_id else "") + " ORDER BY id",
                          *((session_id,) if session_id else ()))
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in found]

    def items(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows("SELECT * FROM memory_items ORDER BY id")]

    def wait_until(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
            time.sleep(0.25)

    def settled(self, timeout: float = 60) -> None:
        """Wait until no event waits in the hooks' spool (kept while the worker could not take it) nor in the queue
        (the capture pipeline has stored what it will)."""
        spool = Path(self.env["MEMCAIRN_HOME"]) / "spool"
        self.wait_until(lambda: not any(spool.glob("*.event")) and self.db.exists() and not self.rows(
            "SELECT 1 FROM ingest_events WHERE status = 'pending' LIMIT 1"), timeout, "the spool and queue to drain")
