from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcairn.config import SETTINGS, Settings, load_settings
from memcairn.errors import ConfigError


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
