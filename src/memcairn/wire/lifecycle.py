"""Finding, starting and stopping the worker of a home: ``start`` in the background, ``stop``, ``status``.

The doors (the CLI, the MCP server, a hook's autostart, ``client.ensure_worker``) reach the worker's lifecycle
here, never through the worker's own modules; ``worker/daemon.py`` runs the worker in the foreground with the
same files.

Files under ``MEMCAIRN_HOME``:

- ``worker.lock``: the running worker holds an exclusive ``flock`` on it for its whole life, so at most one
  worker runs per home whatever races happen; the kernel releases it when the process dies, however it dies.
- ``worker.pid``: JSON ``{pid, port, host, version, started_at}``, written atomically (temporary file +
  rename) once the port is bound and removed at exit. A pid file whose lock is free is stale.
- ``worker.start.lock``: serialises ``start`` calls, so two racing starts spawn one worker.
- ``logs/worker-stderr.log``: what a crash prints before logging is set up (emptied at a start once larger
  than ``log_max_bytes``).

``start`` replaces a running worker of another version than the installed package (after an upgrade).
``stop`` sends SIGTERM, lets the worker drain (writes in flight finish, new ones get 503), and sends
SIGKILL only if it has not exited within the timeout.

Standard library only (and memcairn's stdlib-only modules): a hook's autostart imports it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memcairn.core.errors import MemcairnError, WorkerUnavailableError
from memcairn.wire.client import WorkerClient, connect_host
from memcairn.wire.config import Settings, check_bind, load_settings
from memcairn.wire.protocol import LOCK_FILE, PID_FILE, SPAWNED_FILE, START_LOCK_FILE

STDERR_FILE = "worker-stderr.log"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
KILL_WAIT = 5.0
POLL = 0.05


def current_version() -> str:
    """The installed package's version, read at call time."""
    import memcairn

    return memcairn.__version__


def pid_path(cfg: Settings) -> Path:
    return cfg.home / PID_FILE


def lock_path(cfg: Settings) -> Path:
    return cfg.home / LOCK_FILE


# -- pid file and processes -------------------------------------------------------------------------
def read_pid_file(cfg: Settings) -> dict[str, Any] | None:
    try:
        data = json.loads(pid_path(cfg).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        return None
    return data


def write_pid_file(cfg: Settings, info: dict[str, Any]) -> None:
    target = pid_path(cfg)
    tmp = target.with_name(f".{PID_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(info), encoding="utf-8")
        os.replace(tmp, target)
    except BaseException:  # a full disk: no temporary file left behind
        tmp.unlink(missing_ok=True)
        raise


def remove_pid_file(cfg: Settings, pid: int | None = None) -> bool:
    """Remove the pid file (only if it names ``pid``, when given). True if removed."""
    info = read_pid_file(cfg)
    if pid is not None and info is not None and info.get("pid") != pid:
        return False
    try:
        pid_path(cfg).unlink()
    except FileNotFoundError:
        return False
    return True


# Workers this process spawned (``ensure_worker`` in a long-lived caller): polled, so an exited one is
# reaped instead of lingering as a zombie, and Python does not warn about a child still running.
_SPAWNED: list[subprocess.Popen] = []


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as gone (and one this process spawned is reaped)."""
    if pid <= 0:
        return False
    for proc in list(_SPAWNED):
        if proc.pid == pid:
            if proc.poll() is None:
                return True
            _SPAWNED.remove(proc)
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")
    except (OSError, ValueError):
        return True


def is_worker_process(pid: int) -> bool:
    """Guard against a recycled pid: the process's command line mentions memcairn (where /proc exists)."""
    try:
        return b"memcairn" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists() and process_alive(pid)
    except OSError:
        return True


def try_flock(path: Path, exclusive: bool = True) -> int | None:
    """An fd holding the lock, or None when another process holds it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def worker_lock_held(cfg: Settings) -> bool:
    """True while a worker process of this home is alive (it holds ``worker.lock``)."""
    if not lock_path(cfg).exists():  # no worker ever ran here: a probe creates nothing (not even the home)
        return False
    fd = try_flock(lock_path(cfg))
    if fd is None:
        return True
    os.close(fd)
    return False


def clean_stale_pid_file(cfg: Settings) -> bool:
    """Remove a pid file no running worker backs. True if one was removed."""
    info = read_pid_file(cfg)
    if not pid_path(cfg).exists():
        return False
    if info is not None and process_alive(info["pid"]) and worker_lock_held(cfg):
        return False
    return remove_pid_file(cfg)


# -- probing ----------------------------------------------------------------------------------------
def _client(cfg: Settings, timeout: float = 2.0) -> WorkerClient:
    return WorkerClient(port=cfg.port, host=connect_host(cfg.host), token=cfg.token, timeout=timeout, settings=cfg)


def probe(cfg: Settings, timeout: float = 2.0) -> dict[str, Any] | None:
    """The health answer of the worker on the configured port, or None when no worker answers (nothing listens,
    or what listens is not a memcairn worker: its 404 or other answer is no worker's health)."""
    try:
        return _client(cfg, timeout).health()
    except MemcairnError:
        return None


def serves_this_home(cfg: Settings, info: dict[str, Any]) -> bool:
    """Whether the worker that answered ``info`` on the port is this home's: a worker of this home holds its lock,
    and the pid file (when there is one) names that worker. Another home's worker may listen on the same port
    (``MEMCAIRN_PORT`` set alike); it must not be reported, reused or stopped as this home's."""
    if not worker_lock_held(cfg):
        return False
    recorded = read_pid_file(cfg)
    return recorded is None or recorded.get("pid") == info.get("pid")


def _foreign(cfg: Settings, info: dict[str, Any]) -> str:
    return (f"port {cfg.port} is served by the memcairn worker of another home (pid {info.get('pid')}), not by "
            f"the worker of {cfg.home}; set MEMCAIRN_PORT to a free port for this home")


def _log_hint(cfg: Settings) -> str:
    return f"see {cfg.logs_dir / 'worker.log'} and {cfg.logs_dir / STDERR_FILE}"


def logs_unusable(cfg: Settings, exc: OSError) -> WorkerUnavailableError:
    """The error for a logs directory the worker cannot write (a file in its place, no permission, disk full)."""
    return WorkerUnavailableError(
        f"the worker cannot write its logs in {cfg.logs_dir} ({exc.strerror or exc}); make that a writable "
        "directory (or free disk space) and start the worker again"
    )


def stderr_size(cfg: Settings) -> int:
    try:
        return (cfg.logs_dir / STDERR_FILE).stat().st_size
    except OSError:
        return 0


def exit_reason_since(cfg: Settings, offset: int) -> str:
    """The last line the spawned worker printed to its stderr file after ``offset`` (why it exited), or ''."""
    try:
        with open(cfg.logs_dir / STDERR_FILE, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size < offset:  # truncated at this start
                offset = 0
            fh.seek(max(offset, size - 4096))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


# -- start ------------------------------------------------------------------------------------------
def worker_command() -> list[str]:
    return [sys.executable, "-m", "memcairn", "worker", "run"]


# What a worker keeps of the environment of the hook or command that starts it: how to run at all (paths,
# locale, zone, temporary files, the numeric libraries' settings, proxies and certificates for a model API), and
# memcairn's own settings. The agent's own variables (its API keys, session ids) stay with the agent.
_KEPT_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
                         "LD_LIBRARY_PATH", "VIRTUAL_ENV", "SYSTEMROOT", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                         "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR",
                         "REQUESTS_CA_BUNDLE", "OMP_NUM_THREADS"})
_KEPT_PREFIXES = ("MEMCAIRN_", "LC_", "PYTHON", "OPENBLAS_", "MKL_", "XDG_")
# The variables a model backend reads, by capture_backend (the claude command keeps its login and endpoint).
_BACKEND_PREFIXES = {"anthropic": ("ANTHROPIC_",), "openai": ("OPENAI_",),
                     "claude-cli": ("ANTHROPIC_", "CLAUDE_")}


def worker_environment(cfg: Settings, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a spawned worker gets: ``environ`` less everything the worker has no use for."""
    prefixes = _KEPT_PREFIXES + _BACKEND_PREFIXES.get(cfg.capture_backend, ())
    named = {cfg.llm_api_key_env.strip()} - {""}
    return {k: v for k, v in environ.items() if k in _KEPT_NAMES or k in named or k.startswith(prefixes)}


def spawn(cfg: Settings) -> subprocess.Popen:
    """Start ``memcairn worker run`` detached from this process's session and terminal."""
    stderr_path = cfg.logs_dir / STDERR_FILE
    try:
        cfg.logs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if stderr_path.stat().st_size > cfg.log_max_bytes:
            os.truncate(stderr_path, 0)  # appended to below either way: the running worker trims it (logs.py)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise logs_unusable(cfg, exc) from None
    for done in [p for p in _SPAWNED if p.poll() is not None]:
        _SPAWNED.remove(done)
    try:
        # owner-only, whatever the umask of the hook or command that starts the worker
        stderr = os.fdopen(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    except OSError as exc:
        raise logs_unusable(cfg, exc) from None
    with stderr:
        proc = subprocess.Popen(worker_command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=stderr, start_new_session=True, close_fds=True, cwd=str(cfg.home),
                                env=worker_environment(cfg, os.environ))
    _SPAWNED.append(proc)
    try:
        (cfg.home / SPAWNED_FILE).write_text(str(proc.pid))
    except OSError:
        pass  # only the hooks' wording of the next second depends on it
    return proc



def _acquire_start_lock(cfg: Settings, deadline: float) -> int:
    while True:
        fd = try_flock(cfg.home / START_LOCK_FILE)
        if fd is not None:
            return fd
        if time.monotonic() > deadline:
            raise WorkerUnavailableError(
                "another `memcairn worker start` is still starting the worker; try again in a moment"
            )
        time.sleep(POLL)


def _result(action: str, info: dict[str, Any]) -> dict[str, Any]:
    return {"action": action, "pid": info.get("pid"), "port": info.get("port"), "version": info.get("version"),
            "ready": bool(info.get("ready"))}


def _wait_ready(cfg: Settings, deadline: float, proc: subprocess.Popen | None,
                stderr_offset: int = 0) -> dict[str, Any]:
    """Poll until a worker of the installed version is ready; fail fast if the spawned one crashed (naming
    the last line it printed after ``stderr_offset`` of its stderr file: the reason)."""
    client = _client(cfg, timeout=1.0)
    version = current_version()
    while True:
        info = probe(cfg, timeout=1.0)
        if info is not None and info.get("version") == version and client.ready(timeout=1.0):
            info["ready"] = True
            return info
        if info is not None and info.get("state") == "failed":
            raise WorkerUnavailableError(f"the worker could not start; {_log_hint(cfg)}")
        if proc is not None and proc.poll() is not None:
            if proc.returncode != 0:
                reason = exit_reason_since(cfg, stderr_offset)
                raise WorkerUnavailableError(
                    f"the worker exited with code {proc.returncode} while starting"
                    f"{f' ({reason})' if reason else ''}; {_log_hint(cfg)}"
                )
            proc = None  # it found another worker holding the lock: wait for that one instead
        if info is None and proc is None and not worker_lock_held(cfg):
            # The worker waited for is gone (it was shutting down when this start began, or the one that held the
            # lock exited): start one, or this start would wait out its whole timeout for nothing.
            clean_stale_pid_file(cfg)
            stderr_offset = stderr_size(cfg)
            proc = spawn(cfg)
        if time.monotonic() > deadline:
            raise WorkerUnavailableError(
                f"the worker did not become ready on port {cfg.port} in time; {_log_hint(cfg)}"
            )
        time.sleep(POLL)


def start(cfg: Settings | None = None, timeout: float = START_TIMEOUT, *,
          replace_other_port: bool = True) -> dict[str, Any]:
    """Make sure a ready worker of the installed version serves the configured port.

    A worker of this home serving another port (the port setting changed) is replaced only with
    ``replace_other_port`` (``memcairn worker start``, which a person runs with the settings they mean). An MCP
    server or a hook passes False: an agent may start it without memcairn's variables (Codex passes an MCP
    server only a few), and it must not stop the worker the person's settings started.

    Returns ``{"action": "running" | "started" | "replaced", "pid", "port", "version", "ready"}``.

    Raises:
        ConfigError: a non-loopback host without a token.
        WorkerUnavailableError: no worker became ready within ``timeout`` seconds (the message names the logs).
    """
    cfg = cfg or load_settings()
    check_bind(cfg)
    version = current_version()
    info = probe(cfg)
    if info is not None and not serves_this_home(cfg, info):
        raise WorkerUnavailableError(_foreign(cfg, info))
    if info is not None and info.get("version") == version and info.get("ready"):
        return _result("running", info)
    deadline = time.monotonic() + timeout
    cfg.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock_fd = _acquire_start_lock(cfg, deadline)
    try:
        return _start_locked(cfg, deadline, replace_other_port)
    finally:
        os.close(lock_fd)


def restart(cfg: Settings | None = None, timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """Stop the worker of this home (if one runs) and start a new one: ``{"stopped": ..., "started": ...}``.

    The start lock is held from before the stop until the new worker is ready, so a hook that finds the port
    closed in between sees a worker coming (``worker.start.lock``), not an outage."""
    cfg = cfg or load_settings()
    check_bind(cfg)
    cfg.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock_fd = _acquire_start_lock(cfg, time.monotonic() + timeout)
    try:
        stopped = stop(cfg, timeout=timeout)
        return {"stopped": stopped, "started": _start_locked(cfg, time.monotonic() + timeout, True)}
    finally:
        os.close(lock_fd)


def _start_locked(cfg: Settings, deadline: float, replace_other_port: bool) -> dict[str, Any]:
    """``start`` once it holds the start lock."""
    version = current_version()
    action = "started"
    info = probe(cfg)
    if info is not None and not serves_this_home(cfg, info):
        raise WorkerUnavailableError(_foreign(cfg, info))
    if info is not None and info.get("version") != version:
        stop(cfg, timeout=max(1.0, deadline - time.monotonic()), pid=info.get("pid"))
        info, action = None, "replaced"
    if info is not None:
        return _result("running", _wait_ready(cfg, deadline, None))
    clean_stale_pid_file(cfg)
    recorded = read_pid_file(cfg)
    if recorded is not None and recorded.get("port") != cfg.port and worker_lock_held(cfg):
        if not replace_other_port:
            raise WorkerUnavailableError(
                f"the worker of {cfg.home} serves port {recorded.get('port')}, but this process is set for "
                f"port {cfg.port}; it was left running. Give this process the same MEMCAIRN_PORT (an agent "
                "must pass memcairn's variables to its MCP server: run `memcairn install <agent>` again)")
        # A worker of this home serves another port (the setting changed): replace it.
        stop(cfg, timeout=max(1.0, deadline - time.monotonic()))
        action = "replaced"
    offset = stderr_size(cfg)
    proc = None if worker_lock_held(cfg) else spawn(cfg)
    return _result(action, _wait_ready(cfg, deadline, proc, offset))


# -- stop and status --------------------------------------------------------------------------------
def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True


def stop(cfg: Settings | None = None, timeout: float = STOP_TIMEOUT, pid: int | None = None) -> dict[str, Any]:
    """Stop the worker of this home (or ``pid``): SIGTERM, a bounded wait, SIGKILL as a last resort.

    Returns ``{"stopped": bool, "pid": int | None, "forced": bool}``.
    """
    cfg = cfg or load_settings()
    if pid is None and not worker_lock_held(cfg):
        # No worker of this home runs: a pid file left behind may name a recycled pid (any process, even another
        # memcairn one), and a worker answering on the port belongs to another home. Stop nothing.
        clean_stale_pid_file(cfg)
        return {"stopped": False, "pid": None, "forced": False}
    if pid is None:
        recorded = read_pid_file(cfg)
        if recorded is not None and process_alive(recorded["pid"]) and is_worker_process(recorded["pid"]):
            pid = recorded["pid"]
        else:
            info = probe(cfg)
            pid = info.get("pid") if info is not None else None
    if pid is None or not process_alive(pid) or not is_worker_process(pid):
        clean_stale_pid_file(cfg)
        return {"stopped": False, "pid": None, "forced": False}
    forced = False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if not _wait_gone(pid, timeout):
        forced = True
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait_gone(pid, KILL_WAIT)
    remove_pid_file(cfg, pid)
    return {"stopped": True, "pid": pid, "forced": forced}


def status(cfg: Settings | None = None) -> dict[str, Any]:
    """``{"running", "ready", "pid", "port", "version", "state"}`` of the worker of this home."""
    cfg = cfg or load_settings()
    info = probe(cfg)
    if info is not None and serves_this_home(cfg, info):
        return {"running": True, "ready": bool(info.get("ready")), "pid": info.get("pid"), "port": info.get("port"),
                "version": info.get("version"), "state": info.get("state")}
    recorded = read_pid_file(cfg)
    if recorded is not None and process_alive(recorded["pid"]) and worker_lock_held(cfg):
        return {"running": True, "ready": False, "pid": recorded["pid"], "port": recorded.get("port"),
                "version": recorded.get("version"), "state": "not answering"}
    state = "stopped"
    if info is not None:
        state = f"stopped; port {cfg.port} is used by another home's worker (pid {info.get('pid')})"
    return {"running": False, "ready": False, "pid": None, "port": cfg.port, "version": None, "state": state}
