"""`memcairn stale` and `GET /api/stale` list the memories the code no longer
supports (id, title, age, state, reasons) and forget them in one step; `memcairn projects root` says where a
project's files are on this machine, and freshness reads them there from then on (migration 19 keeps every
project)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from anchored_notes import FILES, anchored
from git_repo import committed_repo
from mcp_helpers import start_worker, worker_env

from memcairn.cli.app import run
from memcairn.core.errors import ValidationError
from memcairn.store import Store
from memcairn.store.db import connect
from memcairn.store.migrations import MIGRATIONS, migrate
from memcairn.store.supersede import correct
from memcairn.wire.client import WorkerClient
from memcairn.wire.config import load_settings

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_repo(tmp_path / "shop", FILES)


@pytest.fixture
def seeded(repo: Path, isolated_home: Path) -> dict[str, int]:
    """Three memories in the home's store: one whose file is deleted, one whose file changed (its name still
    there), one untouched."""
    with Store(load_settings().db_path) as store:
        ids = {"gone": anchored(store, repo, "cart.py", "Totals come from `cart_total`"),
               "changed": anchored(store, repo, "ship.py", "Shipping is priced by `ship_cost`"),
               "kept": anchored(store, repo, "tax.py", "The rate is `tax_rate`")}
    (repo / "cart.py").unlink()
    (repo / "ship.py").write_text(FILES["ship.py"] + "\n\ndef ship_days(zone):\n    return 2\n")
    return ids


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    capsys.readouterr()
    assert run(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_stale_lists_what_the_code_contradicts_with_its_reasons_and_age(
        seeded: dict[str, int], capsys: pytest.CaptureFixture[str]) -> None:
    found = cli_json(capsys, "stale", "--json")
    assert [m["id"] for m in found["memories"]] == [seeded["gone"]]
    row = found["memories"][0]
    assert row["state"] == "stale" and row["reasons"] == ["cart.py deleted since"]
    assert row["title"] == "Totals come from `cart_total`" and row["age"] == "just now" and row["project"] == "shop"
    assert found["forget"] == f"memcairn forget {seeded['gone']}"
    changed = cli_json(capsys, "stale", "--json", "--state", "changed")
    assert [m["id"] for m in changed["memories"]] == [seeded["changed"]]
    both = cli_json(capsys, "stale", "--json", "--state", "both", "--project", "shop")
    assert {m["id"] for m in both["memories"]} == {seeded["gone"], seeded["changed"]}
    assert cli_json(capsys, "stale", "--json", "--project", "elsewhere")["memories"] == []

    with Store(load_settings().db_path) as store:
        correct(store, seeded["changed"], why="shipping is priced by zone now")
    after = cli_json(capsys, "stale", "--json", "--state", "both")
    assert [m["id"] for m in after["memories"]] == [seeded["gone"]]  # a corrected memory is not listed again

    assert run(["stale"]) == 0
    text = capsys.readouterr().out
    assert f"#{seeded['gone']} just now  Totals come from `cart_total`  [stale] (shop)" in text
    assert "    cart.py deleted since" in text and f"memcairn forget {seeded['gone']}" in text


def test_stale_forget_asks_then_forgets_them_in_one_step(seeded: dict[str, int], monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from click.testing import CliRunner

    from memcairn.cli.app import cli

    refused = CliRunner().invoke(cli, ["stale", "--forget"], input="n\n")
    assert refused.exit_code != 0 and "Forget these 1 memories?" in refused.output
    with Store(load_settings().db_path) as store:
        assert store.get_items([seeded["gone"]])
    done = cli_json(capsys, "stale", "--forget", "--yes", "--json")
    assert done["deleted"] == [seeded["gone"]]
    with Store(load_settings().db_path) as store:
        assert store.get_items(list(seeded.values())) and not store.get_items([seeded["gone"]])
    assert cli_json(capsys, "stale", "--json")["memories"] == []


def test_a_projects_root_is_where_its_files_are_read_from_then_on(
        repo: Path, tmp_path: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store(load_settings().db_path) as store:
        gone = anchored(store, repo, "cart.py", "Totals come from `cart_total`")
        kept = anchored(store, repo, "tax.py", "The rate is `tax_rate`")
    here = tmp_path / "checkout-here"
    shutil.move(repo, here)  # recorded on another machine: its directory is not here
    (here / "cart.py").unlink()
    assert cli_json(capsys, "stale", "--json")["memories"] == []

    assert run(["projects", "root", "shop", str(here)]) == 0
    assert capsys.readouterr().out.strip() == f"shop: {here}"
    found = cli_json(capsys, "stale", "--json")
    assert [(m["id"], m["reasons"]) for m in found["memories"]] == [(gone, ["cart.py deleted since"])]
    results = cli_json(capsys, "search", "Totals cart_total rate", "--project", "shop", "--json")["results"]
    states = {r["id"]: r.get("freshness", {}).get("state") for r in results}
    assert states[gone] == "stale" and states.get(kept) in (None, "current")
    assert run(["projects", "root", "shop"]) == 0 and capsys.readouterr().out.strip() == str(here)

    assert run(["projects", "root", "shop", "--clear"]) == 0
    capsys.readouterr()
    assert cli_json(capsys, "stale", "--json")["memories"] == []
    assert run(["projects", "root", "nosuch", str(here)]) == 2
    assert "no project named 'nosuch'" in capsys.readouterr().err
    assert run(["projects", "root", "shop", str(tmp_path / "missing")]) == 2


def test_a_root_set_on_the_project_a_project_was_merged_into_holds_for_its_memories(
        repo: Path, tmp_path: Path, store: Store) -> None:
    from memcairn.context.freshness_check import checker_for

    old = store.get_item(anchored(store, repo, "cart.py", "Totals come from `cart_total`", project="shop-old"))
    store.merge_project("shop-old", "shop")
    here = tmp_path / "moved"
    shutil.move(repo, here)
    (here / "cart.py").unlink()
    assert checker_for(store).check([old])[old.id].state == "unknown"
    store.set_project_root("shop", str(here))
    assert store.project_roots() == {"shop": str(here), "shop-old": str(here)}
    assert checker_for(store).check([old])[old.id].reasons == ("cart.py deleted since",)


def test_migration_19_adds_the_root_and_keeps_every_project(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    conn = connect(path)
    migrate(conn, path, [m for m in MIGRATIONS if m.version < 19])
    conn.executemany("INSERT INTO projects(name, merged_into_project, created_at_epoch) VALUES (?, ?, 1)",
                     [("alpha", None), ("beta", "alpha")])
    conn.commit()
    conn.close()
    with Store(path) as store:
        rows = [tuple(r) for r in store._conn.execute(
            "SELECT name, merged_into_project, root FROM projects ORDER BY name")]
        assert rows == [("alpha", None, None), ("beta", "alpha", None)]
        assert store.project_roots() == {}
        store.set_project_root("alpha", "/srv/alpha")
        assert store.project_roots() == {"alpha": "/srv/alpha", "beta": "/srv/alpha"}


# -- through a real worker ------------------------------------------------------------------------------
@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    yield from worker_env(isolated_home, monkeypatch)


@pytest.fixture
def worker(env: dict[str, str]) -> WorkerClient:
    return start_worker(env)


def test_the_worker_lists_them_as_the_command_line_does(
        worker: WorkerClient, seeded: dict[str, int], capsys: pytest.CaptureFixture[str]) -> None:
    answer = worker.get_json("/api/stale", {"project": ["shop"], "state": "stale,changed"})
    assert {m["id"] for m in answer["memories"]} == {seeded["gone"], seeded["changed"]}
    assert cli_json(capsys, "stale", "--json") == cli_json(capsys, "stale", "--json", "--local")
    with pytest.raises(ValidationError, match="state is stale or changed"):
        worker.get_json("/api/stale", {"state": "current"})
    with pytest.raises(ValidationError, match="state is stale or changed"):
        worker.get_json("/api/stale", {"state": ""})  # an empty state is no state: refused, as its schema says


def test_a_root_recorded_while_the_worker_runs_is_read_at_its_next_check(
        worker: WorkerClient, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store(load_settings().db_path) as store:
        gone = anchored(store, repo, "cart.py", "Totals come from `cart_total`")
    here = tmp_path / "checkout-here"
    shutil.move(repo, here)
    (here / "cart.py").unlink()
    assert worker.get_json("/api/stale", {"project": ["shop"]})["memories"] == []
    assert run(["projects", "root", "shop", str(here)]) == 0
    assert [m["id"] for m in worker.get_json("/api/stale", {"project": ["shop"]})["memories"]] == [gone]
    assert worker.get_json(f"/api/memory/{gone}")["freshness"]["reasons"] == ["cart.py deleted since"]
    batch = worker.post_json("/api/observations/batch", {"ids": [gone], "format": "agent"})
    assert batch["items"][0]["freshness"]["state"] == "stale"
    digest = worker.get_text("/api/context/inject", {"projects": "shop"})
    assert f"#{gone} Totals come from `cart_total` [stale: cart.py deleted]" in digest
