"""`memcairn doctor` notices an agent whose registered hooks never fire (Codex runs no hook the person has not
trusted in /hooks, and says nothing): everything of its sessions would be lost without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcairn.cli.app import run
from memcairn.install import install
from memcairn.store import Store


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def _doctor(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, str]]:
    run(["doctor", "--json"])
    return {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}


def test_hooks_that_never_fired_are_named_with_what_to_do(home: Path, isolated_home: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    install("codex", "/usr/local/bin/memcairn")
    install("gemini", "/usr/local/bin/memcairn")
    checks = _doctor(capsys)
    assert checks["codex hooks"]["status"] == "warning" and "trust" in checks["codex hooks"]["detail"]
    assert str(home / ".codex" / "hooks.json") in checks["codex hooks"]["detail"]
    assert checks["gemini-cli hooks"]["status"] == "warning" and "claude-code hooks" not in checks
    with Store(isolated_home / "memcairn.db") as store:
        store.enqueue_ingest_event("s1", "codex", "session_init", {"event": "user_prompt", "prompt": "replayed"},
                                   source_key="import:line-1")  # an import's replay is no hook
        assert _doctor(capsys)["codex hooks"]["status"] == "warning"
        store.enqueue_ingest_event("s2", "codex", "session_init", {"event": "session_start"})
    checks = _doctor(capsys)
    assert checks["codex hooks"]["status"] == "ok" and checks["gemini-cli hooks"]["status"] == "warning"
