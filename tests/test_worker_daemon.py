"""The real worker process on a free loopback port: start, racing starts, stale pid files, version
replacement, readiness, stopping while writes arrive, and no processes left behind."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port, mentioning, processes_of

from memcairn.core.errors import MemcairnError, NotFoundError, WorkerUnavailableError
from memcairn.store import Store
from memcairn.wire import lifecycle
from memcairn.wire.client import WorkerClient, ensure_worker
from memcairn.wire.config import Settings, load_settings
from memcairn.worker import daemon

pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")


def worker_pids(home: Path) -> list[int]:
    """Live `memcairn worker run` processes (and stand-ins started with -c) serving this home."""
    return processes_of(home, mentioning(b"memcairn", b"run"))


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("MEMCAIRN_PORT", str(free_port()))
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    yield dict(os.environ)
    cfg = load_settings()
    try:
        lifecycle.stop(cfg, timeout=10)
    finally:
        for pid in worker_pids(isolated_home):  # last resort
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cfg(env: dict[str, str]) -> Settings:
    return load_settings()


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memcairn", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def status_json(env: dict[str, str]) -> dict[str, Any]:
    return json.loads(cli(env, "worker", "status", "--json").stdout)


def wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_start_status_stop(env: dict[str, str], cfg: Settings) -> None:
    down = cli(env, "worker", "status", "--json")
    assert down.returncode == 1 and json.loads(down.stdout)["running"] is False

    started = cli(env, "worker", "start", "--json")
    assert started.returncode == 0, started.stderr
    result = json.loads(started.stdout)
    assert result["action"] == "started" and result["ready"] is True and result["port"] == cfg.port
    client = WorkerClient(settings=cfg)
    assert client.get_json("/api/readiness") == {"status": "ready"}  # start returned once ready

    info = status_json(env)
    assert info["running"] is True and info["pid"] == result["pid"] and info["version"] == lifecycle.current_version()
    recorded = json.loads((cfg.home / "worker.pid").read_text())
    assert recorded["pid"] == result["pid"] and recorded["port"] == cfg.port
    assert worker_pids(cfg.home) == [result["pid"]]
    assert children_of(result["pid"]) == []  # the worker never spawns processes

    with pytest.raises(NotFoundError):
        client.get_json("/api/memory/999")
    saved = client.post_json("/api/memory/save", {"text": "through the client", "project": "demo"})
    assert client.get_json(f"/api/memory/{saved['id']}")["text"] == "through the client"

    again = json.loads(cli(env, "worker", "start", "--json").stdout)
    assert again["action"] == "running" and again["pid"] == result["pid"]
    second_run = cli(env, "worker", "run", timeout=20)
    assert second_run.returncode == 0 and "already running" in second_run.stderr
    restarted = json.loads(cli(env, "worker", "restart", "--json").stdout)
    assert restarted["stopped"] == {"stopped": True, "pid": result["pid"], "forced": False}
    assert restarted["started"]["action"] == "started" and restarted["started"]["pid"] != result["pid"]
    result = restarted["started"]

    stream = http.client.HTTPConnection("127.0.0.1", cfg.port, timeout=10)  # an open event stream must not
    stream.request("GET", "/stream")                                         # hold up the shutdown
    events = stream.getresponse()
    assert events.status == 200 and events.getheader("Content-Type").startswith("text/event-stream")
    client.post_json("/api/memory/save", {"text": "announced", "project": "demo"})
    seen = b""
    while b"event: item_added" not in seen:
        seen += events.read1(4096)

    began = time.monotonic()
    stopped = cli(env, "worker", "stop", "--json")
    assert json.loads(stopped.stdout) == {"stopped": True, "pid": result["pid"], "forced": False}
    assert time.monotonic() - began < 8
    while events.read1(4096):  # the stream ended with the worker
        pass
    stream.close()
    assert not lifecycle.process_alive(result["pid"]) and not (cfg.home / "worker.pid").exists()
    assert status_json(env)["running"] is False and worker_pids(cfg.home) == []
    assert json.loads(cli(env, "worker", "stop", "--json").stdout)["stopped"] is False
    assert "worker ready" in (cfg.logs_dir / "worker.log").read_text()


def test_status_and_stop_create_nothing_where_no_worker_ever_ran(env: dict[str, str], cfg: Settings) -> None:
    assert not cfg.home.exists()
    assert cli(env, "worker", "status", "--json").returncode == 1
    assert json.loads(cli(env, "worker", "stop", "--json").stdout)["stopped"] is False
    assert not cfg.home.exists()


def test_racing_starts_leave_one_worker(env: dict[str, str], cfg: Settings) -> None:
    procs = [subprocess.Popen([sys.executable, "-m", "memcairn", "worker", "start", "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    results = [json.loads(out) for out, _ in outs]
    assert sorted(r["action"] for r in results) == ["running", "started"]
    assert results[0]["pid"] == results[1]["pid"]
    assert worker_pids(cfg.home) == [results[0]["pid"]]


def test_stale_pid_file_is_cleaned_up(env: dict[str, str], cfg: Settings) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(gone.stdout)
    cfg.home.mkdir(parents=True, exist_ok=True)
    (cfg.home / "worker.pid").write_text(json.dumps({"pid": dead_pid, "port": cfg.port, "version": "0.0.1"}))
    assert status_json(env)["running"] is False
    result = json.loads(cli(env, "worker", "start", "--json").stdout)
    assert result["action"] == "started" and result["pid"] != dead_pid
    assert json.loads((cfg.home / "worker.pid").read_text())["pid"] == result["pid"]


OLD_WORKER = ("import sys, memcairn; memcairn.__version__ = '0.0.1+old'; from memcairn.cli.entry import main; "
              "sys.exit(main(['worker', 'run']))")


def test_start_replaces_a_worker_of_another_version(env: dict[str, str], cfg: Settings) -> None:
    old = subprocess.Popen([sys.executable, "-c", OLD_WORKER], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        info = wait_for(lambda: lifecycle.probe(cfg), what="the old worker")
        assert info["version"] == "0.0.1+old" and info["pid"] == old.pid
        result = json.loads(cli(env, "worker", "start", "--json").stdout)
        assert result["action"] == "replaced" and result["pid"] != old.pid
        assert old.wait(timeout=10) == 0  # it was stopped gracefully
        assert lifecycle.probe(cfg)["version"] == lifecycle.current_version()
        assert worker_pids(cfg.home) == [result["pid"]]
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


def test_readiness_is_503_until_startup_completes(env: dict[str, str], cfg: Settings) -> None:
    Store(cfg.db_path).close()
    blocker = sqlite3.connect(cfg.db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the worker's migration check waits for this lock
    proc = subprocess.Popen([sys.executable, "-m", "memcairn", "worker", "run"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        client = WorkerClient(settings=cfg, timeout=2)
        health = wait_for(lambda: lifecycle.probe(cfg), what="health")
        assert health["ready"] is False and health["state"] == "starting"
        status, _, body = client.request("GET", "/api/readiness")
        assert status == 503 and json.loads(body)["error"] == "not_ready"
        with pytest.raises(WorkerUnavailableError, match="not ready"):
            client.get_json("/api/stats")
        blocker.execute("COMMIT")
        wait_for(lambda: client.ready(), timeout=20, what="readiness")
        assert client.get_json("/api/stats")["items"] == 0
    finally:
        blocker.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()


def test_stop_while_writing_loses_no_acknowledged_write(env: dict[str, str], cfg: Settings) -> None:
    assert cli(env, "worker", "start").returncode == 0
    client = WorkerClient(settings=cfg, timeout=10)
    acknowledged: dict[int, str] = {}
    refused: list[str] = []
    finished = threading.Event()

    def writer() -> None:
        n = 0
        failures = 0
        while failures < 20 and not finished.is_set():
            n += 1
            text = f"memory number {n}"
            try:
                acknowledged[client.post_json("/api/memory/save", {"text": text, "project": "load"})["id"]] = text
                failures = 0
            except MemcairnError as exc:
                refused.append(str(exc))
                failures += 1
                time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: len(acknowledged) >= 30, what="some writes")
        stopped = cli(env, "worker", "stop", "--json")
        assert json.loads(stopped.stdout)["stopped"] is True and json.loads(stopped.stdout)["forced"] is False
    finally:
        thread.join(timeout=30)
        finished.set()
    assert refused, "the writer should have seen the worker go away"
    with Store(cfg.db_path) as store:
        items = {i.id: i.text for i in store.get_items(list(acknowledged))}
    assert items == acknowledged


def test_ensure_worker_starts_one_in_process(env: dict[str, str], cfg: Settings) -> None:
    client = ensure_worker(timeout=30)
    info = client.health()
    assert info["ready"] is True and info["port"] == cfg.port
    assert ensure_worker(timeout=5).health()["pid"] == info["pid"]
    result = lifecycle.stop(cfg, timeout=20)
    assert result == {"stopped": True, "pid": info["pid"], "forced": False}
    assert not lifecycle.process_alive(info["pid"])  # our own child: reaped, not left a zombie
    with pytest.raises(WorkerUnavailableError):
        client.health()


def test_run_refuses_a_public_bind_without_a_token(env: dict[str, str]) -> None:
    exposed = {**env, "MEMCAIRN_HOST": "0.0.0.0"}
    for command in (("worker", "run"), ("worker", "start")):
        result = cli(exposed, *command, timeout=20)
        assert result.returncode == 2 and "MEMCAIRN_TOKEN" in result.stderr and "Traceback" not in result.stderr


def test_accepted_connections_turn_nagle_off(cfg: Settings) -> None:
    """Without TCP_NODELAY every answer after the first on a keep-alive connection waits for a delayed ACK."""
    import asyncio

    sock = daemon._bind(cfg)

    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            option = writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            accepted.set_result(option)
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", cfg.port)
            option = await asyncio.wait_for(accepted, 10)
            writer.close()
            return option

    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert asyncio.run(accept_one()) != 0
    finally:
        sock.close()


def test_another_homes_worker_and_a_recycled_pid_are_left_alone(env: dict[str, str], cfg: Settings,
                                                                   tmp_path: Path) -> None:
    """A worker of home A on the port is not home B's: B's start refuses, B's status says not running and B's
    stop stops nothing; a stale pid file naming a live non-worker memcairn process does not get it killed."""
    import dataclasses

    ours = lifecycle.start(cfg)
    other = dataclasses.replace(cfg, home=tmp_path / "other-home")
    other.home.mkdir()
    with pytest.raises(WorkerUnavailableError, match="another home"):
        lifecycle.start(other, timeout=10)
    assert lifecycle.status(other)["running"] is False
    assert lifecycle.stop(other, timeout=5)["stopped"] is False
    assert lifecycle.process_alive(ours["pid"]) and lifecycle.status(cfg)["pid"] == ours["pid"]

    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "memcairn-mcp"])
    try:
        (other.home / "worker.pid").write_text(json.dumps({"pid": decoy.pid, "port": cfg.port, "version": "0.1.0"}))
        assert lifecycle.stop(other, timeout=5) == {"stopped": False, "pid": None, "forced": False}
        assert decoy.poll() is None, "stop killed a process that is not this home's worker"
        assert not (other.home / "worker.pid").exists()
    finally:
        decoy.kill()
        decoy.wait()


def test_start_refuses_an_out_of_range_port_and_a_blank_token(env: dict[str, str]) -> None:
    for port in ("0", "65536", "99999"):
        result = cli({**env, "MEMCAIRN_PORT": port}, "worker", "start", timeout=20)
        assert result.returncode == 2 and "between 1 and 65535" in result.stderr, result.stderr
    blank = cli({**env, "MEMCAIRN_HOST": "0.0.0.0", "MEMCAIRN_TOKEN": "   "}, "worker", "start", timeout=20)
    assert blank.returncode == 2 and "MEMCAIRN_TOKEN" in blank.stderr and "Traceback" not in blank.stderr


def test_log_rotation_caps_the_log_without_backups(cfg: Settings) -> None:
    """``log_backups = 0`` must still cap worker.log at ``log_max_bytes`` (the standard handler never rotates then)."""
    import dataclasses
    import logging

    from memcairn.worker import logs

    capped = dataclasses.replace(cfg, log_backups=0, log_max_bytes=4096)
    handler = logs.setup_logging(capped)
    try:
        log = logging.getLogger("memcairn.worker")
        for i in range(400):
            log.info("line %d %s", i, "x" * 60)
    finally:
        for name in logs.LOGGERS:
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).propagate = True
        handler.close()
    files = sorted(p.name for p in capped.logs_dir.iterdir())
    assert files == ["worker.log"]
    assert 0 < logs.log_path(capped).stat().st_size <= 4096
    assert "line 399" in logs.log_path(capped).read_text()


def test_the_stderr_file_is_cut_to_its_tail_while_the_worker_runs(tmp_path: Path) -> None:
    """A long-running worker's stderr file (native libraries' warnings, stray tracebacks) stays under
    ``log_max_bytes``: cut to its recent whole lines, and later writes still land at its end."""
    from memcairn.worker import logs

    path = tmp_path / lifecycle.STDERR_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # as spawn hands it to the worker
    try:
        others = set(threading.enumerate())
        stop = logs.watch_stderr_file(path, 4096, interval=0.02, fd=fd)
        try:
            for i in range(300):
                os.write(fd, f"warning {i} {'x' * 60}\n".encode())
            deadline = time.monotonic() + 5
            while path.stat().st_size > 4096 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            stop.set()
            for thread in set(threading.enumerate()) - others:  # a cut under way ends before the write below
                thread.join(5)
        os.write(fd, b"after the cut\n")
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert len(data) <= 4096 + 100 and b"\0" not in data  # no hole where the old content was
    lines = data.decode().splitlines()
    assert lines[0].startswith("[memcairn: earlier output cut") and lines[-1] == "after the cut"
    assert lines[-2].startswith("warning 299 ") and all(line.startswith("warning ") for line in lines[1:-1])


def test_only_the_workers_own_appended_stderr_file_is_cut(tmp_path: Path) -> None:
    """A file opened without O_APPEND (a hole would follow the cut) or another file than ``path`` (a foreground
    worker's stderr the person chose) is left alone."""
    from memcairn.worker import logs

    path, other = tmp_path / lifecycle.STDERR_FILE, tmp_path / "mine.log"
    for target, flags in ((path, os.O_WRONLY), (other, os.O_WRONLY | os.O_APPEND)):
        fd = os.open(target, flags | os.O_CREAT)
        try:
            os.write(fd, b"y" * 10_000)
            assert not logs.trim_stderr_file(path, 4096, fd)
        finally:
            os.close(fd)
        assert target.stat().st_size == 10_000


def test_an_unusable_logs_directory_is_one_clear_error(env: dict[str, str], cfg: Settings) -> None:
    cfg.home.mkdir(parents=True, exist_ok=True)
    cfg.logs_dir.write_text("not a directory")
    with pytest.raises(WorkerUnavailableError, match="cannot write its logs"):
        lifecycle.spawn(cfg)
    for command, code in ((("worker", "start", "--timeout", "10"), 2), (("worker", "run"), 1)):
        result = cli(env, *command, timeout=30)
        assert result.returncode == code, result.stderr
        assert "cannot write its logs" in result.stderr and "Traceback" not in result.stderr
    assert worker_pids(cfg.home) == []


def test_start_names_why_the_worker_could_not_listen(env: dict[str, str], cfg: Settings) -> None:
    """The port held by another program (bound, not listening: the probe is refused at once) or a host that is
    not this machine's: ``start`` says so instead of only pointing at the log files."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", cfg.port))
    try:
        with pytest.raises(WorkerUnavailableError, match="another program uses the port"):
            lifecycle.start(cfg, timeout=20)
    finally:
        blocker.close()
    foreign = cli({**env, "MEMCAIRN_HOST": "192.0.2.1", "MEMCAIRN_TOKEN": "a-long-random-secret"}, "worker", "run",
                  timeout=30)
    assert foreign.returncode == 1 and "check MEMCAIRN_HOST" in foreign.stderr
    assert "another program uses the port" not in foreign.stderr


def test_worker_commands_refuse_a_negative_or_endless_timeout(env: dict[str, str], cfg: Settings) -> None:
    """``stop --timeout -1`` used to SIGKILL at once (no drain); ``start --timeout nan`` could wait for ever."""
    running = lifecycle.start(cfg)
    for command in ("stop", "start", "restart"):
        for value in ("-1", "nan", "inf"):
            result = cli(env, "worker", command, "--timeout", value, timeout=30)
            assert result.returncode == 2 and "--timeout" in result.stderr, (command, value, result.stderr)
    assert lifecycle.status(cfg)["pid"] == running["pid"]


def test_start_while_the_last_worker_shuts_down_starts_a_new_one(env: dict[str, str], cfg: Settings) -> None:
    """A start that finds the lock held by a worker on its way out (SIGTERM just sent, port already closed) must
    not wait its whole timeout for that worker: once the lock is free it starts one."""
    leaving = lifecycle.try_flock(lifecycle.lock_path(cfg))  # stands in for a worker that is shutting down
    assert leaving is not None
    threading.Timer(1.0, os.close, (leaving,)).start()
    began = time.monotonic()
    result = lifecycle.start(cfg, timeout=10)
    assert result["action"] == "started" and result["ready"]
    assert time.monotonic() - began < 8
    assert lifecycle.status(cfg)["pid"] == result["pid"]


def test_an_mcp_server_or_hook_set_for_another_port_never_stops_the_worker(env: dict[str, str],
                                                                           cfg: Settings) -> None:
    """Codex gave memcairn's MCP server no MEMCAIRN_PORT: it must not replace the worker the settings started."""
    assert cli(env, "worker", "start").returncode == 0
    running = lifecycle.status(cfg)
    elsewhere = load_settings(environ={**env, "MEMCAIRN_PORT": str(free_port())})
    with pytest.raises(WorkerUnavailableError, match=f"serves port {cfg.port}.*left running"):
        ensure_worker(timeout=10, settings=elsewhere)
    kept = cli({**env, "MEMCAIRN_PORT": str(elsewhere.port)}, "worker", "start", "--keep-running")
    assert kept.returncode == 2 and "left running" in kept.stderr
    assert lifecycle.status(cfg)["pid"] == running["pid"] and lifecycle.process_alive(running["pid"])
    # the person's own `memcairn worker start` with a new port setting still moves the worker
    moved = cli({**env, "MEMCAIRN_PORT": str(elsewhere.port)}, "worker", "start", "--json")
    assert moved.returncode == 0 and json.loads(moved.stdout)["action"] == "replaced"
    lifecycle.stop(elsewhere, timeout=10)


def test_a_started_worker_keeps_none_of_the_agent_s_own_variables(env: dict[str, str], cfg: Settings) -> None:
    """A hook starts the worker with the agent's whole environment at hand: the worker gets what it runs on and
    memcairn's settings, not the agent's API keys or session variables."""
    agent = {**env, "GEMINI_API_KEY": "agent-key-1", "CODEX_SESSION_ID": "abc", "CLAUDE_CODE_ENTRYPOINT": "cli",
             "ANTHROPIC_API_KEY": "agent-key-2", "OPENBLAS_CORETYPE": env.get("OPENBLAS_CORETYPE", "Haswell")}
    started = cli(agent, "worker", "start", "--json")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    names = {entry.split(b"=", 1)[0].decode() for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
             if entry}
    assert not names & {"GEMINI_API_KEY", "CODEX_SESSION_ID", "CLAUDE_CODE_ENTRYPOINT", "ANTHROPIC_API_KEY"}
    assert {"PATH", "HOME", "MEMCAIRN_HOME", "MEMCAIRN_PORT", "MEMCAIRN_EMBEDDING_MODEL", "OPENBLAS_CORETYPE"} <= names


def test_a_model_backend_keeps_the_variables_it_reads(cfg: Settings) -> None:
    import dataclasses

    agent = {"PATH": "/bin", "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o", "MY_KEY": "m", "CLAUDE_CONFIG_DIR": "/c"}
    assert set(lifecycle.worker_environment(cfg, agent)) == {"PATH"}
    anthropic = dataclasses.replace(cfg, capture_backend="anthropic")
    assert set(lifecycle.worker_environment(anthropic, agent)) == {"PATH", "ANTHROPIC_API_KEY"}
    named = dataclasses.replace(cfg, capture_backend="openai", llm_api_key_env="MY_KEY")
    assert set(lifecycle.worker_environment(named, agent)) == {"PATH", "OPENAI_API_KEY", "MY_KEY"}
    claude = dataclasses.replace(cfg, capture_backend="claude-cli")
    assert set(lifecycle.worker_environment(claude, agent)) == {"PATH", "ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR"}
