"""``memcairn bench worker`` at toy sizes: the shape of its table and JSON, reuse of a built home, and no
worker process left behind, also when the run fails half-way. Timings are never asserted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import mentioning, processes_of

from memcairn.bench import worker
from memcairn.cli.app import run as cli

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")]

SCENARIOS = [
    "GET /api/health (the HTTP path alone)",
    "GET /api/context/inject, 1 project",
    "GET /api/context/inject, 1 project, memo missed",
    "GET /api/search keyword, 1 project",
    "GET /api/search hybrid, 1 project",
    "GET /api/search hybrid, all projects",
    "GET /api/search filter-only, 1 project",
    "GET /api/timeline, anchor id",
]
COLUMNS = ["scenario", "requests", "errors", "req/s", "worker CPU ms/req", "median ms", "p95 ms", "max ms", "goal",
           "met", "claude-mem 13.15.3", "answers"]


def workers_of(home: Path) -> list[int]:
    """Live memcairn processes serving this home."""
    return processes_of(home, mentioning(b"memcairn"))


def test_bench_worker_prints_the_table_writes_json_and_leaves_no_worker(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home, out = tmp_path / "bench-home", tmp_path / "out.json"
    code = cli(["bench", "worker", "--items", "300", "--requests", "40", "--clients", "2", "--model", "hash",
                "--home", str(home), "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "| scenario" in captured.out and "| worker memory" in captured.out
    assert "building 300 synthetic items" in captured.err

    result = json.loads(out.read_text())
    assert (result["items"], result["projects"], result["clients"], result["requests"]) == (300, 20, 2, 40)
    assert result["documents"] == 900 and result["model"] == "hash" and result["problems"] == []
    assert [r["scenario"] for r in result["rows"]] == SCENARIOS
    for row in result["rows"]:
        assert list(row) == COLUMNS
        assert (row["requests"], row["errors"]) == (40, 0)
        assert isinstance(row["p95 ms"], float) and row["median ms"] <= row["max ms"]
        assert isinstance(row["worker CPU ms/req"], float) and row["worker CPU ms/req"] >= 0
    by_name = {r["scenario"]: r for r in result["rows"]}
    assert by_name["GET /api/search hybrid, all projects"]["answers"] == "hybrid 40"
    assert by_name["GET /api/search keyword, 1 project"]["answers"] == "keyword 40"
    assert by_name["GET /api/context/inject, 1 project"]["goal"] == "p95 ≤ 50 ms"
    counted = dict(part.rsplit(" ", 1) for part in by_name["GET /api/context/inject, 1 project"]["answers"].split(", "))
    assert set(counted) <= {"memo", "rendered"} and sum(map(int, counted.values())) == 40
    missed = by_name["GET /api/context/inject, 1 project, memo missed"]
    assert missed["answers"] == "rendered 40" and missed["goal"] == "-" and missed["met"] == "-"
    assert by_name["GET /api/health (the HTTP path alone)"]["answers"] == "-"
    for when in ("after_warmup", "end"):
        assert result["memory"][when]["rss_mb"] > 0 and result["memory"][when]["peak_mb"] > 0
    assert len(result["load_average"]["before"]) == 3
    assert not Path(f"/proc/{result['worker_pid']}").exists() or result["worker_exit_code"] is not None
    assert workers_of(home) == []

    logs: list[str] = []
    again = worker.run(300, clients=1, requests=5, home=home, model="hash", log=logs.append)
    assert any("reusing" in line for line in logs) and not any("mirroring" in line for line in logs)
    assert [r["requests"] for r in again["rows"]] == [5] * len(SCENARIOS)
    assert workers_of(home) == []
    with pytest.raises(RuntimeError, match="holds vectors of 'hash'"):
        worker.run(300, requests=5, home=home, model="all-MiniLM-L6-v2-int8", log=logs.append)


def test_the_worker_is_stopped_when_the_run_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "bench-home"
    seen: list[int] = []

    def broken(port: int, paths: list[str], clients: int) -> worker.Outcome:
        seen.extend(workers_of(home))
        raise KeyboardInterrupt

    monkeypatch.setattr(worker, "drive", broken)
    with pytest.raises(KeyboardInterrupt):
        worker.run(50, clients=1, requests=5, home=home, model="hash", log=lambda _m: None)
    assert seen, "the worker was running when the run broke off"
    assert workers_of(home) == []


def test_without_a_home_the_temporary_one_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.tempfile, "tempdir", str(tmp_path))
    result = worker.run(40, clients=1, requests=3, projects=2, model="hash", log=lambda _m: None)
    assert result["projects"] == 2 and not Path(result["home"]).exists()
    assert list(tmp_path.glob("memcairn-bench-worker-*")) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_bench_killed_mid_run_stops_its_worker(tmp_path: Path, sig: signal.Signals) -> None:
    home = tmp_path / "bench-home"
    env = {**os.environ, "MEMCAIRN_HOME": str(tmp_path / "cli-home")}
    bench = subprocess.Popen([sys.executable, "-m", "memcairn", "bench", "worker", "--items", "50", "--requests",
                              "20000", "--clients", "1", "--model", "hash", "--home", str(home)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not workers_of(home):
            assert bench.poll() is None, bench.stderr.read() if bench.stderr else ""
            assert time.monotonic() < deadline, "the bench never started its worker"
            time.sleep(0.05)
        time.sleep(0.5)
        bench.send_signal(sig)
        bench.wait(60)
        assert workers_of(home) == []
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        if bench.stderr:
            bench.stderr.close()
        for pid in workers_of(home):  # last resort, so a failure leaves nothing running either
            os.kill(pid, signal.SIGKILL)


def test_rows_count_how_the_answers_were_made() -> None:
    work = worker.scenarios(["alpha", "beta"], [1, 2], 4)
    by_key = {(s.key, s.name): s for s in work}
    fresh = by_key[("context_fresh", "GET /api/context/inject, 1 project, memo missed")]
    assert [s.name for s in work][1:3] == ["GET /api/context/inject, 1 project",
                                           "GET /api/context/inject, 1 project, memo missed"]
    assert fresh.paths == [f"/api/context/inject?projects={p}&fresh=1" for p in ("alpha", "beta", "alpha", "beta")]
    outcome = worker.Outcome(latencies_ms=[10.0, 20.0, 30.0, 40.0], answers={"rendered": 1, "memo": 3}, wall_s=1.0)
    row = worker.row_for(work[1], outcome)
    assert row["answers"] == "memo 3, rendered 1" and row["goal"] == "p95 ≤ 50 ms"
    row = worker.row_for(fresh, worker.Outcome(latencies_ms=[5.0], answers={"rendered": 1}, wall_s=1.0))
    assert (row["answers"], row["goal"], row["met"], row["claude-mem 13.15.3"]) == ("rendered 1", "-", "-", "-")
    assert worker.row_for(work[0], worker.Outcome(latencies_ms=[1.0], wall_s=1.0))["answers"] == "-"


def test_the_worker_cpu_per_request_comes_from_proc() -> None:
    import os

    before = worker.cpu_seconds(os.getpid())
    sum(i * i for i in range(300_000))  # burn a little CPU
    after = worker.cpu_seconds(os.getpid())
    assert before is not None and after is not None and after >= before
    assert worker.cpu_seconds(2**22 + 12345) is None  # no such process
    work = worker.scenarios(["alpha"], [1], 2)
    row = worker.row_for(work[3], worker.Outcome(latencies_ms=[1.0, 2.0], wall_s=1.0, worker_cpu_s=0.05))
    assert row["worker CPU ms/req"] == 25.0
    assert worker.row_for(work[3], worker.Outcome(latencies_ms=[1.0], wall_s=1.0))["worker CPU ms/req"] == "-"
