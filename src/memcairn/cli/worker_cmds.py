"""``memcairn worker ...``: run, start, stop, restart and inspect the background worker."""

from __future__ import annotations

import math

import click

from memcairn.cli.common import emit_json, settings


def _seconds(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    """A wait of 0 or more finite seconds: a negative one killed the worker at once without letting it drain
    (``stop``) or gave up on a worker it had just spawned (``start``), and NaN never timed out."""
    if not math.isfinite(value) or value < 0:
        raise click.BadParameter(f"must be a number of seconds, 0 or more, got {value}", param=param)
    return value


@click.group()
def worker() -> None:
    """The background worker: one process that owns the store, the vector mirror and the model.

    Hooks, the MCP server and the web viewer talk to it on 127.0.0.1 (MEMCAIRN_PORT, default 37877).
    Its log is MEMCAIRN_HOME/logs/worker.log.
    """


@worker.command("run")
def run_cmd() -> int:
    """Serve in the foreground until Ctrl-C or SIGTERM (exits 0 if a worker already runs).

    Example:

    \b
        memcairn worker run
    """
    from memcairn.worker.daemon import run_foreground

    return run_foreground(settings(), echo=lambda text: click.echo(text, err=True))


@worker.command("start")
@click.option("--timeout", default=30.0, show_default=True, type=float, callback=_seconds,
              help="Seconds to wait for readiness.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--keep-running", is_flag=True, hidden=True,
              help="Never stop a worker of this home that serves another port (what the MCP server runs).")
def start_cmd(timeout: float, as_json: bool, keep_running: bool) -> None:
    """Start the worker in the background and wait until it is ready.

    A worker that already runs is left alone, unless it is of another memcairn version (then it is
    replaced).

    Example:

    \b
        memcairn worker start
    """
    from memcairn.wire.lifecycle import start

    result = start(settings(), timeout=timeout, replace_other_port=not keep_running)
    if as_json:
        emit_json(result)
    else:
        verb = {"running": "already running", "started": "started", "replaced": "replaced (version changed)"}
        click.echo(f"worker {verb.get(result['action'], result['action'])}: pid {result['pid']}, "
                   f"port {result['port']}, version {result['version']}")


@worker.command("stop")
@click.option("--timeout", default=30.0, show_default=True, type=float, callback=_seconds,
              help="Seconds to let it finish in-flight writes before it is killed.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def stop_cmd(timeout: float, as_json: bool) -> None:
    """Stop the worker gracefully (in-flight writes finish first).

    Example:

    \b
        memcairn worker stop
    """
    from memcairn.wire.lifecycle import stop

    result = stop(settings(), timeout=timeout)
    if as_json:
        emit_json(result)
    elif not result["stopped"]:
        click.echo("no worker is running")
    else:
        click.echo(f"worker stopped (pid {result['pid']}{', killed after the timeout' if result['forced'] else ''})")


@worker.command("restart")
@click.option("--timeout", default=30.0, show_default=True, type=float, callback=_seconds,
              help="Seconds for each of stop and start.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: what stop and start did.")
def restart_cmd(timeout: float, as_json: bool) -> None:
    """Stop the worker (if running) and start a new one.

    Example:

    \b
        memcairn worker restart
    """
    from memcairn.wire.lifecycle import restart

    done = restart(settings(), timeout=timeout)
    result = done["started"]
    if as_json:
        emit_json(done)
        return
    click.echo(f"worker started: pid {result['pid']}, port {result['port']}, version {result['version']}")


@worker.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(as_json: bool) -> int:
    """Whether a worker runs, and its pid, port and version (exit code 1 when none runs).

    Example:

    \b
        memcairn worker status --json
    """
    from memcairn.wire.lifecycle import status

    info = status(settings())
    if as_json:
        emit_json(info)
    elif info["running"]:
        click.echo(f"running: pid {info['pid']}, port {info['port']}, version {info['version']}, "
                   f"{'ready' if info['ready'] else info['state']}")
    else:
        click.echo(f"not running (port {info['port']})")
    return 0 if info["running"] else 1
