from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcairn.core.errors import ConfigError
from memcairn.wire.config import SETTINGS, Settings, load_settings


def test_defaults_live_under_memcairn_home(isolated_home: Path) -> None:
    cfg = load_settings()
    assert cfg.home == isolated_home
    assert cfg.db_path == isolated_home / "memcairn.db"
    assert cfg.logs_dir == isolated_home / "logs"


def test_every_setting_can_come_from_the_environment_and_beats_the_file(isolated_home: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(json.dumps({"port": 40001, "recency_window_days": 7}))
    monkeypatch.setenv("MEMCAIRN_PORT", "40002")
    cfg = load_settings()
    assert cfg.port == 40002 and cfg.recency_window_days == 7
    for setting in SETTINGS:
        assert hasattr(Settings, setting.name) or setting.name in Settings.__dataclass_fields__


def test_a_bad_setting_value_is_a_clear_error(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_PORT", "eighty")
    with pytest.raises(ConfigError, match="MEMCAIRN_PORT"):
        load_settings()


def test_an_unknown_key_in_the_settings_file_is_named(isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(json.dumps({"prot": 1}))
    with pytest.raises(ConfigError, match="prot"):
        load_settings()


def test_the_table_and_the_dataclass_agree() -> None:
    fields = Settings.__dataclass_fields__
    assert set(fields) - {"home"} == {s.name for s in SETTINGS}
    for setting in SETTINGS:
        assert fields[setting.name].default == setting.default, setting.name
        assert type(fields[setting.name].default) is type(setting.default)
        assert setting.help.strip()


def test_the_light_reader_gives_what_settings_hold(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.wire.settings_source import memcairn_home, read_values

    assert read_values() == load_settings().as_dict()  # defaults, no file
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(json.dumps({"port": 40001, "terminal_output": "yes",
                                                             "context_types": "bugfix"}))
    monkeypatch.setenv("MEMCAIRN_PORT", "40002")
    monkeypatch.setenv("MEMCAIRN_PROMPT_CONTEXT", "on")
    monkeypatch.setenv("MEMCAIRN_TOKEN", "")  # empty: not set
    values = read_values()
    assert values == load_settings().as_dict()
    assert values["home"] == str(isolated_home) == memcairn_home()
    assert (values["port"], values["terminal_output"], values["prompt_context"]) == (40002, True, True)
    assert values["context_types"] == "bugfix" and values["token"] == ""
    # an explicit home and environment, as load_settings takes them
    other = isolated_home.parent / "other"
    assert read_values(other, {})["port"] == 37877
    assert load_settings(other, {}).home == other
    assert read_values(None, {"MEMCAIRN_HOME": str(other) + "//", "MEMCAIRN_LOG_BACKUPS": "5"}) == {
        **load_settings(None, {"MEMCAIRN_HOME": str(other), "MEMCAIRN_LOG_BACKUPS": "5"}).as_dict()}


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "cannot read .*settings.json.*fix or delete the file"),
    ("[1, 2]", "settings.json must hold a JSON object of settings"),
    ('{"terminal_output": "maybe"}', "settings.json: terminal_output must be true or false, got 'maybe'"),
    ('{"log_backups": "few"}', "settings.json: log_backups must be a whole number, got 'few'"),
])
def test_settings_file_errors_name_the_file(isolated_home: Path, content: str, message: str) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(content)
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings()
    assert str(isolated_home / "settings.json") in str(raised.value)


@pytest.mark.parametrize(("content", "message"), [
    ('{"port": true}', "port must be a whole number, got True"),
    ('{"context_token_budget": 2.7}', "context_token_budget must be a whole number, got 2.7"),
    ('{"port": 0}', "port must be between 1 and 65535, got 0"),
    ('{"port": 70000}', "port must be between 1 and 65535, got 70000"),
    ('{"context_token_budget": -5}', "context_token_budget must be 1 or more, got -5"),
    ('{"llm_model": null}', "llm_model must be a string, got None"),
    ('{"vector_backend": false}', "vector_backend must be a string, got False"),
    ('{"token": ["a"]}', "token must be a string, got \\['a'\\]"),
    ('{"exclude_projects": ["a", 1]}', "exclude_projects must be a string or a list of strings"),
])
def test_a_value_of_the_wrong_type_or_range_in_the_file_is_an_error(isolated_home: Path, content: str,
                                                                     message: str) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_settings()


def test_comma_separated_settings_take_a_json_list_and_whole_floats_are_numbers(isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(json.dumps({
        "exclude_projects": ["secret-*", "scratch"], "skip_tools": ["Read"], "context_types": [],
        "context_token_budget": 3000.0, "token": 12345}))
    cfg = load_settings()
    assert (cfg.exclude_projects, cfg.skip_tools, cfg.context_types) == ("secret-*,scratch", "Read", "")
    assert cfg.context_token_budget == 3000 and cfg.token == "12345"


def test_a_bad_range_from_the_environment_names_the_variable(isolated_home: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_PORT", "0")
    with pytest.raises(ConfigError, match="MEMCAIRN_PORT: port must be between 1 and 65535"):
        load_settings()


def test_a_relative_memcairn_home_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hooks run in each project's directory: a relative home must not give every project its own store."""
    from memcairn.wire.settings_source import memcairn_home, read_values

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMCAIRN_HOME", "rel/home/")
    assert load_settings().home == tmp_path / "rel" / "home"
    assert read_values()["home"] == memcairn_home() == str(tmp_path / "rel" / "home")


def test_memcairn_settings_shows_each_value_and_where_it_came_from(isolated_home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`memcairn settings` lists every setting with its value and origin (the environment beats the file), and
    never prints a token."""
    from click.testing import CliRunner

    from memcairn.cli.app import cli

    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(json.dumps({"port": 40001, "log_backups": 1}))
    monkeypatch.setenv("MEMCAIRN_PORT", "40002")
    monkeypatch.setenv("MEMCAIRN_TOKEN", "s3cret-token")
    listed = CliRunner().invoke(cli, ["settings", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.output)}
    assert list(rows) == ["home", *(s.name for s in SETTINGS)]
    assert rows["home"]["value"] == str(isolated_home)
    assert (rows["port"]["value"], rows["port"]["from"]) == (40002, "MEMCAIRN_PORT")
    assert (rows["log_backups"]["value"], rows["log_backups"]["from"]) == (1, str(isolated_home / "settings.json"))
    assert (rows["host"]["from"], rows["host"]["variable"]) == ("default", "MEMCAIRN_HOST")
    text = CliRunner().invoke(cli, ["settings"])
    assert text.exit_code == 0 and "port = 40002  (from MEMCAIRN_PORT)" in text.output
    assert "s3cret" not in listed.output + text.output
    assert all(s.help.split()[0] in text.output for s in SETTINGS)
