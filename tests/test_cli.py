from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import click
import pytest

from memcairn.cli.app import cli, run


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_search_show_round_trip_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "add", "--project", "demo", "--kind", "observation", "--type", "bugfix",
                        "--title", "Fix login expiry", "--narrative", "compared in local time", "--fact",
                        "tokens are UTC", "--concept", "gotcha", "--file-modified", "auth.py", "--session", "s1",
                        "--platform", "claude-code", "--json")
    assert code == 0
    added = json.loads(out)
    assert added == {"id": added["id"], "created": True}
    code, out, _ = _run(capsys, "add", "--project", "demo", "--kind", "observation", "--type", "bugfix",
                        "--title", "Fix login expiry", "--narrative", "compared in local time", "--session", "s1",
                        "--platform", "claude-code", "--json")
    assert json.loads(out) == {"id": added["id"], "created": False}

    code, out, _ = _run(capsys, "search", "login time zone", "--project", "demo", "--kind", "observation",
                        "--type", "bugfix", "--limit", "5", "--json")
    data = json.loads(out)
    assert data["strategy"] in {"keyword", "hybrid"}
    assert data["results"][0]["id"] == added["id"]
    assert set(data["results"][0]) >= {"id", "kind", "type", "title", "project", "created_at_epoch", "score"}

    code, out, _ = _run(capsys, "show", str(added["id"]), "--json")
    records = json.loads(out)
    assert records[0]["facts"] == ["tokens are UTC"] and records[0]["files_modified"] == ["auth.py"]


def test_show_takes_ids_as_searches_print_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "add", "--project", "p", "--title", "hash ids", "--json")
    item = json.loads(out)["id"]
    code, out, _ = _run(capsys, "show", f"#{item}", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [item]
    code, _, err = _run(capsys, "show", "#x")
    assert code == 2 and "not an item id" in err


def test_show_reports_unknown_ids_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "show", "424242")
    assert code == 2 and "not found" in err and "Traceback" not in err


def test_stats_doctor_and_db_path(capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    _run(capsys, "add", "--project", "p", "--title", "x")
    code, out, _ = _run(capsys, "stats", "--json")
    assert json.loads(out)["items"] == 1
    code, out, _ = _run(capsys, "doctor")
    assert code == 0
    code, out, _ = _run(capsys, "db", "path")
    assert out.strip() == str(isolated_home / "memcairn.db")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "--project", "p", "--type", "Not Valid", "--title", "x"], "type"),
        (["add", "--project", "p", "--kind", "nope", "--title", "x"], "nope"),
        (["add", "--project", "p"], "needs some content"),
        (["search", "x", "--limit", "abc"], "limit"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _, err = _run(capsys, *args)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_an_oversized_field_is_rejected_not_truncated(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "add", "--project", "p", "--title", "t", "--text", "x" * (256 * 1024 + 10))
    assert code == 2 and "256 KiB" in err
    assert json.loads(_run(capsys, "stats", "--json")[1])["items"] == 0


def test_a_corrupt_database_is_named_in_the_error(capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "memcairn.db").write_bytes(b"garbage" * 1000)
    code, _, err = _run(capsys, "stats")
    assert code == 2 and str(isolated_home / "memcairn.db") in err and "Traceback" not in err


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
        else:
            found.append((prefix + name, command))
    return found


@pytest.mark.parametrize(("name", "command"), _commands(cli))
def test_every_command_has_help_with_an_example(name: str, command: click.Command) -> None:
    assert command.help and "Example:" in command.help, f"`memcairn {name}` needs a docstring with Example:"


def test_the_console_script_runs_in_a_fresh_process(isolated_home: Path) -> None:
    exe = Path(sys.executable).with_name("memcairn")
    out = subprocess.run([str(exe), "add", "--project", "p", "--title", "hello", "--json"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["created"] is True
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "memcairn" in out.stdout


def _tiny_longmemeval(path: Path) -> Path:
    path.write_text(json.dumps([{
        "question_id": "q1", "question_type": "single-session-user", "question": "What breed is my dog?",
        "question_date": "2023/06/01 (Thu) 10:00", "haystack_session_ids": ["s1"],
        "haystack_dates": ["2023/05/01 (Mon) 09:00"],
        "haystack_sessions": [[{"role": "user", "content": "I adopted a beagle."}]], "answer_session_ids": ["s1"],
    }]))
    return path


def test_bench_longmemeval_refuses_an_unwritable_json_path_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _tiny_longmemeval(tmp_path / "lme.json")
    code, out, err = _run(capsys, "bench", "longmemeval", str(data), "--method", "keyword", "--quiet",
                          "--json", str(tmp_path / "missing" / "out.json"))
    assert code == 2 and out == ""  # refused before the run: nothing rendered, no traceback
    assert "--json" in err and "does not exist" in err


def test_bench_longmemeval_refuses_method_with_all_methods(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    data = _tiny_longmemeval(tmp_path / "lme.json")
    code, out, err = _run(capsys, "bench", "longmemeval", str(data), "--method", "keyword", "--all-methods")
    assert code == 2 and out == ""
    assert "not both" in err


def test_doctor_reports_a_file_that_is_not_a_database_as_a_problem(capsys: pytest.CaptureFixture[str],
                                                                     isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "memcairn.db").write_bytes(b"garbage" * 1000)
    code, out, err = _run(capsys, "doctor")
    assert code == 1 and "Traceback" not in out + err
    assert "[FAIL] open the database" in out and "not a readable memcairn database" in out
    code, out, _ = _run(capsys, "doctor", "--json")
    assert code == 1 and json.loads(out)["healthy"] is False
    assert (isolated_home / "memcairn.db").read_bytes() == b"garbage" * 1000  # never touched


def test_doctor_reports_a_damaged_page_as_a_problem_without_a_traceback(capsys: pytest.CaptureFixture[str],
                                                                        isolated_home: Path) -> None:
    conn = _sixty_notes(capsys, isolated_home)
    page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'memory_items'").fetchone()[0]
    conn.close()
    _overwrite_page(isolated_home / "memcairn.db", page)
    for args in (["doctor"], ["doctor", "--fix"]):
        code, out, err = _run(capsys, *args)
        assert code == 1, out + err
        assert "[FAIL] sqlite quick_check" in out and ".recover" in out and "Traceback" not in out + err


def test_a_page_damaged_under_a_command_gives_one_line_not_a_traceback(capsys: pytest.CaptureFixture[str],
                                                                       isolated_home: Path) -> None:
    conn = _sixty_notes(capsys, isolated_home)
    leaves = [r[0] for r in conn.execute(
        "SELECT pageno FROM dbstat WHERE name = 'memory_items' AND pagetype = 'leaf'")] if _has_dbstat(conn) else []
    conn.close()
    if not leaves:
        pytest.skip("this SQLite has no dbstat table to find a data page")
    _overwrite_page(isolated_home / "memcairn.db", leaves[-1])
    code, out, err = _run(capsys, "show", *[str(i) for i in range(1, 61)])
    assert code == 2 and "Traceback" not in out + err, out + err
    assert err.startswith("error: ") and "malformed" in err and "memcairn doctor" in err


def _sixty_notes(capsys: pytest.CaptureFixture[str], home: Path) -> sqlite3.Connection:
    """A store of 60 notes, checkpointed into the main file; a connection to it for finding pages."""
    for i in range(60):
        _run(capsys, "add", "--project", "p", "--title", f"note {i}", "--text", "lorem ipsum " * 40)
    conn = sqlite3.connect(home / "memcairn.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return conn


def _overwrite_page(path: Path, page: int) -> None:
    with path.open("r+b") as f:
        f.seek((page - 1) * 4096)
        f.write(b"\xa5" * 4096)


def _has_dbstat(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1 FROM dbstat LIMIT 1")
    except Exception:  # noqa: BLE001 - a build without SQLITE_ENABLE_DBSTAT_VTAB
        return False
    return True


def test_doctor_reports_a_database_from_a_newer_memcairn_as_a_problem(capsys: pytest.CaptureFixture[str],
                                                                      isolated_home: Path) -> None:
    _run(capsys, "add", "--project", "p", "--title", "x")
    conn = sqlite3.connect(isolated_home / "memcairn.db")
    conn.execute("INSERT INTO _memcairn_migrations VALUES (999, 'm999_future', 0)")
    conn.commit()
    conn.close()
    code, out, err = _run(capsys, "doctor")
    assert code == 1 and "newer memcairn" in out and "Traceback" not in out + err


def test_show_an_id_too_large_for_sqlite_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "show", "9" * 25)
    assert code == 2 and "not an item id" in err and "Traceback" not in err


def test_show_prints_no_terminal_escapes_from_stored_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "add", "--project", "p", "--title", "\x1b[2Jevil", "--text",
                        "line1\nline2\x1b]0;pwned\x07", "--fact", "f\x1b[31m", "--json")
    item = json.loads(out)["id"]
    code, out, _ = _run(capsys, "show", str(item))
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "  text: line1 line2]0;pwned\n" in out


def test_add_with_text_that_is_not_utf8_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "add", "--project", "p", "--title", "bad \udcff")
    assert code == 2 and "not valid Unicode" in err and "Traceback" not in err


def test_forget_deletes_by_id_and_names_what_was_not_there(capsys: pytest.CaptureFixture[str],
                                                           isolated_home: Path) -> None:
    from memcairn.core.models import NewItem
    from memcairn.store import Store

    ids = [json.loads(_run(capsys, "add", "--project", "demo", "--title", title, "--text", title, "--json")[1])["id"]
           for title in ("keep me", "drop me")]
    code, out, err = _run(capsys, "forget", f"#{ids[1]}", "999")
    assert code == 2 and out == f"deleted #{ids[1]}\n" and "no memory with id #999" in err
    with Store(isolated_home / "memcairn.db") as store:
        assert [i.id for i in store.get_items(ids)] == [ids[0]]
        # stays forgotten: a replay of the same content is refused (as after the MCP tool's forget)
        assert not store.add_items([NewItem(project="demo", kind="manual", title="drop me", text="drop me")])[0].created
    assert json.loads(_run(capsys, "forget", str(ids[0]), "--json")[1]) == {"deleted": [ids[0]], "missing": []}


def test_settings_set_and_unset_write_settings_json_after_checking_the_value(capsys: pytest.CaptureFixture[str],
                                                                               isolated_home: Path) -> None:
    from memcairn.wire.config import load_settings

    assert _run(capsys, "settings", "set", "context_token_budget", "3000")[0] == 0
    assert _run(capsys, "settings", "set", "terminal_output", "yes")[0] == 0
    assert json.loads((isolated_home / "settings.json").read_text()) == {"context_token_budget": 3000,
                                                                         "terminal_output": True}
    assert load_settings().context_token_budget == 3000
    for args, message in ((["port", "0"], "between 1 and 65535"), (["context_token_budget", "lots"], "whole number"),
                          (["vector_backend", "chromadb"], "one of sqlite-vec"), (["colour", "1"], "unknown setting"),
                          (["context_token_budget", "0"], "must be 1 or more"),
                          (["context_token_budget", "-5"], "must be 1 or more, got -5"),
                          (["capture_backend", "openai"], "needs the API's address first: memcairn settings set "
                                                          "llm_base_url")):
        code, _, err = _run(capsys, "settings", "set", *args)
        assert code == 2 and message in err
    assert json.loads((isolated_home / "settings.json").read_text())["context_token_budget"] == 3000  # unchanged
    assert _run(capsys, "settings", "set", "llm_base_url", "http://127.0.0.1:11434/v1")[0] == 0
    assert _run(capsys, "settings", "set", "capture_backend", "openai")[0] == 0  # with its address, it is taken
    for name in ("capture_backend", "llm_base_url"):
        assert _run(capsys, "settings", "unset", name)[0] == 0
    code, out, _ = _run(capsys, "settings", "set", "token", "s3cret")
    assert code == 0 and "s3cret" not in out and (isolated_home / "settings.json").stat().st_mode & 0o077 == 0
    for name in ("context_token_budget", "terminal_output", "token"):
        assert _run(capsys, "settings", "unset", name)[0] == 0
    assert not (isolated_home / "settings.json").exists()
    assert load_settings().context_token_budget == 2000
    code, out, _ = _run(capsys, "settings")  # still lists
    assert code == 0 and "context_token_budget = 2000" in out


def test_import_transcripts_help_names_every_agent_it_reads(capsys: pytest.CaptureFixture[str]) -> None:
    code, shown, _ = _run(capsys, "import", "transcripts", "--help")
    assert code == 0 and "Claude Code" in shown and "Codex" in shown and "Gemini CLI" in shown


def test_the_demo_says_what_it_installs_before_the_long_pip_run() -> None:
    script = (Path(__file__).resolve().parent.parent / "scripts" / "demo").read_text()
    install = script.index("pip install")
    assert "echo \"demo: installing" in script[:install] and " -q " not in script[install - 40:install + 80]
