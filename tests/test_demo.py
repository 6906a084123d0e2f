"""The README's first command, end to end: `memcairn demo` starts a worker, imports the sample transcripts
and prints the SessionStart context, a search, a timeline and the viewer's URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from processes import free_port

from memcairn.wire import lifecycle
from memcairn.wire.config import load_settings


@pytest.mark.slow
def test_demo_runs_the_whole_loop(tmp_path: Path) -> None:
    env = {**os.environ, "MEMCAIRN_HOME": str(tmp_path / "home"), "MEMCAIRN_PORT": str(free_port())}
    try:
        first = subprocess.run([sys.executable, "-m", "memcairn", "demo"], env=env, capture_output=True,
                               text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        out = first.stdout
        assert "worker: started" in out
        assert "3 files -> 3 prompts" in out and "3 summaries" in out
        assert "<memcairn-memory" in out and "## Recent observations" in out  # the SessionStart context
        assert "strategy: hybrid" in out  # the bundled model answered the semantic leg
        assert "<- ANCHOR" in out and f"viewer: http://127.0.0.1:{env['MEMCAIRN_PORT']}/" in out
        stop_line = out.rstrip().splitlines()[-1].strip()
        assert stop_line.endswith(" worker stop") and f"MEMCAIRN_PORT={env['MEMCAIRN_PORT']}" in stop_line
        again = subprocess.run([sys.executable, "-m", "memcairn", "demo"], env=env, capture_output=True,
                               text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert "worker: running" in again.stdout and "(0 new events" in again.stdout
        # pasted as printed into a shell that has none of the demo's variables, it stops the demo's worker
        plain = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
        stopped = subprocess.run(["/bin/sh", "-c", stop_line], env=plain, capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert not lifecycle.status(load_settings(home=tmp_path / "home", environ=env))["running"]
    finally:
        cfg = load_settings(home=tmp_path / "home", environ=env)
        lifecycle.stop(cfg, timeout=10)


def test_the_demo_keeps_off_the_real_worker_s_port_unless_one_is_chosen(isolated_home: Path,
                                                                         monkeypatch) -> None:  # noqa: ANN001
    """`MEMCAIRN_HOME=/tmp/x memcairn demo` (its help's example) must not reach the worker serving the person's
    memory on the default port: without a chosen port the demo takes its own, and says it in the stop line."""
    from memcairn.cli.demo_cmd import DEMO_PORT, demo_settings, stop_command
    from memcairn.wire.settings_source import DEFAULT_PORT

    assert DEMO_PORT != DEFAULT_PORT
    monkeypatch.setenv("MEMCAIRN_PORT", "1")  # recorded as unset, so the demo's own setting is undone after
    monkeypatch.delenv("MEMCAIRN_PORT")
    assert demo_settings().port == DEMO_PORT and f"MEMCAIRN_PORT={DEMO_PORT}" in stop_command()
    monkeypatch.setenv("MEMCAIRN_PORT", "38123")
    assert demo_settings().port == 38123
    monkeypatch.delenv("MEMCAIRN_PORT")
    isolated_home.mkdir(exist_ok=True)
    (isolated_home / "settings.json").write_text('{"port": 38124}')
    assert demo_settings().port == 38124
