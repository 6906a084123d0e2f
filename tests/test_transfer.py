"""Importing claude-mem databases and memcairn's own JSONL export, and exporting it."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memcairn.cli.app import cli, run
from memcairn.core.errors import ValidationError
from memcairn.core.models import ItemFilter, NewItem
from memcairn.store import Store
from memcairn.transfer.claude_mem import import_claude_mem
from memcairn.transfer.claude_mem_rows import to_ms
from memcairn.transfer.claude_mem_source import open_source
from memcairn.transfer.jsonl import export_to_file, import_jsonl
from memcairn.wire.config import load_settings

MS = 1_700_000_000_000  # an epoch in milliseconds
SECONDS = 1_700_100_000  # an epoch in seconds

CLAUDE_MEM_SCHEMA = """
CREATE TABLE sdk_sessions (
    id INTEGER PRIMARY KEY, content_session_id TEXT, memory_session_id TEXT, project TEXT, platform_source TEXT,
    user_prompt TEXT, started_at_epoch INTEGER, completed_at_epoch INTEGER, status TEXT
);
CREATE TABLE observations (
    id INTEGER PRIMARY KEY, memory_session_id TEXT, project TEXT, text TEXT, type TEXT, title TEXT, subtitle TEXT,
    facts TEXT, narrative TEXT, concepts TEXT, files_read TEXT, files_modified TEXT, prompt_number INTEGER,
    content_hash TEXT, merged_into_project TEXT, created_at_epoch INTEGER
);
CREATE TABLE session_summaries (
    id INTEGER PRIMARY KEY, memory_session_id TEXT, project TEXT, request TEXT, investigated TEXT, learned TEXT,
    completed TEXT, next_steps TEXT, files_read TEXT, files_edited TEXT, notes TEXT, prompt_number INTEGER,
    created_at_epoch INTEGER
);
CREATE TABLE user_prompts (
    id INTEGER PRIMARY KEY, content_session_id TEXT, prompt_number INTEGER, prompt_text TEXT, created_at_epoch INTEGER
);
"""

SESSIONS = [
    # id, content_session_id, memory_session_id, project, platform_source, user_prompt, started, completed, status
    (1, "cs-1", "ms-1", "alpha", "claude", "fix login", MS, MS + 60_000, "completed"),
    (2, "cs-2", "ms-2", None, None, "explore", SECONDS, None, "active"),
    (3, "cs-1", "ms-1", "alpha", "claude", "fix login", MS, MS + 60_000, "completed"),  # duplicate row
    (4, None, "ms-4", "alpha", "claude", "no id", MS, None, "active"),  # cannot be keyed: skipped
    (5, "cs-5", "ms-5", "gamma", "codex", None, None, None, "weird"),  # NULL epochs, unknown status
]
OBSERVATIONS = [
    # id, memory_session_id, project, text, type, title, subtitle, facts, narrative, concepts, files_read,
    # files_modified, prompt_number, content_hash, merged_into_project, created_at_epoch
    (1, "ms-1", "alpha", None, "bugfix", "Token expiry zanzibar", "auth", '["tokens are UTC"]',
     "Expiry was compared in local time", '["gotcha"]', '["auth.py"]', '["auth.py"]', 1, "h1", None, MS + 1000),
    (2, "ms-1", "alpha", None, "bugfix", "Token expiry zanzibar", "auth", '["tokens are UTC"]',
     "Expiry was compared in local time", '["gotcha"]', '["auth.py"]', '["auth.py"]', 1, "h1", None, MS + 1000),
    (3, "ms-1", "alpha", None, "discovery", "Bad json row", None, "not json at all", "Narrative three",
     "[broken", None, "", 2, "h3", None, MS + 2000),
    (4, "ms-1", "alpha", None, "discovery", None, None, None, None, None, None, None, 3, "h4", None, MS + 3000),
    (5, "ms-1", None, "plain text observation", "change", None, None, "[]", None, "[]", "[]", "[]", 4, "h5",
     None, MS + 4000),
    (6, "ms-404", "beta", None, "feature", "Orphan observation", None, "[]", "Its session is missing", "[]",
     "[]", "[]", None, "h6", None, SECONDS),
    (7, "ms-2", None, None, "Decision Made", "Null epoch observation", None, "[]", "Created without a time", "[]",
     "[]", "[]", None, "h7", None, None),
    (8, "ms-5", "gamma/wt", None, "refactor", "Worktree work", None, "[]", "Done in a worktree", "[]", "[]",
     "[]", None, "h8", "gamma", MS + 8000),
]
SUMMARIES = [
    # id, memory_session_id, project, request, investigated, learned, completed, next_steps, files_read,
    # files_edited, notes, prompt_number, created_at_epoch
    (1, "ms-1", "alpha", "Fix the login bug", "auth.py", "tokens are UTC", "patched", "add a test",
     '["auth.py"]', '["auth.py", "test_auth.py"]', None, 1, MS + 50_000),
    (2, "ms-2", None, "Explore the repo", None, None, None, None, None, "oops", "a note", 1, None),
]
PROMPTS = [
    # id, content_session_id, prompt_number, prompt_text, created_at_epoch
    (1, "cs-1", 1, "please fix the login quokka", MS + 10),
    (2, "cs-2", 1, "look around the repo", None),
    (3, "cs-orphan", 1, "a prompt whose session row is gone", SECONDS),
    (4, "cs-1", 2, None, MS + 20),  # no text: skipped
]


def make_claude_mem(path: Path, *, tables: tuple[str, ...] = ("sdk_sessions", "observations", "session_summaries",
                                                              "user_prompts")) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    for statement in CLAUDE_MEM_SCHEMA.split(";"):
        if statement.strip() and any(f"TABLE {t} " in statement for t in tables):
            conn.execute(statement)
    rows = {"sdk_sessions": SESSIONS, "observations": OBSERVATIONS, "session_summaries": SUMMARIES,
            "user_prompts": PROMPTS}
    for table in tables:
        marks = ", ".join("?" for _ in rows[table][0])
        conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows[table])
    conn.commit()
    conn.close()
    return path


def fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def row_id(source_id: str) -> str:
    """The claude-mem row id of a provenance id ``<database key>:<row id>``."""
    key, _, row = source_id.partition(":")
    assert len(key) == 12, source_id
    return row


def import_file(store: Store, path: Path) -> dict[str, Any]:
    source = open_source(path)
    try:
        return import_claude_mem(store, source).to_dict()
    finally:
        source.close()


# -- claude-mem -------------------------------------------------------------------------------------------------
def test_epochs_in_seconds_become_milliseconds() -> None:
    assert to_ms(MS) == MS
    assert to_ms(SECONDS) == SECONDS * 1000
    assert to_ms(str(MS)) == MS
    assert to_ms(None) is None and to_ms("soon") is None and to_ms(-5) is None


def test_claude_mem_import_maps_rows_and_is_idempotent(tmp_path: Path, store: Store) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    before = fingerprint(db)

    first = import_file(store, db)
    assert first["sessions"] == 4  # cs-1, cs-2, cs-5 and the orphan prompt's cs-orphan
    assert first["observations"] == 6  # #2 duplicates #1, #4 has no content
    assert first["summaries"] == 2
    assert first["prompts"] == 3  # #4 has no text
    assert first["existing"] == 1
    assert first["skipped"] == 3  # session #4 (no id), observation #4, prompt #4
    assert first["warnings"] == 4  # facts + concepts of #3, summary #2 files_edited, the type of #7
    assert any("merged into gamma" in note for note in first["notes"])

    second = import_file(store, db)
    assert {k: second[k] for k in ("sessions", "observations", "summaries", "prompts")} == {
        "sessions": 0, "observations": 0, "summaries": 0, "prompts": 0}
    assert second["existing"] == 6 + 1 + 2 + 3
    assert store.count_items() == 11
    assert fingerprint(db) == before

    conn = store._conn
    sources = conn.execute(
        "SELECT source_table, source_id, memory_item_id FROM memory_sources WHERE source_type = 'claude-mem' "
        "ORDER BY id"
    ).fetchall()
    by_source = {(r[0], row_id(r[1])): r[2] for r in sources}
    assert set(by_source) == {
        *(("observations", str(i)) for i in (1, 2, 3, 5, 6, 7, 8)),
        ("session_summaries", "1"), ("session_summaries", "2"),
        *(("user_prompts", str(i)) for i in (1, 2, 3)),
    }
    assert by_source[("observations", "1")] == by_source[("observations", "2")]  # the duplicate row points home

    first_obs = store.get_item(by_source[("observations", "1")])
    assert first_obs.project == "alpha" and first_obs.session == "cs-1" and first_obs.platform_source == "claude-code"
    assert first_obs.facts == ["tokens are UTC"] and first_obs.files_modified == ["auth.py"]
    assert first_obs.created_at_epoch == MS + 1000 and first_obs.type == "bugfix"

    bad_json = store.get_item(by_source[("observations", "3")])
    assert bad_json.facts == ["not json at all"] and bad_json.concepts == ["[broken"] and bad_json.files_read == []

    no_project = store.get_item(by_source[("observations", "5")])
    assert no_project.project == "alpha" and no_project.text == "plain text observation"

    orphan = store.get_item(by_source[("observations", "6")])
    assert orphan.project == "beta" and orphan.session is None and orphan.created_at_epoch == SECONDS * 1000

    null_epoch = store.get_item(by_source[("observations", "7")])
    assert null_epoch.project == "unknown" and null_epoch.session == "cs-2"
    assert null_epoch.created_at_epoch == SECONDS * 1000  # the start of its session (stored in seconds)
    assert null_epoch.type == "decision-made"

    summary = store.get_item(by_source[("session_summaries", "1")])
    assert summary.kind == "summary" and summary.files_modified == ["auth.py", "test_auth.py"]
    assert summary.request == "Fix the login bug" and summary.session == "cs-1"
    assert store.get_item(by_source[("session_summaries", "2")]).files_modified == ["oops"]

    prompt = store.get_item(by_source[("user_prompts", "1")])
    assert prompt.kind == "prompt" and prompt.text == "please fix the login quokka" and prompt.project == "alpha"
    orphan_prompt = store.get_item(by_source[("user_prompts", "3")])
    assert orphan_prompt.project == "unknown" and orphan_prompt.session == "cs-orphan"

    sessions = {r["agent_session_id"]: dict(r) for r in conn.execute("SELECT * FROM sessions")}
    assert sessions["cs-1"]["platform_source"] == "claude-code" and sessions["cs-1"]["status"] == "completed"
    assert sessions["cs-1"]["ended_at_epoch"] == MS + 60_000
    assert sessions["cs-2"]["started_at_epoch"] == SECONDS * 1000 and sessions["cs-2"]["status"] == "active"
    assert sessions["cs-5"]["platform_source"] == "codex" and sessions["cs-5"]["status"] == "active"

    merged = {p.name: p.merged_into_project for p in store.projects()}
    assert merged["gamma/wt"] == "gamma"
    assert [i.title for i in store.list_items(ItemFilter(projects=["gamma"]))] == ["Worktree work"]

    hits = store.keyword_search("zanzibar")
    assert [h[0].id for h in hits] == [first_obs.id]
    assert [h[0].id for h in store.keyword_search("quokka")] == [prompt.id]


def test_claude_mem_missing_tables_are_noted(tmp_path: Path, store: Store) -> None:
    db = make_claude_mem(tmp_path / "old.db", tables=("observations",))
    report = import_file(store, db)
    assert report["observations"] == 6 and report["sessions"] == 0
    assert sum("no sdk_sessions table" in n for n in report["notes"]) == 1
    assert sum("no user_prompts table" in n for n in report["notes"]) == 1
    assert store.get_items([1])[0].session is None  # without sdk_sessions nothing links to a session


def test_claude_mem_item_keeps_project_when_its_session_lives_elsewhere(tmp_path: Path, store: Store) -> None:
    store.ensure_session("cs-1", "somewhere-else", "claude-code")  # captured live under another name
    report = import_file(store, make_claude_mem(tmp_path / "claude-mem.db"))
    assert report["observations"] == 6 and report["sessions"] == 3
    item = store.list_items(ItemFilter(projects=["alpha"]), order="oldest")[0]
    assert item.session is None and item.metadata == {"claude_mem_session": "cs-1"}
    prompt = store.list_items(ItemFilter(kinds=["prompt"], session="cs-1"))[0]
    assert prompt.project == "somewhere-else"  # a prompt follows its session


GITHUB_TOKEN = "ghp_" + "Z9y8X7w6" * 5
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPL2"


def add_private_rows(path: Path) -> None:
    """Rows with secrets and <private> blocks in every kind of text claude-mem keeps."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO observations VALUES (20, 'ms-1', 'alpha', ?, 'discovery', ?, ?, ?, ?, '[]', '[]', '[]', "
            "5, 'h20', NULL, ?)",
            (f"Cloned with https://bob:{GITHUB_TOKEN}@github.com/acme/app.git",
             "Deploy keys <private>kept in Bob's drawer</private>",
             f"uses {AWS_KEY}",
             json.dumps([f"token {GITHUB_TOKEN}", "<private>door code 1234</private>", "CI runs on push"]),
             "The deploy script reads the key. <private>Bob's home is 5 Elm St.</private> It then restarts.",
             MS + 20_000))
        conn.execute(
            "INSERT INTO session_summaries VALUES (20, 'ms-1', 'alpha', ?, NULL, ?, 'done', NULL, '[]', '[]', ?, 5, "
            "?)",
            ("Rotate the deploy key <private>before Friday's audit</private>", "password = \"hunter2hunter2\"",
             f"AWS_ACCESS_KEY_ID={AWS_KEY}", MS + 21_000))
        conn.execute("INSERT INTO user_prompts VALUES (20, 'cs-1', 5, ?, ?)",
                     (f"use {GITHUB_TOKEN} <private>and tell nobody</private> please", MS + 19_000))
        conn.execute("INSERT INTO user_prompts VALUES (21, 'cs-1', 6, ?, ?)",
                     ("<private>entirely my own business</private>", MS + 22_000))
    conn.close()


def test_claude_mem_import_applies_the_privacy_rules(tmp_path: Path, store: Store) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    add_private_rows(db)
    report = import_file(store, db)
    assert report["observations"] == 7 and report["summaries"] == 3 and report["prompts"] == 4
    assert report["skipped"] == 4  # the three odd rows, and the prompt that was entirely private
    assert any("user_prompts #21" in n and "<private>" in n for n in report["notes"])
    everything = json.dumps([i.to_dict() for i in store.list_items(ItemFilter(), limit=100)])
    for secret in (GITHUB_TOKEN, AWS_KEY, "hunter2", "drawer", "1234", "Elm St", "Friday", "tell nobody",
                   "my own business", "<private>"):
        assert secret not in everything, secret
    by_source = {(r[0], row_id(r[1])): r[2] for r in store._conn.execute(
        "SELECT source_table, source_id, memory_item_id FROM memory_sources WHERE source_type = 'claude-mem'")}
    obs = store.get_item(by_source[("observations", "20")])
    assert obs.title == "Deploy keys" and obs.subtitle == "uses [REDACTED:aws_access_key]"
    assert obs.text == "Cloned with https://bob:[REDACTED:github_token]@github.com/acme/app.git"
    assert obs.facts == ["token [REDACTED:github_token]", "CI runs on push"]
    assert obs.narrative == "The deploy script reads the key. It then restarts."
    summary = store.get_item(by_source[("session_summaries", "20")])
    assert summary.request == "Rotate the deploy key" and summary.learned == 'password = "[REDACTED:secret_assignment]"'
    assert summary.notes == "AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key]"
    prompt = store.get_item(by_source[("user_prompts", "20")])
    assert prompt.text == "use [REDACTED:github_token] please"
    assert ("user_prompts", "21") not in by_source
    assert import_file(store, db)["observations"] == 0  # idempotent with the scrubbed rows too


def test_claude_mem_import_leaves_out_excluded_projects(tmp_path: Path, store: Store) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    cfg = replace(load_settings(home=tmp_path / "home", environ={}), exclude_projects="gamma, be*, unk*")
    source = open_source(db)
    try:
        report = import_claude_mem(store, source, cfg).to_dict()
    finally:
        source.close()
    # sessions cs-2 (no project: unknown) and cs-5 (gamma); observations #6 (beta), #7 (no project, session
    # cs-2) and #8 (gamma/wt, merged into gamma); summary #2 (session cs-2); prompts #2 (cs-2) and #3 (orphan)
    assert report["skipped_excluded"] == 8
    assert (report["sessions"], report["observations"], report["summaries"], report["prompts"]) == (1, 3, 1, 1)
    assert report["skipped"] == 3 and report["existing"] == 1
    assert not any("merged into gamma" in n for n in report["notes"])
    assert {p.name for p in store.projects()} == {"alpha"}
    assert {r[0] for r in store._conn.execute("SELECT agent_session_id FROM sessions")} == {"cs-1"}
    again = CliRunner().invoke(cli, ["import", "claude-mem", str(db), "--json"],
                               env={"MEMCAIRN_HOME": str(tmp_path / "cli-home"),
                                    "MEMCAIRN_EXCLUDE_PROJECTS": "gamma,be*,unk*"})
    assert again.exit_code == 0, again.output
    data = json.loads(again.output)
    assert data["skipped_excluded"] == 8 and data["observations"] == 3 and data["sessions"] == 1
    human = CliRunner().invoke(cli, ["import", "claude-mem", str(db)],
                               env={"MEMCAIRN_HOME": str(tmp_path / "cli-home"),
                                    "MEMCAIRN_EXCLUDE_PROJECTS": "gamma,be*,unk*"})
    assert "8 of excluded projects" in human.output


@pytest.mark.parametrize("content", [None, b"this is not a database, just text\n" * 20])
def test_claude_mem_bad_source_is_a_clear_error_and_writes_nothing(
        tmp_path: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str], content: bytes | None) -> None:
    target = tmp_path / "claude-mem.db"
    if content is not None:
        target.write_bytes(content)
    code = run(["import", "claude-mem", str(target), "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert ("no claude-mem database" if content is None else "not a readable SQLite database") in err
    assert "Traceback" not in err
    assert not (isolated_home / "memcairn.db").exists() and not any(isolated_home.glob("*.db"))


def test_claude_mem_unrelated_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.close()
    with pytest.raises(ValidationError, match="does not look like a claude-mem database"):
        open_source(other)


def test_claude_mem_cli_json_and_human_output(tmp_path: Path) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    runner = CliRunner()
    result = runner.invoke(cli, ["import", "claude-mem", str(db), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {k: data[k] for k in ("sessions", "observations", "summaries", "prompts", "skipped")} == {
        "sessions": 4, "observations": 6, "summaries": 2, "prompts": 3, "skipped": 3}
    result = runner.invoke(cli, ["import", "claude-mem", str(db)])
    assert result.exit_code == 0
    assert result.output.startswith("imported 0 sessions, 0 observations, 0 summaries, 0 prompts")


def test_claude_mem_console_script(tmp_path: Path) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    before = fingerprint(db)
    home = tmp_path / "script-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env["MEMCAIRN_HOME"] = str(home)
    exe = Path(sys.executable).with_name("memcairn")
    out = subprocess.run([str(exe), "import", "claude-mem", str(db), "--json"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["observations"] == 6 and data["prompts"] == 3 and data["sessions"] == 4 and data["warnings"] == 4
    assert fingerprint(db) == before
    with Store(home / "memcairn.db") as check:
        assert check.count_items() == 11


# -- JSONL export and import ------------------------------------------------------------------------------------
def snapshot(store: Store) -> dict[str, Any]:
    """Every table's content without surrogate ids, keyed by what identifies a row across databases."""
    conn = store._conn
    projects = {r["name"]: (r["merged_into_project"], r["created_at_epoch"])
                for r in conn.execute("SELECT * FROM projects")}
    sessions = {}
    for r in conn.execute("SELECT s.*, p.name AS project FROM sessions s JOIN projects p ON p.id = s.project_id"):
        row = {k: r[k] for k in r.keys() if k not in ("id", "project_id")}
        sessions[(r["platform_source"], r["agent_session_id"])] = row
    items = {}
    for r in conn.execute(
        "SELECT m.*, p.name AS project, s.platform_source AS s_platform, s.agent_session_id AS s_agent "
        "FROM memory_items m JOIN projects p ON p.id = m.project_id LEFT JOIN sessions s ON s.id = m.session_id"
    ):
        items[r["uuid"]] = {k: r[k] for k in r.keys() if k not in ("id", "project_id", "session_id")}
    sources = sorted(
        tuple(r) for r in conn.execute(
            "SELECT m.uuid, src.source_type, src.source_table, src.source_id, src.created_at_epoch "
            "FROM memory_sources src JOIN memory_items m ON m.id = src.memory_item_id")
    )
    return {"projects": projects, "sessions": sessions, "items": items, "sources": sources}


def populate(store: Store, tmp_path: Path) -> None:
    import_file(store, make_claude_mem(tmp_path / "claude-mem.db"))
    store.add_items([
        NewItem(project="delta", kind="manual", title="Use WAL", text="SQLite runs in WAL mode ünïcode",
                metadata={"pinned": True, "tags": ["a", "b"]}, created_at_epoch=MS - 5),
        NewItem(project="delta", kind="observation", title="Edited later", narrative="first version",
                session="cs-9", platform_source="gemini-cli", source=("transcript", "t.jsonl", "7")),
    ])
    edited = store.list_items(ItemFilter(projects=["delta"], kinds=["observation"]))[0]
    store.update_item(edited.id, narrative="second version", facts=["edited"])
    store.end_session("cs-9", "gemini-cli", status="failed", ended_at_epoch=MS + 99)
    store.merge_project("delta", "alpha")


def test_export_import_round_trip_is_exact_and_idempotent(tmp_path: Path, store: Store) -> None:
    populate(store, tmp_path)
    out = tmp_path / "export.jsonl"
    counts = export_to_file(store, out)
    lines = out.read_text(encoding="utf-8").splitlines()
    header, end = json.loads(lines[0]), json.loads(lines[-1])
    assert header["record"] == "header" and header["format"] == "memcairn-export" and header["version"] == 1
    assert end == {"record": "end", **counts}
    assert counts["items"] == store.count_items() == 13
    records = [json.loads(line) for line in lines[1:-1]]
    assert [r["record"] for r in records] == sorted((r["record"] for r in records),
                                                    key=["project", "session", "item"].index)
    item = next(r for r in records if r["record"] == "item" and r["title"] == "Token expiry zanzibar")
    assert item["session"] == ["claude-code", "cs-1"] and item["facts"] == ["tokens are UTC"]
    assert {row_id(s["source_id"]) for s in item["sources"]} == {"1", "2"}

    with Store(tmp_path / "copy.db") as copy:
        report = import_jsonl(copy, out)
        assert report.malformed == 0 and report.notes == []
        assert (report.projects, report.sessions, report.items) == (counts["projects"], counts["sessions"], 13)
        assert snapshot(copy) == snapshot(store)
        assert [h[0].uuid for h in copy.keyword_search("zanzibar")] == [h[0].uuid for h in store.keyword_search(
            "zanzibar")]

        again = import_jsonl(copy, out)
        assert (again.projects, again.sessions, again.items, again.duplicates, again.malformed) == (0, 0, 0, 0, 0)
        assert again.existing == counts["projects"] + counts["sessions"] + 13
        assert snapshot(copy) == snapshot(store)

    # the source store already holds every uuid: nothing is added there either
    report = import_jsonl(store, out)
    assert report.items == 0 and report.existing == counts["projects"] + counts["sessions"] + 13


def test_import_same_content_under_another_uuid_counts_as_duplicate(tmp_path: Path, store: Store) -> None:
    store.add_item(NewItem(project="p", kind="manual", title="same", text="body"))
    out = tmp_path / "e.jsonl"
    export_to_file(store, out)
    with Store(tmp_path / "other.db") as other:
        other.add_item(NewItem(project="p", kind="manual", title="same", text="body"))
        report = import_jsonl(other, out)
        assert (report.items, report.duplicates, other.count_items()) == (0, 1, 1)


def test_import_skips_malformed_lines_and_reports_them(tmp_path: Path, store: Store) -> None:
    populate(store, tmp_path)
    out = tmp_path / "export.jsonl"
    export_to_file(store, out)
    lines = out.read_text(encoding="utf-8").splitlines()
    good_item = json.loads(next(line for line in lines if '"record":"item"' in line))
    bad_platform = {**good_item, "uuid": "00000000-0000-0000-0000-000000000001", "platform_source": "codex"}
    bad_status = {"record": "session", "project": "x", "agent_session_id": "s-bad", "platform_source": "codex",
                  "started_at_epoch": MS, "ended_at_epoch": None, "status": "sleeping"}
    garbage = ["{not json", json.dumps({"record": "item", "uuid": "x"}), "[1, 2]", json.dumps({"record": "bogus"}),
               json.dumps(bad_platform), json.dumps(bad_status)]
    mixed = [lines[0], *garbage[:3], *lines[1:5], "", *garbage[3:], *lines[5:]]
    target = tmp_path / "mixed.jsonl"
    target.write_bytes(("\n".join(mixed) + "\n").encode("utf-8") + b"\xff\xfe broken bytes\n")

    with Store(tmp_path / "copy.db") as copy:
        report = import_jsonl(copy, target)
        assert report.malformed == 7
        assert report.malformed_lines == [2, 3, 4, 10, 11, 12, len(mixed) + 1]
        assert any("not JSON" in e for e in report.errors) and any("refused by the store" in e for e in report.errors)
        assert any("not UTF-8" in e for e in report.errors)
        assert report.items == 13
        assert report.notes == []  # a bad line after the end record does not mean the file was cut short
        assert snapshot(copy) == snapshot(store)


@pytest.mark.parametrize("first_line, message", [
    ('{"record": "header", "format": "something-else", "version": 1}', "not a memcairn export"),
    ('{"record": "header", "format": "memcairn-export", "version": 2}', "newer memcairn"),
    ('{"record": "header", "format": "memcairn-export", "version": "1"}', "export version"),
    ("not json", "first line is not JSON"),
    ("", "is empty"),
])
def test_import_refuses_wrong_header(tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_home: Path,
                                     first_line: str, message: str) -> None:
    target = tmp_path / "x.jsonl"
    target.write_text(first_line + "\n", encoding="utf-8")
    code = run(["import", "jsonl", str(target)])
    _, err = capsys.readouterr()
    assert code == 2 and message in err and "Traceback" not in err
    assert not any(isolated_home.glob("*.db"))


def test_export_keeps_an_existing_file_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    isolated_home: Path) -> None:
    out = tmp_path / "backup.jsonl"
    out.write_text("yesterday's backup\n", encoding="utf-8")
    code = run(["export", "--output", str(out)])
    _, err = capsys.readouterr()
    assert code == 2 and "already exists" in err and "--force" in err and "Traceback" not in err
    assert out.read_text(encoding="utf-8") == "yesterday's backup\n"
    assert run(["export", "--output", str(out), "--force"]) == 0
    assert out.read_text(encoding="utf-8").startswith('{"record":"header"')


def test_an_interrupted_export_leaves_the_existing_file_whole(tmp_path: Path, store: Store,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    populate(store, tmp_path)
    out = tmp_path / "backup.jsonl"
    out.write_text("yesterday's backup\n", encoding="utf-8")
    rows = store.export_items

    def cut_short() -> Any:
        yield next(iter(rows()))
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "export_items", cut_short)
    with pytest.raises(KeyboardInterrupt):
        export_to_file(store, out)
    assert out.read_text(encoding="utf-8") == "yesterday's backup\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_an_export_uses_its_own_temporary_file_and_syncs_it_before_the_rename(
        tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that happens to carry the temporary-looking name is not the export's to overwrite or delete, and
    the new file's bytes are on disk before it takes the old one's place (else a crash can leave it empty)."""
    populate(store, tmp_path)
    steps: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (steps.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (steps.append("replace"), real_replace(a, b))[1])
    for name in ("backup.jsonl", "backup.jsonl.gz"):
        bystander = tmp_path / f".{name}.partial"
        bystander.write_text("someone else's\n", encoding="utf-8")
        steps.clear()
        counts = export_to_file(store, tmp_path / name)
        assert steps == ["fsync", "replace"]
        assert bystander.read_text(encoding="utf-8") == "someone else's\n"
        with Store(tmp_path / f"{name}.db") as copy:
            assert import_jsonl(copy, tmp_path / name).items == counts["items"] > 11
    assert gzip.open(tmp_path / "backup.jsonl.gz", "rt", encoding="utf-8").readline().startswith('{"record":"header"')


def test_an_export_saved_with_a_byte_order_mark_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       isolated_home: Path) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    assert run(["import", "claude-mem", str(db)]) == 0
    out = tmp_path / "backup.jsonl"
    assert run(["export", "--output", str(out)]) == 0
    marked = tmp_path / "edited.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + out.read_bytes().replace(b"\n", b"\r\n"))  # as Notepad saves it
    capsys.readouterr()
    assert run(["import", "jsonl", str(marked), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["malformed"] == 0 and report["existing"] > 11


def test_export_and_import_through_the_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    db = make_claude_mem(tmp_path / "claude-mem.db")
    assert runner.invoke(cli, ["import", "claude-mem", str(db)]).exit_code == 0
    out = tmp_path / "backup.jsonl"
    result = runner.invoke(cli, ["export", "--output", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["items"] == 11
    assert not list(tmp_path.glob(".*partial"))

    result = runner.invoke(cli, ["export", "--output", "-"])
    assert result.exit_code == 0 and result.output.splitlines()[0].startswith('{"record":"header"')


    result = runner.invoke(cli, ["import", "jsonl", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["items"] == 0 and data["existing"] > 11 and data["malformed"] == 0

    result = runner.invoke(cli, ["import", "jsonl", str(out)])
    assert result.exit_code == 0 and result.output.startswith("imported 0 projects, 0 sessions, 0 items")


def test_truncated_export_is_noted_and_empty_store_round_trips(tmp_path: Path, store: Store) -> None:
    out = tmp_path / "empty.jsonl"
    assert export_to_file(store, out) == {"projects": 0, "sessions": 0, "items": 0}
    with Store(tmp_path / "copy.db") as copy:
        report = import_jsonl(copy, out)
        assert report.to_dict()["items"] == 0 and report.notes == [] and snapshot(copy) == snapshot(store)

    populate(store, tmp_path)
    export_to_file(store, out)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(out.read_text(encoding="utf-8").splitlines()[:-3]) + "\n", encoding="utf-8")
    with Store(tmp_path / "cut.db") as copy:
        report = import_jsonl(copy, cut)
        assert report.items == 11 and report.malformed == 0
        assert any("cut short" in note for note in report.notes)


def test_reimport_completes_a_session_that_was_active(tmp_path: Path, store: Store) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    import_file(store, db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sdk_sessions SET status = 'completed', completed_at_epoch = ? WHERE id = 2", (MS + 5,))
    conn.close()
    report = import_file(store, db)
    assert report["sessions"] == 0 and report["observations"] == 0
    row = store._conn.execute("SELECT status, ended_at_epoch FROM sessions WHERE agent_session_id = 'cs-2'").fetchone()
    assert tuple(row) == ("completed", MS + 5)


def test_claude_mem_before_the_session_id_rename(tmp_path: Path, store: Store) -> None:
    db = tmp_path / "legacy.db"
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE sdk_sessions (id INTEGER PRIMARY KEY, claude_session_id TEXT, sdk_session_id TEXT,
                project TEXT, started_at_epoch INTEGER, status TEXT);
            CREATE TABLE observations (id INTEGER PRIMARY KEY, sdk_session_id TEXT, project TEXT, text TEXT,
                type TEXT, created_at_epoch INTEGER);
            CREATE TABLE user_prompts (id INTEGER PRIMARY KEY, claude_session_id TEXT, prompt_number INTEGER,
                prompt_text TEXT, created_at_epoch INTEGER);
        """)
        conn.execute("INSERT INTO sdk_sessions VALUES (1, 'cs-old', 'ms-old', 'legacy', ?, 'completed')", (SECONDS,))
        conn.execute("INSERT INTO observations VALUES (1, 'ms-old', 'legacy', 'an old flat observation', 'change', ?)",
                     (SECONDS,))
        conn.execute("INSERT INTO user_prompts VALUES (1, 'cs-old', 1, 'an old prompt', ?)", (SECONDS,))
        conn.execute("INSERT INTO user_prompts VALUES (2, 'cs-gone', 1, 'a prompt without session', NULL)")
    conn.close()
    report = import_file(store, db)
    assert (report["sessions"], report["observations"], report["prompts"], report["skipped"]) == (2, 1, 2, 0)
    assert any("no session_summaries table" in n for n in report["notes"])
    items = store.list_items(ItemFilter(session="cs-old"), order="oldest")
    assert [(i.kind, i.project) for i in items] == [("observation", "legacy"), ("prompt", "legacy")]


def test_claude_mem_text_that_is_not_utf8_is_imported_with_replacement_characters(tmp_path: Path,
                                                                                  store: Store) -> None:
    """claude-mem (JavaScript) can store half of a cut emoji: one bad row must not stop the whole import."""
    db = make_claude_mem(tmp_path / "claude-mem.db")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE observations SET title = CAST(X'437574206D6F6A69F09F' AS TEXT) WHERE id = 8")
        conn.execute("INSERT INTO user_prompts VALUES (10, 'cs-1', 3, CAST(X'626164EDA080' AS TEXT), ?)",
                     (MS + 30,))
    conn.close()
    report = import_file(store, db)
    assert report["observations"] == 6 and report["prompts"] == 4
    titles = [i.title for i in store.list_items(ItemFilter(kinds=["observation"]), limit=50)]
    assert "Cut moji\ufffd" in titles
    texts = [i.text for i in store.list_items(ItemFilter(kinds=["prompt"]), limit=50)]
    assert any(t and t.startswith("bad\ufffd") for t in texts)


def test_import_rejects_a_lone_surrogate_line_and_keeps_the_rest(tmp_path: Path, store: Store) -> None:
    """``"\\ud800"`` parses as JSON but cannot be stored: that line is malformed, the batch around it is not lost."""
    store.add_items([NewItem(project="p", kind="manual", title=f"note {n}", text="body") for n in range(3)])
    out = tmp_path / "e.jsonl"
    export_to_file(store, out)
    lines = out.read_text(encoding="utf-8").splitlines()
    at = next(n for n, line in enumerate(lines) if '"title":"note 1"' in line)
    lines[at] = lines[at].replace('"title":"note 1"', '"title":"note \\ud800 1"')
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with Store(tmp_path / "copy.db") as copy:
        report = import_jsonl(copy, out)
        assert report.malformed_lines == [at + 1] and "lone surrogate" in report.errors[0]
        assert report.items == 2 and copy.count_items() == 2


# -- audit: defects found in import and export ------------------------------------------------------------------
def test_a_second_claude_mem_database_with_the_same_row_ids_is_imported(tmp_path: Path, store: Store) -> None:
    """Row ids are only unique inside one claude-mem database: another machine's database (or claude-mem started
    afresh) reuses ids 1, 2, 3... and its rows must not be taken for rows imported already."""
    import_file(store, make_claude_mem(tmp_path / "laptop.db"))
    other = tmp_path / "desktop.db"
    with sqlite3.connect(other) as conn:
        conn.executescript(CLAUDE_MEM_SCHEMA)
        conn.execute("INSERT INTO sdk_sessions VALUES (1, 'cs-desk', 'ms-desk', 'alpha', 'claude', NULL, ?, NULL, "
                     "'active')", (MS,))
        conn.execute("INSERT INTO observations VALUES (1, 'ms-desk', 'alpha', NULL, 'discovery', 'Desktop finding', "
                     "NULL, '[]', 'Seen on the desktop', '[]', '[]', '[]', 1, 'd1', NULL, ?)", (MS + 1,))
        conn.execute("INSERT INTO session_summaries VALUES (1, 'ms-desk', 'alpha', 'Desktop request', NULL, NULL, "
                     "NULL, NULL, '[]', '[]', NULL, 1, ?)", (MS + 2,))
        conn.execute("INSERT INTO user_prompts VALUES (1, 'cs-desk', 1, 'a desktop prompt', ?)", (MS + 3,))
    conn.close()
    report = import_file(store, other)
    assert (report["sessions"], report["observations"], report["summaries"], report["prompts"]) == (1, 1, 1, 1)
    assert report["existing"] == 0
    assert [i.title for i in store.list_items(ItemFilter(session="cs-desk", kinds=["observation"]))] == [
        "Desktop finding"]
    again = import_file(store, other)  # still idempotent per database
    assert (again["observations"], again["summaries"], again["prompts"], again["existing"]) == (0, 0, 0, 3)
    assert import_file(store, tmp_path / "laptop.db")["observations"] == 0


def test_claude_mem_iso_and_fractional_timestamps(tmp_path: Path, store: Store) -> None:
    """Epochs may be ISO strings or fractional seconds; when the epoch is missing the ISO created_at is used."""
    assert to_ms("2024-01-15T10:00:00.123Z") == 1_705_312_800_123
    assert to_ms("2024-01-15 10:00:00") == 1_705_312_800_000  # naive: UTC, as claude-mem writes it
    assert to_ms("2024-01-15T11:00:00+01:00") == 1_705_312_800_000
    assert to_ms(1_700_000_000.25) == 1_700_000_000_250
    assert to_ms("1969-12-31T00:00:00Z") is None and to_ms("not a date") is None and to_ms(float("nan")) is None
    db = tmp_path / "iso.db"
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE sdk_sessions (id INTEGER PRIMARY KEY, content_session_id TEXT, memory_session_id TEXT,
                project TEXT, started_at TEXT, started_at_epoch INTEGER, completed_at TEXT,
                completed_at_epoch INTEGER, status TEXT);
            CREATE TABLE observations (id INTEGER PRIMARY KEY, memory_session_id TEXT, project TEXT, text TEXT,
                type TEXT, created_at TEXT, created_at_epoch INTEGER);
        """)
        conn.execute("INSERT INTO sdk_sessions VALUES (1, 'cs-iso', 'ms-iso', 'p', '2024-01-15T09:00:00.000Z', NULL,"
                     " '2024-01-15T12:00:00.000Z', NULL, 'completed')")
        conn.execute("INSERT INTO observations VALUES (1, 'ms-iso', 'p', 'iso epoch', 'change', NULL, "
                     "'2024-01-15T10:00:00.123Z')")
        conn.execute("INSERT INTO observations VALUES (2, 'ms-iso', 'p', 'only created_at', 'change', "
                     "'2024-01-15T10:30:00.000Z', NULL)")
    conn.close()
    import_file(store, db)
    times = {i.text: i.created_at_epoch for i in store.list_items(ItemFilter(), limit=10)}
    assert times == {"iso epoch": 1_705_312_800_123, "only created_at": 1_705_314_600_000}
    row = store._conn.execute("SELECT started_at_epoch, ended_at_epoch FROM sessions").fetchone()
    assert tuple(row) == (1_705_309_200_000, 1_705_320_000_000)


def test_export_to_stdout_is_utf8_whatever_the_locale(tmp_path: Path) -> None:
    """The format is UTF-8: `memcairn export -o - > file` under a non-UTF-8 console encoding (a Windows code page,
    PYTHONIOENCODING) must not stop at the first emoji with a traceback and half a file."""
    home = tmp_path / "home"
    with Store(home / "memcairn.db") as store:
        store.add_item(NewItem(project="p", kind="manual", title="party 🎉 ünï", text="body"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env.update(MEMCAIRN_HOME=str(home), PYTHONIOENCODING="ascii")
    exe = Path(sys.executable).with_name("memcairn")
    out = subprocess.run([str(exe), "export", "--output", "-"], capture_output=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert "party 🎉 ünï" in out.stdout.decode("utf-8") and b"\r\n" not in out.stdout
    target = tmp_path / "piped.jsonl"
    target.write_bytes(out.stdout)
    with Store(tmp_path / "copy.db") as copy:
        assert import_jsonl(copy, target).items == 1


def test_gzip_export_and_import(tmp_path: Path, store: Store) -> None:
    """An export to a .gz path is compressed, and `import jsonl` reads a gzip'd export (also one made with gzip)."""
    populate(store, tmp_path)
    packed = tmp_path / "backup.jsonl.gz"
    counts = export_to_file(store, packed)
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    with Store(tmp_path / "copy.db") as copy:
        report = import_jsonl(copy, packed)
        assert report.items == counts["items"] == 13 and report.malformed == 0 and report.notes == []
        assert snapshot(copy) == snapshot(store)
    plain = tmp_path / "plain.jsonl"
    export_to_file(store, plain)
    assert plain.read_bytes()[:1] == b"{"
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(plain.read_bytes())[:-400])
    result = CliRunner().invoke(cli, ["import", "jsonl", str(cut), "--json"],
                                env={"MEMCAIRN_HOME": str(tmp_path / "cut-home")})
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert 0 < data["items"] < 13 and any("cut short" in n for n in data["notes"])


def test_a_damaged_claude_mem_database_is_blamed_not_the_store(tmp_path: Path, isolated_home: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A page of the claude-mem file that SQLite cannot read must not be reported as a damaged memcairn.db (with
    the advice to move the store aside)."""
    db = tmp_path / "claude-mem.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(CLAUDE_MEM_SCHEMA)
        conn.executemany("INSERT INTO observations (id, project, text, type, created_at_epoch) VALUES (?, 'p', ?, "
                         "'change', ?)", [(n, f"row {n} " + "y" * 300, MS) for n in range(1, 3000)])
    conn.close()
    data = bytearray(db.read_bytes())
    data[4096 * 100:4096 * 101] = b"\xab" * 4096  # a page in the middle of the observations
    db.write_bytes(bytes(data))
    code = run(["import", "claude-mem", str(db)])
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    assert "claude-mem database" in err and "observations" in err and "malformed" in err
    assert "memcairn.db" not in err and "move it aside" not in err
    with Store(isolated_home / "memcairn.db") as store:
        imported = store.count_items()
    assert 0 < imported < 2999  # the rows read before the damaged page are kept
    code = run(["import", "claude-mem", str(db), "--json"])  # a second run adds nothing twice
    with Store(isolated_home / "memcairn.db") as store:
        assert store.count_items() == imported


def test_claude_mem_json_arrays_holding_half_an_emoji_are_imported(tmp_path: Path, store: Store) -> None:
    """JavaScript's JSON.stringify writes half of a cut emoji as a ``\\ud83d`` escape; it parses to a lone surrogate
    that SQLite cannot take. The import must not stop there: the half becomes a replacement character."""
    db = make_claude_mem(tmp_path / "claude-mem.db")
    with sqlite3.connect(db) as conn:
        conn.execute("""UPDATE observations SET facts = '["cut emoji \\ud83d", "whole \\ud83d\\ude00"]' WHERE id = 1""")
        conn.execute("""UPDATE session_summaries SET files_edited = '["a\\udc00.py"]' WHERE id = 1""")
    conn.close()
    report = import_file(store, db)
    assert (report["observations"], report["summaries"]) == (6, 2)
    facts = {i.title: i.facts for i in store.list_items(ItemFilter(kinds=["observation"]), limit=50)}
    assert facts["Token expiry zanzibar"] == ["cut emoji \ufffd", "whole 😀"]
    summary = store.list_items(ItemFilter(kinds=["summary"], projects=["alpha"]), limit=5)[0]
    assert summary.files_modified == ["a\ufffd.py"]


def test_claude_mem_numbers_out_of_range_do_not_stop_the_import(tmp_path: Path, store: Store) -> None:
    """An epoch or prompt number SQLite (or a date) cannot hold, or a JSON column nested past the parser's depth, is
    junk like any other: the row is imported with the fallback, not the whole import ended by a traceback."""
    db = make_claude_mem(tmp_path / "claude-mem.db")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE observations SET created_at_epoch = 1e20, prompt_number = 9e999 WHERE id = 1")
        conn.execute("UPDATE observations SET prompt_number = 99999999999999999999 WHERE id = 3")
        conn.execute("UPDATE observations SET facts = ? WHERE id = 8", ("[" * 100_000,))
        conn.execute("UPDATE sdk_sessions SET started_at_epoch = 1e25 WHERE id = 5")
    conn.close()
    report = import_file(store, db)
    assert (report["sessions"], report["observations"], report["summaries"], report["prompts"]) == (4, 6, 2, 3)
    items = {i.title: i for i in store.list_items(ItemFilter(kinds=["observation"]), limit=50)}
    assert items["Token expiry zanzibar"].created_at_epoch == MS  # its session's start
    assert items["Token expiry zanzibar"].prompt_number is None and items["Bad json row"].prompt_number is None
    assert items["Worktree work"].facts == ["[" * 100_000]
    assert to_ms(1_700_000_000_000_000) is None  # microseconds: past the year 9999 as milliseconds


def test_a_claude_mem_reimport_does_not_bring_back_a_deleted_row(tmp_path: Path) -> None:
    db = make_claude_mem(tmp_path / "claude-mem.db")
    with Store(tmp_path / "m.db") as store:
        first = import_file(store, db)
        total = store.count_items()
        doomed = store.list_items(ItemFilter(kinds=["observation"]), limit=1)[0]
        store.delete_items([doomed.id])

        second = import_file(store, db)
        assert second["observations"] == 0 and second["forgotten"] == 1
        assert store.count_items() == total - 1
        assert doomed.uuid not in {i.uuid for i in store.list_items(limit=100)}
        assert first["forgotten"] == 0


def test_importing_an_export_taken_before_a_delete_leaves_it_deleted(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        keep = store.add_item(NewItem(project="alpha", kind="manual", text="Retry with jitter"))
        doomed = store.add_item(NewItem(project="alpha", kind="manual", text="Use port 8080"))
        out = tmp_path / "e.jsonl"
        export_to_file(store, out)
        store.delete_items([doomed.id])

        report = import_jsonl(store, out)
        assert (report.items, report.forgotten, report.malformed) == (0, 1, 0)
        assert [i.id for i in store.list_items()] == [keep.id]
        assert report.to_dict()["forgotten"] == 1


def test_claude_mem_import_without_a_database_at_the_default_path_is_a_note(
        tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "fresh-home"))
    assert run(["import", "claude-mem"]) == 0
    err = capsys.readouterr().err
    assert f"no claude-mem database at {tmp_path / 'fresh-home' / '.claude-mem' / 'claude-mem.db'}" in err
    assert not isolated_home.exists()  # nothing opened, nothing made
