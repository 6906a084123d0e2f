"""``memcairn demo``: the README's first command. The whole loop on the embedded default: a worker, three
recorded Claude Code sessions captured through the hook pipeline, and what the next session is given."""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path

import click

from memcairn.cli.common import open_store, settings

PROJECT = "memcairn-samples"
DEMO_PORT = 37878  # as scripts/demo: the demo's worker never meets the one serving your memory (37877)
MIRROR_WAIT_SECONDS = 120.0
SEARCH = "why did the commit fail"
TIMELINE_QUERY = "hello.sh"


def sample_transcripts() -> list[Path]:
    """The recorded sessions shipped with the package (see ``assets/transcripts/README.md``)."""
    folder = resources.files("memcairn") / "assets" / "transcripts"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".jsonl"))


def _wait_for_mirror(client, deadline: float) -> str:  # noqa: ANN001 - WorkerClient, imported lazily
    while True:
        mirror = client.get_json("/api/stats")["mirror"]
        if mirror.get("state") != "ok" or not mirror.get("lag"):
            return f"{mirror.get('backend', 'none')} ({mirror.get('state')})"
        if time.monotonic() > deadline:
            return f"{mirror.get('backend')} still catching up ({mirror['lag']} items behind); search falls back"
        time.sleep(0.5)


@click.command()
def demo() -> None:
    """Start the worker, import the sample transcripts, and show what an agent would get back.

    Prints the SessionStart context of the sample project, one search, one timeline and the viewer's URL.
    The worker keeps running so the viewer stays up; the last line is the command that stops it.

    Example:

    \b
        MEMCAIRN_HOME=/tmp/memcairn-demo memcairn demo
    """
    from memcairn.transfer.importer import import_transcripts
    from memcairn.wire import lifecycle
    from memcairn.wire.client import WorkerClient

    cfg = demo_settings()
    click.echo(f"memcairn home: {cfg.home}  (store {cfg.db_path.name}, mirror {cfg.vector_backend}, "
               f"capture {cfg.capture_backend})")
    started = lifecycle.start(cfg)
    click.echo(f"worker: {started['action']} (pid {started['pid']}) on http://127.0.0.1:{cfg.port}")

    files = sample_transcripts()
    with open_store(cfg) as store:
        report = import_transcripts(store, cfg, files, project=PROJECT)
    click.echo(f"\n$ memcairn import transcripts <{len(files)} sample sessions> --project {PROJECT}\n"
               f"{report.files} files -> {report.prompts} prompts, {report.observations} observations, "
               f"{report.summaries} summaries ({report.events} new events; a second run adds nothing)")

    client = WorkerClient(settings=cfg, timeout=30)
    click.echo(f"mirror: {_wait_for_mirror(client, time.monotonic() + MIRROR_WAIT_SECONDS)}")

    click.echo(f"\n--- what a new session in {PROJECT} is given (SessionStart context) ---\n")
    click.echo(client.get_text("/api/context/inject", {"projects": PROJECT}).rstrip())

    click.echo(f"\n$ memcairn search {SEARCH!r} --project {PROJECT}\n")
    found = client.get_json("/api/search", {"query": SEARCH, "project": PROJECT, "format": "index", "limit": 5})
    click.echo(found["text"].rstrip())

    click.echo(f"\n$ memcairn timeline --query {TIMELINE_QUERY!r} --before 2 --after 3 --project {PROJECT}\n")
    timeline = client.get_json("/api/timeline", {"query": TIMELINE_QUERY, "project": PROJECT, "format": "index",
                                                 "before": 2, "after": 3})
    click.echo(timeline["text"].rstrip())

    click.echo(f"\nviewer: http://127.0.0.1:{cfg.port}/   (the worker keeps running; this ends it:)\n"
               f"  {stop_command()}")


def demo_settings():  # noqa: ANN201 - memcairn.wire.config.Settings
    """The command's settings, on the demo's own port unless one was chosen (MEMCAIRN_PORT or settings.json);
    the port goes into the environment too, so the printed stop command and every child process use it."""
    import os
    from dataclasses import replace

    from memcairn.wire.settings_source import read_values

    cfg = settings()
    origins: dict[str, str] = {}
    read_values(origins=origins)
    if origins.get("port") != "default":
        return cfg
    os.environ["MEMCAIRN_PORT"] = str(DEMO_PORT)
    return replace(cfg, port=DEMO_PORT)


def stop_command() -> str:
    """``memcairn worker stop`` as it must be typed in another shell to reach this demo's worker: with the
    variables that chose its home, port and address (a token is never printed), and the command's full path."""
    import os
    import shlex

    from memcairn.core.errors import ConfigError
    from memcairn.install.specs import memcairn_executable
    from memcairn.wire.settings_source import read_values

    origins: dict[str, str] = {}
    values = read_values(origins=origins)
    words = []
    if origins.get("home") == "MEMCAIRN_HOME":
        words.append(f"MEMCAIRN_HOME={shlex.quote(values['home'])}")
    for name in ("port", "host"):
        variable = f"MEMCAIRN_{name.upper()}"
        if origins.get(name) == variable:
            words.append(f"{variable}={shlex.quote(os.environ[variable])}")
    try:
        executable = memcairn_executable()
    except ConfigError:
        executable = "memcairn"
    return " ".join([*words, shlex.quote(executable), "worker", "stop"])
