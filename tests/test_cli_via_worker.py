"""``memcairn search`` and ``memcairn timeline`` ask this home's running worker, and print what they would
print in-process."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from processes import free_port, wait_for

from memcairn.cli import search_cmds
from memcairn.cli.app import cli, run
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.wire.client import WorkerClient


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    settings = {"MEMCAIRN_PORT": str(free_port()), "MEMCAIRN_EMBEDDING_MODEL": "hash",
                "MEMCAIRN_WORKER_AUTOSTART": "0", "TZ": "UTC"}
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **settings}


@pytest.fixture
def worker(env: dict[str, str]) -> Iterator[WorkerClient]:
    done = subprocess.run([sys.executable, "-m", "memcairn", "worker", "start", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pid = json.loads(done.stdout)["pid"]
    try:
        yield WorkerClient(port=int(env["MEMCAIRN_PORT"]), token="")
    finally:
        subprocess.run([sys.executable, "-m", "memcairn", "worker", "stop"], env=env, capture_output=True,
                       timeout=60)
        try:
            os.kill(pid, signal.SIGKILL)  # only if `worker stop` did not end it
        except ProcessLookupError:
            pass


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def searches(client: WorkerClient) -> int:
    return client.get_json("/api/stats")["search"]["searches"]


def seed(client: WorkerClient) -> list[int]:
    ids = [client.post_json("/api/memory/save", body)["id"] for body in (
        {"project": "demo", "title": "Login token expiry", "text": "tokens were compared in local time, not UTC",
         "concepts": ["auth", "gotcha"]},
        {"project": "demo", "title": "Retry the flaky upload", "text": "the upload retries three times"},
        {"project": "web", "title": "Login page redesign", "text": "the login form moved to the header"},
    )]
    deadline = time.monotonic() + 60
    while client.get_json("/api/stats")["mirror"]["lag"]:  # every item embedded: hybrid answers agree
        assert time.monotonic() < deadline, "the mirror never caught up"
        time.sleep(0.1)
    return ids


SEARCHES = [
    ("search", "login token"),
    ("search", "login", "--project", "demo", "--project", "web", "--limit", "5"),
    ("search", "--concept", "auth", "--kind", "manual"),
    ("search", "upload", "--since", "7d", "--order", "newest"),
    ("search", "--limit", "500"),  # clamped, with a note
    ("search", "nothing like this anywhere"),
]


def test_search_and_timeline_go_through_the_worker_with_the_same_output(worker: WorkerClient,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ids = seed(worker)
    local: dict[tuple[str, ...], str] = {}
    before = searches(worker)
    timelines = [("timeline", "--anchor", str(ids[1]), "--before", "1", "--after", "1"),
                 ("timeline", "--query", "upload retries"), ("timeline", "--anchor", str(ids[0]), "--project", "demo")]
    for args in [*SEARCHES, *timelines]:
        for fmt in ((), ("--json",)):
            local[(*args, *fmt)] = invoke(*args, *fmt, "--local")
    assert searches(worker) == before  # --local never asks the worker
    assert json.loads(local[("search", "login token", "--json")])["results"][0]["id"] == ids[0]

    def refuse() -> Any:
        raise AssertionError("searched in-process although a worker is running")

    monkeypatch.setattr(search_cmds, "_service", refuse)
    for args, expected in local.items():
        assert invoke(*args) == expected, args
    searched = [a for a in local if a[0] == "search" or "--query" in a]
    assert searches(worker) == before + len(searched)


def test_without_a_worker_the_commands_work_in_process(env: dict[str, str]) -> None:
    invoke("add", "--project", "demo", "--title", "Login token expiry", "--narrative", "compared in local time")
    data = json.loads(invoke("search", "login", "--json"))
    assert [r["title"] for r in data["results"]] == ["Login token expiry"]
    assert "Login token expiry" in invoke("timeline", "--query", "login")


def test_a_worker_of_another_home_on_the_port_is_not_asked(worker: WorkerClient, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seed(worker)
    before = searches(worker)
    monkeypatch.setenv("MEMCAIRN_HOME", str(tmp_path / "elsewhere"))  # no worker.pid there
    data = json.loads(invoke("search", "login", "--json"))
    assert data["results"] == [] and searches(worker) == before


def test_values_the_http_api_would_split_stay_in_process(worker: WorkerClient) -> None:
    seed(worker)
    before = searches(worker)
    invoke("search", "--project", "demo,web", "--json")  # one project named "demo,web" in-process
    assert searches(worker) == before
    invoke("search", "--project", "demo", "--json")
    assert searches(worker) == before + 1


def test_a_refused_request_is_the_same_error_either_way(worker: WorkerClient) -> None:
    seed(worker)
    errors = []
    for extra in ((), ("--local",)):
        result = CliRunner().invoke(cli, ["search", "--since", "yesterday-ish", *extra])
        errors.append((type(result.exception), str(result.exception)))
        missing = CliRunner().invoke(cli, ["timeline", "--anchor", "424242", *extra])
        errors.append((type(missing.exception), str(missing.exception)))
    assert errors[:2] == errors[2:], errors
    assert run(["search", "--since", "yesterday-ish"]) == 2


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process in UTC+9 while the worker runs in UTC."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_worker_reads_and_prints_times_in_the_callers_zone(worker: WorkerClient, tokyo: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import datetime, timedelta

    ids = seed(worker)
    an_hour_ago = (datetime.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")  # Tokyo time, no zone
    commands = [("search", "login"), ("search", "--since", an_hour_ago, "--json"),
                ("timeline", "--anchor", an_hour_ago, "--before", "0", "--after", "1")]
    local = {args: invoke(*args, "--local") for args in commands}
    assert len(json.loads(local[commands[1]])["results"]) == len(ids)  # read in Tokyo time: all are newer
    assert f"{datetime.now():%H:}" in local[commands[0]]  # rows print Tokyo hours
    monkeypatch.setattr(search_cmds, "_service", lambda: (_ for _ in ()).throw(AssertionError("in-process")))
    for args, expected in local.items():
        assert invoke(*args) == expected, args


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "size"), [(1, 9), (2, 150), (3, 1300)])
def test_the_worker_and_an_in_process_search_rank_alike(env: dict[str, str], isolated_home: Path, seed: int,
                                                        size: int) -> None:
    """One ranking: the same store and query give the same ids, in the same order, with the same scores,
    whether the worker answers (warm model, keyword copy, binary scan past 1,000 documents) or this process."""
    rng = random.Random(seed)
    words = ("login token expiry cookie session deploy fly migration postgres pool upload test fixture cache "
             "timeout retry worker queue index search vector guard clause credo").split()
    isolated_home.mkdir(parents=True, exist_ok=True)
    with Store(isolated_home / "memcairn.db") as store:
        store.add_items([NewItem(project="p", kind=rng.choice(["observation", "manual"]), type="discovery",
                                 title=" ".join(rng.sample(words, 3)), narrative=" ".join(rng.choices(words, k=9)),
                                 facts=[" ".join(rng.choices(words, k=4))], created_at_epoch=1_700_000_000_000 + n)
                         for n in range(size)])
    done = subprocess.run([sys.executable, "-m", "memcairn", "worker", "start", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    try:
        def lag() -> int:
            status = subprocess.run([sys.executable, "-m", "memcairn", "sync", "status", "--json"], env=env,
                                    capture_output=True, text=True, timeout=60, check=True)
            return sum(row["lag"] for row in json.loads(status.stdout)["rows"])

        wait_for(lambda: lag() == 0, 120, "the mirror to catch up")
        for query in [" ".join(rng.sample(words, n)) for n in (1, 2, 3, 3, 5)] + ["xyzzy nothing"]:
            for floor in ("1", "0"):
                args = ["search", query, "--project", "p", "--json", "--limit", "30", "--min-score", floor]
                answers = [json.loads(subprocess.run([sys.executable, "-m", "memcairn", *args, *local], env=env,
                                                     capture_output=True, text=True, timeout=60, check=True).stdout)
                           for local in ((), ("--local",))]
                worker, here = ([(r["id"], r["score"], r["relevance"]) for r in a["results"]] for a in answers)
                assert worker == here, (query, floor)
                assert answers[0]["hidden"] == answers[1]["hidden"]
    finally:
        subprocess.run([sys.executable, "-m", "memcairn", "worker", "stop"], env=env, capture_output=True, timeout=60)
