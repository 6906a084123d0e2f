"""``memcairn install|uninstall claude-code|codex|gemini`` against temporary home directories holding
realistic settings: the user's entries survive, a second install changes nothing, uninstall gives back the
original bytes, a dry run writes nothing, a malformed file stops everything; and the plugin folder
matches what the installer writes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import memcairn
from memcairn.cli.app import run
from memcairn.core.errors import ConfigError
from memcairn.install import install, memcairn_executable, tomlblock, uninstall
from memcairn.install.jsonedit import detect_style, parse_object
from memcairn.install.specs import (
    AGENTS,
    CLAUDE_CODE,
    CODEX,
    GEMINI,
    HOOK_CODE,
    MCP_CODE,
    hook_command,
    hook_interpreter,
    is_memcairn_command,
    setting_variables,
)

REPO = Path(__file__).resolve().parents[1]
EXE = "/opt/tools/bin/memcairn"

CLAUDE_SETTINGS = """{
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "model": "opus",
    "permissions": {
        "allow": [
            "Bash(npm run test:*)",
            "Read(~/.zshrc)"
        ],
        "deny": []
    },
    "hooks": {
        "SessionStart": [
            {
                "matcher": "startup",
                "hooks": [
                    {
                        "type": "command",
                        "command": "echo 'café ☕ ready'"
                    }
                ]
            }
        ],
        "PostToolUse": [
            {
                "matcher": "Edit|Write",
                "hooks": [
                    {
                        "type": "command",
                        "command": "npx prettier --write \\"$CLAUDE_FILE_PATHS\\"",
                        "timeout": 30
                    }
                ]
            }
        ],
        "Notification": [
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": "notify-send 'Claude Code' 'needs you'"
                    }
                ]
            }
        ]
    },
    "statusLine": {
        "type": "command",
        "command": "~/.claude/statusline.sh"
    },
    "enabledPlugins": {
        "formatter@acme-tools": true
    },
    "cleanupPeriodDays": 45
}
"""

CLAUDE_JSON = """{
  "numStartups": 184,
  "installMethod": "native",
  "autoUpdates": true,
  "theme": "dark",
  "tipsHistory": {
    "memory-command": 12,
    "theme-command": 3
  },
  "mcpServers": {
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/",
      "headers": {
        "Authorization": "Bearer ${GITHUB_TOKEN}"
      }
    },
    "sqlite": {
      "type": "stdio",
      "command": "uvx",
      "args": [
        "mcp-server-sqlite",
        "--db-path",
        "/home/u/data.db"
      ],
      "env": {}
    }
  },
  "projects": {
    "/home/u/repo": {
      "allowedTools": [],
      "mcpServers": {
        "local-only": {
          "command": "node",
          "args": [
            "server.js"
          ]
        }
      },
      "hasTrustDialogAccepted": true,
      "lastCost": 0.4172
    }
  },
  "userID": "3f2a9c"
}"""

CODEX_CONFIG = """# Codex configuration
model = "gpt-5-codex"
approval_policy = "on-request"  # ask before running commands

[features]
web_search = true

[mcp_servers.docs]
command = "npx"
args = ["-y", "@acme/docs-mcp"]
startup_timeout_sec = 20

[mcp_servers.docs.env]
DOCS_TOKEN = "abc"

# profiles below
[profiles.fast]
model = "gpt-5-mini"
"""

CODEX_HOOKS = """{
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "python3 ~/.codex/hooks/ding.py",
            "timeout": 5
          }
        ]
      }
    ]
  }
}
"""

GEMINI_SETTINGS = """{
  "general": {
    "preferredEditor": "vim",
    "vimMode": true
  },
  "ui": {
    "theme": "GitHub"
  },
  "mcpServers": {
    "playwright": {
      "command": "npx",
      "args": ["@playwright/mcp@latest"],
      "timeout": 30000
    }
  },
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "run_shell_command",
        "hooks": [
          {
            "name": "guard",
            "type": "command",
            "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/guard.sh",
            "timeout": 5000
          }
        ]
      }
    ],
    "SessionStart": [
      {
        "matcher": "startup",
        "hooks": [
          {
            "type": "command",
            "command": "echo hello"
          }
        ]
      }
    ]
  }
}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "userhome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def snapshot(*roots: Path) -> dict[str, bytes]:
    """Every file under ``roots`` (path -> bytes)."""
    out = {}
    for root in roots:
        if root.exists():
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    out[str(path)] = path.read_bytes()
    return out


def without_backups(files: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in files.items() if ".memcairn-bak-" not in k}


def our_handlers(doc: dict[str, Any]) -> dict[str, list[tuple[str | None, dict[str, Any]]]]:
    """event -> [(matcher, handler)] for every handler that runs ``... hook ...`` of memcairn."""
    found: dict[str, list[tuple[str | None, dict[str, Any]]]] = {}
    for event, groups in doc.get("hooks", {}).items():
        for group in groups:
            for handler in group["hooks"]:
                argv = shlex.split(handler["command"])
                if Path(argv[0]).name == "memcairn" and argv[1:2] == ["hook"]:
                    found.setdefault(event, []).append((group.get("matcher"), handler))
    return found


# -- claude code ------------------------------------------------------------------------------------
def test_claude_code_install_keeps_everything_and_uninstall_restores_the_exact_bytes(home: Path,
                                                                                    isolated_home: Path) -> None:
    settings = write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    claude_json = write(home / ".claude.json", CLAUDE_JSON)
    before = snapshot(home)

    report = install("claude-code", EXE)
    assert report.changed and [c.path for c in report.changes] == [settings, claude_json]
    doc = json.loads(settings.read_text())
    ours = our_handlers(doc)
    assert ours == {
        "SessionStart": [("startup|resume|clear|compact|fork",
                          {"type": "command", "command": f"{EXE} hook session-start", "timeout": 30})],
        "UserPromptSubmit": [(None, {"type": "command", "command": f"{EXE} hook user-prompt-submit", "timeout": 10})],
        "PostToolUse": [("*", {"type": "command", "command": f"{EXE} hook post-tool-use", "timeout": 10,
                               "async": True})],
        "PreToolUse": [("Read", {"type": "command", "command": f"{EXE} hook pre-tool-use", "timeout": 5})],
        "Stop": [(None, {"type": "command", "command": f"{EXE} hook stop", "timeout": 15})],
        "SessionEnd": [(None, {"type": "command", "command": f"{EXE} hook session-end", "timeout": 5})],
    }
    original = json.loads(CLAUDE_SETTINGS)
    assert list(doc) == list(original)  # key order kept, nothing added at the top
    for key in original:
        if key != "hooks":
            assert doc[key] == original[key]
    for event, groups in original["hooks"].items():
        assert doc["hooks"][event][: len(groups)] == groups  # the user's groups first, untouched
    assert settings.read_text() == json.dumps(doc, indent=4, ensure_ascii=False) + "\n"  # 4 spaces, UTF-8 kept
    assert "café ☕" in settings.read_text()

    cj = json.loads(claude_json.read_text())
    assert cj["mcpServers"]["memcairn"] == {"type": "stdio", "command": EXE, "args": ["mcp"]}
    assert list(cj["mcpServers"]) == ["github", "sqlite", "memcairn"]
    assert {k: v for k, v in cj.items() if k != "mcpServers"} == {
        k: v for k, v in json.loads(CLAUDE_JSON).items() if k != "mcpServers"}
    assert not claude_json.read_text().endswith("\n")  # the file had no final newline; it still has none

    backups = sorted(p for p in home.rglob("*.memcairn-bak-*"))
    assert len(backups) == 2
    assert {b.read_bytes() for b in backups} == {CLAUDE_SETTINGS.encode(), CLAUDE_JSON.encode()}

    installed = snapshot(home)
    again = install("claude-code", EXE)
    assert not again.changed and snapshot(home) == installed  # no write, no new backup

    removed = uninstall("claude-code")
    assert removed.changed
    assert without_backups(snapshot(home)) == before
    assert not (isolated_home / "install-state.json").exists()
    assert not uninstall("claude-code").changed


def test_claude_code_install_into_an_empty_home_creates_files_that_uninstall_removes(home: Path) -> None:
    install("claude-code", EXE)
    settings, claude_json = home / ".claude" / "settings.json", home / ".claude.json"
    assert set(json.loads(settings.read_text())) == {"hooks"}
    assert json.loads(claude_json.read_text()) == {"mcpServers": {"memcairn": {"type": "stdio", "command": EXE,
                                                                               "args": ["mcp"]}}}
    assert settings.read_text().startswith('{\n  "hooks"')  # a new file gets 2 spaces and a final newline
    uninstall("claude-code")
    assert not settings.exists() and not claude_json.exists()
    assert without_backups(snapshot(home)) == {}


def test_a_dry_run_prints_a_diff_and_writes_nothing(home: Path, isolated_home: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    write(home / ".claude.json", CLAUDE_JSON)
    before = snapshot(home, isolated_home)
    assert run(["install", "claude-code", "--dry-run", "--executable", EXE]) == 0
    out, err = capsys.readouterr()
    assert snapshot(home, isolated_home) == before
    assert f"--- {home}/.claude/settings.json" in out and f"+++ {home}/.claude.json" in out
    assert f'+                        "command": "{EXE} hook session-start",' in out
    assert "+    \"memcairn\": {\n" in out
    assert "nothing was written" in err

    install("claude-code", EXE)
    before = snapshot(home, isolated_home)
    assert run(["uninstall", "claude-code", "--dry-run"]) == 0
    out, _ = capsys.readouterr()
    assert snapshot(home, isolated_home) == before and f'-                        "command": "{EXE} hook stop",' in out


def test_malformed_json_stops_the_install_before_anything_is_written(home: Path, isolated_home: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    write(home / ".claude" / "settings.json", '{\n  "model": "opus",\n  "hooks": {\n}\n')  # unclosed
    write(home / ".claude.json", CLAUDE_JSON)  # valid, but must not be touched either
    before = snapshot(home, isolated_home)
    with pytest.raises(ConfigError, match=r"settings\.json is not valid JSON: .*line \d+.*nothing was changed"):
        install("claude-code", EXE)
    assert run(["install", "claude-code", "--executable", EXE]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {home}/.claude/settings.json is not valid JSON") and "Traceback" not in err
    assert snapshot(home, isolated_home) == before


@pytest.mark.parametrize(("text", "message"), [
    ('["not", "an", "object"]', "must hold a JSON object at the top, not list"),
    ('{"hooks": []}', "hooks must be a JSON object, not list"),
    ('{"hooks": {"Stop": {"hooks": []}}}', "hooks.Stop must be a JSON array, not dict"),
])
def test_settings_of_the_wrong_shape_are_refused_with_the_key_named(home: Path, text: str, message: str) -> None:
    write(home / ".claude" / "settings.json", text)
    before = snapshot(home)
    with pytest.raises(ConfigError, match=message):
        install("claude-code", EXE)
    assert snapshot(home) == before


def test_a_new_path_replaces_the_old_entries_in_place(home: Path) -> None:
    settings = write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    claude_json = write(home / ".claude.json", CLAUDE_JSON)
    install("claude-code", "/old/venv/bin/memcairn")
    doc = json.loads(settings.read_text())
    doc["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "echo later"}]})  # the user adds one
    settings.write_text(json.dumps(doc, indent=4, ensure_ascii=False) + "\n")

    install("claude-code", "/new space/bin/memcairn")
    doc = json.loads(settings.read_text())
    ours = our_handlers(doc)
    assert all(len(found) == 1 for found in ours.values()) and len(ours) == 6
    assert ours["Stop"][0][1]["command"] == "'/new space/bin/memcairn' hook stop"
    assert doc["hooks"]["Stop"][-1] == {"hooks": [{"type": "command", "command": "echo later"}]}  # still last
    assert json.loads(claude_json.read_text())["mcpServers"]["memcairn"]["command"] == "/new space/bin/memcairn"

    uninstall("claude-code")
    doc = json.loads(settings.read_text())
    assert our_handlers(doc) == {}
    original = json.loads(CLAUDE_SETTINGS)
    original["hooks"]["Stop"] = [{"hooks": [{"type": "command", "command": "echo later"}]}]
    assert doc == original  # the user's later edit stays; only our entries went
    assert claude_json.read_text() == CLAUDE_JSON


def test_entries_removed_by_hand_make_the_next_install_a_first_one_again(home: Path) -> None:
    settings = write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    install("claude-code", EXE)
    edited = CLAUDE_SETTINGS.replace('"model": "opus"', '"model": "sonnet"')
    settings.write_text(edited)  # the user rewrote the file without our hooks
    install("claude-code", EXE)
    assert our_handlers(json.loads(settings.read_text()))
    uninstall("claude-code")
    assert settings.read_text() == edited


def test_a_memcairn_server_registered_by_hand_comes_back_on_uninstall(home: Path) -> None:
    mine = CLAUDE_JSON.replace('"mcpServers": {\n', '"mcpServers": {\n    "memcairn": {\n      "command": '
                                                    '"memcairn",\n      "args": [\n        "mcp"\n      ]\n    },\n', 1)
    claude_json = write(home / ".claude.json", mine)
    install("claude-code", EXE)
    servers = json.loads(claude_json.read_text())["mcpServers"]
    assert list(servers)[0] == "memcairn" and servers["memcairn"]["command"] == EXE
    uninstall("claude-code")
    assert claude_json.read_text() == mine


def test_claude_config_dir_moves_both_files(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "work-claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    install("claude-code", EXE)
    assert our_handlers(json.loads((config / "settings.json").read_text()))
    assert "memcairn" in json.loads((config / ".claude.json").read_text())["mcpServers"]
    assert set(without_backups(snapshot(home))) == {str(home / ".memcairn" / "install-state.json")}


def test_a_symlinked_settings_file_is_written_through_its_link(home: Path, tmp_path: Path) -> None:
    real = write(tmp_path / "dotfiles" / "claude-settings.json", CLAUDE_SETTINGS)
    link = home / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    install("claude-code", EXE)
    assert link.is_symlink() and our_handlers(json.loads(real.read_text()))
    uninstall("claude-code")
    assert link.is_symlink() and real.read_text() == CLAUDE_SETTINGS
    assert not list((tmp_path / "dotfiles").glob("*.memcairn-bak-*"))  # backups stay beside the link


# -- codex ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config_text", [CODEX_CONFIG, CODEX_CONFIG.rstrip("\n"), ""])
def test_codex_install_adds_one_block_and_uninstall_restores_the_exact_bytes(home: Path, config_text: str,
                                                                             capsys: pytest.CaptureFixture[str]
                                                                             ) -> None:
    config = write(home / ".codex" / "config.toml", config_text)
    hooks = write(home / ".codex" / "hooks.json", CODEX_HOOKS)
    before = snapshot(home)

    assert run(["install", "codex", "--executable", EXE]) == 0
    out = capsys.readouterr().out
    assert "trust" in out and "/hooks" in out
    text = config.read_text()
    block = text[text.index(tomlblock.BEGIN):text.index(tomlblock.END) + len(tomlblock.END) + 1]
    if "[" in config_text:  # before the first table, followed by a blank line; the user's bytes around it
        assert text.replace(block + "\n", "") == config_text
    else:
        assert text.startswith(config_text)
    parsed = tomllib.loads(text)
    assert parsed["mcp_servers"]["memcairn"] == {"command": EXE, "args": ["mcp", "--platform", "codex"],
                                                 "env_vars": setting_variables(), "required": True,
                                                 "startup_timeout_sec": tomlblock.STARTUP_TIMEOUT_SEC}
    assert {k: v for k, v in parsed.items() if k != "mcp_servers"} == {
        k: v for k, v in tomllib.loads(config_text).items() if k != "mcp_servers"}
    if config_text:
        assert parsed["mcp_servers"]["docs"]["env"] == {"DOCS_TOKEN": "abc"}

    doc = json.loads(hooks.read_text())
    ours = our_handlers(doc)
    assert set(ours) == {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"}  # Codex has no SessionEnd
    for found in ours.values():
        (_, handler), = found
        assert handler["command"].endswith("--platform codex") and "async" not in handler
    assert ours["SessionStart"][0][0] == "startup|resume|clear|compact" and ours["PostToolUse"][0][0] is None
    assert doc["hooks"]["Stop"][0] == json.loads(CODEX_HOOKS)["hooks"]["Stop"][0]

    installed = snapshot(home)
    assert not install("codex", EXE).changed and snapshot(home) == installed
    uninstall("codex")
    assert without_backups(snapshot(home)) == before


def test_codex_home_is_honoured_and_new_files_are_removed_again(home: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    codex_home = tmp_path / "codex-home"
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    install("codex", EXE)
    assert tomllib.loads((codex_home / "config.toml").read_text())["mcp_servers"]["memcairn"]["command"] == EXE
    assert our_handlers(json.loads((codex_home / "hooks.json").read_text()))
    uninstall("codex")
    assert without_backups(snapshot(codex_home)) == {} and without_backups(snapshot(home)) == {}


def test_codex_refuses_a_server_table_of_the_same_name_and_invalid_toml(home: Path) -> None:
    config = write(home / ".codex" / "config.toml", CODEX_CONFIG + '\n[mcp_servers.memcairn]\ncommand = "mine"\n')
    before = snapshot(home)
    with pytest.raises(ConfigError, match=r"already defines \[mcp_servers.memcairn\]"):
        install("codex", EXE)
    assert snapshot(home) == before
    config.write_text('model = "unterminated\n')
    before = snapshot(home)
    with pytest.raises(ConfigError, match="is not valid TOML"):
        install("codex", EXE)
    assert snapshot(home) == before


def test_codex_uninstall_keeps_what_the_user_appended_after_our_block(home: Path) -> None:
    config = write(home / ".codex" / "config.toml", CODEX_CONFIG)
    install("codex", EXE)
    config.write_text(config.read_text() + '\n[mcp_servers.later]\ncommand = "later"\n')
    uninstall("codex")
    assert config.read_text() == CODEX_CONFIG + '\n[mcp_servers.later]\ncommand = "later"\n'


# -- gemini -----------------------------------------------------------------------------------------
def test_gemini_install_and_uninstall(home: Path) -> None:
    settings = write(home / ".gemini" / "settings.json", GEMINI_SETTINGS)
    before = snapshot(home)
    install("gemini", EXE)
    doc = json.loads(settings.read_text())
    assert doc["mcpServers"] == {**json.loads(GEMINI_SETTINGS)["mcpServers"],
                                 "memcairn": {"command": EXE, "args": ["mcp"]}}
    ours = our_handlers(doc)
    verbs = {event: shlex.split(found[0][1]["command"])[2] for event, found in ours.items()}
    assert verbs == {"SessionStart": "session-start", "BeforeAgent": "user-prompt-submit",
                     "AfterTool": "post-tool-use", "AfterAgent": "stop", "SessionEnd": "session-end"}
    for found in ours.values():
        (matcher, handler), = found
        assert matcher is None and handler["command"].endswith("--platform gemini-cli")
        assert handler["timeout"] >= 1000  # milliseconds
    assert doc["hooks"]["BeforeTool"] == json.loads(GEMINI_SETTINGS)["hooks"]["BeforeTool"]
    assert doc["general"] == {"preferredEditor": "vim", "vimMode": True}
    assert not install("gemini", EXE).changed
    uninstall("gemini")
    assert without_backups(snapshot(home)) == before


GEMINI_WITH_COMMENTS = """{
  // my theme
  "ui": {"theme": "GitHub"}, // the light one
  /* servers of my own */
  "mcpServers": {
    "other": {"command": "other-server"}, // keep me
  },
  "general": {"vimMode": true} // last
}
"""


def test_gemini_settings_with_comments_keep_them_through_install_and_uninstall(home: Path) -> None:
    path = home / ".gemini" / "settings.json"
    write(path, GEMINI_WITH_COMMENTS)
    before = snapshot(home)
    install("gemini", EXE)
    text = path.read_text()
    for comment in ("// my theme", "// the light one", "/* servers of my own */", "// keep me", "// last"):
        assert text.count(comment) == 1, comment
    doc = parse_object(text, str(path))
    assert doc["mcpServers"]["other"] == {"command": "other-server"} and "memcairn" in doc["mcpServers"]
    assert doc["ui"] == {"theme": "GitHub"} and doc["general"] == {"vimMode": True} and doc["hooks"]
    assert not install("gemini", EXE).changed
    uninstall("gemini")
    assert without_backups(snapshot(home)) == before


def test_comments_stay_when_the_file_changed_between_install_and_uninstall(home: Path) -> None:
    path = home / ".gemini" / "settings.json"
    write(path, GEMINI_WITH_COMMENTS)
    install("gemini", EXE)
    path.write_text(path.read_text().replace('"vimMode": true', '"vimMode": false'))
    uninstall("gemini")
    text = path.read_text()
    assert parse_object(text, str(path)) == {"ui": {"theme": "GitHub"}, "mcpServers": {"other": {
        "command": "other-server"}}, "general": {"vimMode": False}}
    for comment in ("// my theme", "// the light one", "/* servers of my own */", "// keep me", "// last"):
        assert text.count(comment) == 1, comment


def test_settings_that_are_not_json_are_refused_with_the_entries_to_add_by_hand(home: Path) -> None:
    write(home / ".gemini" / "settings.json", '{\n  "ui": {"theme": "GitHub"\n}\n')
    before = snapshot(home)
    with pytest.raises(ConfigError, match="not valid JSON") as caught:
        install("gemini", EXE)
    entries = json.loads(str(caught.value).split("to add by hand:\n", 1)[1])
    assert "memcairn" in entries["mcpServers"] and set(entries["hooks"]) >= {"SessionStart", "AfterTool"}
    assert snapshot(home) == before


# -- details ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "indent"), [
    ('{\n  "a": 1\n}\n', 2), ('{\n    "a": [\n        1\n    ]\n}', 4), ('{\n\t"a": 1\n}\n', "\t"),
    ('{"a": 1, "b": [1, 2]}', None),
])
def test_the_style_of_a_file_is_detected_and_reproduced(text: str, indent: int | str | None) -> None:
    style = detect_style(text)
    assert style.indent == indent and style.dump(json.loads(text)) == text


def test_unknown_agents_are_refused(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["install", "cursor"]) == 2
    assert "claude-code" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown agent"):
        install("cursor", EXE)


def test_the_default_executable_is_an_absolute_memcairn_command() -> None:
    exe = memcairn_executable()
    assert os.path.isabs(exe) and Path(exe).name == "memcairn" and os.access(exe, os.X_OK)


def test_the_cli_installs_with_the_running_memcairn(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["install", "gemini"]) == 0
    out = capsys.readouterr().out
    exe = memcairn_executable()
    python = hook_interpreter(exe)  # this checkout's console script: its Python runs the hooks by itself
    shown = f"{python} -I -c '{HOOK_CODE}' '<event>' --platform gemini-cli"
    assert python is not None and f"created {home}/.gemini/settings.json" in out and shown in out
    assert run(["install", "gemini"]) == 0 and "nothing to install" in capsys.readouterr().out
    assert run(["uninstall", "gemini"]) == 0 and f"removed {home}/.gemini/settings.json" in capsys.readouterr().out


@pytest.mark.parametrize("spelling", ["gemini-cli", "Gemini", "geminicli"])
def test_install_takes_the_platform_s_own_spellings_of_an_agent(home: Path, spelling: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--platform`` and the hooks say gemini-cli: install and uninstall take that name too."""
    assert run(["install", spelling]) == 0 and f"created {home}/.gemini/settings.json" in capsys.readouterr().out
    assert run(["uninstall", spelling]) == 0 and not (home / ".gemini" / "settings.json").exists()
    assert run(["install", "gemini-pro"]) == 2


# -- the plugin folder ------------------------------------------------------------------------------
def test_the_plugin_folder_matches_what_the_installer_writes(home: Path) -> None:
    plugin = REPO / "plugin"
    manifest = json.loads((plugin / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "memcairn" and manifest["version"] == memcairn.__version__
    assert manifest["description"] and manifest["license"] == "MIT"

    marketplace = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    assert marketplace["name"] and marketplace["owner"]["name"]
    (entry,) = marketplace["plugins"]
    assert entry["name"] == "memcairn" and (REPO / entry["source"] / ".claude-plugin" / "plugin.json").is_file()
    assert (REPO / entry["source"]).resolve() == plugin and entry.get("version", manifest["version"]) == manifest[
        "version"]

    assert json.loads((plugin / ".mcp.json").read_text()) == {"mcpServers": {"memcairn": {"command": "memcairn",
                                                                                          "args": ["mcp"]}}}
    hooks_file = json.loads((plugin / "hooks" / "hooks.json").read_text())
    assert set(hooks_file) == {"description", "hooks"} and "PATH" in hooks_file["description"]

    install("claude-code", EXE)
    installed = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]

    def bare(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**g, "hooks": [{**h, "command": h["command"].replace(EXE, "memcairn", 1)} for h in g["hooks"]]}
                for g in groups]

    assert {event: bare(groups) for event, groups in installed.items()} == hooks_file["hooks"]
    assert list(hooks_file["hooks"]) == [h.event for h in CLAUDE_CODE.hooks]


def test_every_agent_spec_names_known_hook_verbs() -> None:
    verbs = {"session-start", "user-prompt-submit", "post-tool-use", "pre-tool-use", "stop", "session-end"}
    for agent in AGENTS.values():
        assert {h.verb for h in agent.hooks} <= verbs
        assert len({h.event for h in agent.hooks}) == len(agent.hooks)
    assert hook_command("/a b/memcairn", CODEX, "stop") == "'/a b/memcairn' hook stop --platform codex"
    assert hook_command(EXE, GEMINI, "stop").endswith("--platform gemini-cli")
    assert hook_command(EXE, CLAUDE_CODE, "stop") == f"{EXE} hook stop"


# -- the short hook command -------------------------------------------------------------------------
def test_the_running_memcairn_installs_hooks_that_skip_the_console_script(home: Path, tmp_path: Path) -> None:
    exe = memcairn_executable()
    python = hook_interpreter(exe)
    assert python == Path(exe).read_text().split("\n", 1)[0][2:].strip()  # the script's own Python
    install("claude-code", exe)
    doc = json.loads((home / ".claude" / "settings.json").read_text())
    commands = {event: group["hooks"][0]["command"] for event, groups in doc["hooks"].items() for group in groups}
    assert commands["Stop"] == f"{shlex.quote(python)} -I -c '{HOOK_CODE}' stop"
    assert all(is_memcairn_command(c) for c in commands.values()) and len(commands) == len(CLAUDE_CODE.hooks)
    # what that command loads: the hook's modules, and none of re/json/socket/enum (site included, as installed)
    argv = shlex.split(commands["Stop"])
    payload = json.dumps({"session_id": "s", "cwd": str(tmp_path), "hook_event_name": "Stop"}).encode()
    env = {**os.environ, "MEMCAIRN_HOME": str(tmp_path / "mh"), "MEMCAIRN_PORT": "9", "MEMCAIRN_WORKER_AUTOSTART": "0"}
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], input=payload, capture_output=True, env=env,
                          timeout=30)
    assert done.returncode == 0 and json.loads(done.stdout) == {}, done.stderr
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.decode().splitlines() if "|" in line}
    assert "memcairn.hooks.events" in loaded and "memcairn.cli.entry" not in loaded
    # nothing listens on port 9: the event goes to the spool, cleaned of secrets first (capture.privacy: re, enum)
    assert "memcairn.wire.privacy.scrubbing" in loaded
    assert sorted(loaded & {"json", "socket", "selectors", "signal", "click"}) == []
    # the MCP server the same way; it answers initialize, having loaded neither re nor click
    server = json.loads((home / ".claude.json").read_text())["mcpServers"]["memcairn"]
    assert server == {"type": "stdio", "command": python, "args": ["-I", "-c", MCP_CODE]}
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    done = subprocess.run([python, "-X", "importtime", *server["args"]], input=json.dumps(hello).encode() + b"\n",
                          capture_output=True, env=env, timeout=30)
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "memcairn", done.stderr
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.decode().splitlines() if "|" in line}
    assert "memcairn.mcp.server" in loaded and sorted(loaded & {"re", "json", "logging", "click"}) == []
    # the earlier form (`<memcairn> hook <verb>`) is memcairn's too: a second install replaces it, adds nothing
    old = (home / ".claude" / "settings.json").read_text().replace(commands["Stop"], f"{exe} hook stop")
    (home / ".claude" / "settings.json").write_text(old)
    install("claude-code", exe)
    again = json.loads((home / ".claude" / "settings.json").read_text())
    assert again == doc
    uninstall("claude-code")  # made by the install: removed whole
    assert not (home / ".claude" / "settings.json").exists()


def test_a_python_that_cannot_run_the_hooks_by_itself_keeps_the_script(home: Path, tmp_path: Path) -> None:
    # the same console script text under a Python without memcairn (the interpreter behind this virtual
    # environment, which -I keeps from its site-packages), and a launcher of another kind
    bare_python = os.path.realpath(sys.executable)
    script = Path(memcairn_executable()).read_text().split("\n", 1)[1]
    foreign = write(tmp_path / "a" / "memcairn", f"#!{bare_python}\n{script}")
    shell = write(tmp_path / "b" / "memcairn", "#!/bin/sh\nexec python3 -m memcairn \"$@\"\n")
    for exe in (foreign, shell):
        exe.chmod(0o755)
        assert hook_interpreter(str(exe)) is None
        assert hook_command(str(exe), CLAUDE_CODE, "stop", hook_interpreter(str(exe))) == f"{exe} hook stop"
    assert not is_memcairn_command(f"{bare_python} -I -c 'print(1)' stop")


# -- a demanding user's setups ----------------------------------------------------------------------
def test_an_executable_not_named_memcairn_is_refused(home: Path, tmp_path: Path) -> None:
    # its hooks would not be recognised as ours: every install would add them again, uninstall would leave them
    before = snapshot(home)
    with pytest.raises(ConfigError, match="must be named memcairn"):
        install("codex", "/opt/tools/bin/mc")
    assert snapshot(home) == before


def test_the_cli_resolves_a_bare_or_home_relative_executable(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bin_dir = home / "bin"
    exe = write(bin_dir / "memcairn", "#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    for given in ("memcairn", "~/bin/memcairn"):
        assert run(["install", "gemini", "--executable", given]) == 0
        doc = json.loads((home / ".gemini" / "settings.json").read_text())
        assert doc["mcpServers"]["memcairn"]["command"] == str(exe)  # not <cwd>/memcairn nor <cwd>/~/bin/...
        assert our_handlers(doc)["AfterAgent"][0][1]["command"].startswith(f"{exe} hook stop")
    capsys.readouterr()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert run(["install", "gemini", "--executable", "memcairn"]) == 2
    assert "not on PATH" in capsys.readouterr().err
    assert run(["install", "gemini", "--executable", str(tmp_path / "missing" / "memcairn"), "--dry-run"]) == 0
    assert "warning:" in capsys.readouterr().err


def test_install_says_a_home_set_for_the_command_alone_does_not_reach_the_hooks(
        home: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["install", "gemini"]) == 0  # isolated_home sets MEMCAIRN_HOME
    err = capsys.readouterr().err
    assert "MEMCAIRN_HOME is set here" in err and "MEMCAIRN_PORT" not in err


def test_a_read_only_file_is_refused_before_anything_is_written(home: Path, isolated_home: Path,
                                                                tmp_path: Path) -> None:
    settings = write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    settings.chmod(0o600)
    claude_json = write(home / ".claude.json", CLAUDE_JSON)
    claude_json.chmod(0o444)
    before = snapshot(home, isolated_home)
    with pytest.raises(ConfigError, match=r"\.claude\.json is read-only.*nothing was changed"):
        install("claude-code", EXE)
    assert snapshot(home, isolated_home) == before  # settings.json was not written either
    assert claude_json.stat().st_mode & 0o777 == 0o444

    real = write(tmp_path / "store" / "settings.json", GEMINI_SETTINGS)  # e.g. a link into a read-only store
    real.chmod(0o444)
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").symlink_to(real)
    with pytest.raises(ConfigError, match=rf"-> {real}\) is read-only"):
        install("gemini", EXE)
    assert real.read_text() == GEMINI_SETTINGS

    claude_json.chmod(0o644)
    install("claude-code", EXE)
    assert settings.stat().st_mode & 0o777 == 0o600  # a private file stays private


def test_an_unwritable_record_folder_is_refused_before_the_agent_s_files_change(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its install record, uninstall could not give the original bytes back: the folder of the record
    is checked with the agent's files, before any of them is written (root ignores modes, so os.access is
    what the test takes away)."""
    from memcairn.install import files

    write(home / ".gemini" / "settings.json", GEMINI_SETTINGS)
    records = home / ".memcairn"
    records.mkdir()
    before = snapshot(home)
    real_access = os.access
    monkeypatch.setattr(files.os, "access", lambda path, mode: Path(path) != records and real_access(path, mode))
    with pytest.raises(ConfigError, match=rf"cannot write in {records}"):
        install("gemini", EXE)
    assert snapshot(home) == before


def test_a_failed_write_is_one_clear_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.install import core

    write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    write(home / ".claude.json", CLAUDE_JSON)
    real_write = core.write_text

    def failing(path: Path, text: str) -> None:
        if path.name == ".claude.json":
            raise OSError(28, "No space left on device", str(path))
        real_write(path, text)

    monkeypatch.setattr(core, "write_text", failing)
    with pytest.raises(ConfigError, match=r"cannot write .*\.claude\.json: No space left on device "
                                          r"\(already changed: .*settings\.json\)"):
        install("claude-code", EXE)
    monkeypatch.setattr(core, "write_text", real_write)
    install("claude-code", EXE)  # the retry completes what was left
    uninstall("claude-code")
    assert (home / ".claude" / "settings.json").read_text() == CLAUDE_SETTINGS
    assert (home / ".claude.json").read_text() == CLAUDE_JSON


def test_windows_line_endings_are_kept(home: Path) -> None:
    crlf = GEMINI_SETTINGS.replace("\n", "\r\n")
    settings = write(home / ".gemini" / "settings.json", crlf)
    install("gemini", EXE)
    text = settings.read_bytes().decode()
    assert text.count("\r\n") == text.count("\n") and our_handlers(json.loads(text))
    assert detect_style('{"a": 1}\r\n').dump({"a": 1}) == '{"a": 1}\r\n'
    uninstall("gemini")
    assert settings.read_bytes() == crlf.encode()


def test_a_lone_surrogate_escape_in_claude_json_is_kept_escaped(home: Path, isolated_home: Path) -> None:
    # Claude Code keeps prompt history in ~/.claude.json; JSON.stringify writes a string cut inside an emoji
    # as a "\\ud83d" escape, which Python reads as a lone surrogate that UTF-8 cannot encode
    text = CLAUDE_JSON.replace('"numStartups"', '"lastPrompt": "cut \\ud83d here \u00e9",\n  "numStartups"', 1)
    assert '"cut \\ud83d here \u00e9"' in text
    claude_json = write(home / ".claude.json", text)
    install("claude-code", EXE)
    installed = claude_json.read_text(encoding="utf-8")
    assert '"cut \\ud83d here \u00e9"' in installed and json.loads(installed)["mcpServers"]["memcairn"]
    uninstall("claude-code")
    assert claude_json.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("platform", ["claude-code", "gemini"])
def test_keys_the_user_added_to_our_server_survive_a_reinstall(home: Path, platform: str) -> None:
    path = home / (".claude.json" if platform == "claude-code" else ".gemini/settings.json")
    install(platform, "/old/venv/bin/memcairn")
    doc = json.loads(path.read_text())
    doc["mcpServers"]["memcairn"]["env"] = {"MEMCAIRN_HOME": "/data/memcairn"}
    doc["mcpServers"]["memcairn"]["timeout"] = 60000
    path.write_text(json.dumps(doc, indent=2) + "\n")

    install(platform, EXE)  # memcairn moved to another environment
    entry = json.loads(path.read_text())["mcpServers"]["memcairn"]
    assert entry["command"] == EXE and entry["args"] == ["mcp"]
    assert entry["env"] == {"MEMCAIRN_HOME": "/data/memcairn"} and entry["timeout"] == 60000
    assert not install(platform, EXE).changed
    uninstall(platform)
    assert "memcairn" not in json.loads(path.read_text()).get("mcpServers", {}) if path.exists() else True


def test_a_codex_config_with_windows_line_endings_stays_crlf_and_uninstalls(home: Path) -> None:
    crlf = CODEX_CONFIG.replace("\n", "\r\n")
    config = write(home / ".codex" / "config.toml", crlf)
    install("codex", EXE)
    text = config.read_bytes().decode()
    assert text.count("\r\n") == text.count("\n")  # no bare LF lines mixed into the user's CRLF file
    assert not install("codex", EXE).changed
    uninstall("codex")
    assert config.read_bytes() == crlf.encode()

    # a file made CRLF after the install (a Windows editor, git's autocrlf) still has a block we recognise
    config.write_bytes(CODEX_CONFIG.encode())
    install("codex", EXE)
    config.write_bytes(config.read_bytes().replace(b"\n", b"\r\n"))
    assert not install("codex", EXE).changed
    uninstall("codex")
    assert config.read_bytes() == crlf.encode()


def test_lines_the_user_added_inside_the_codex_block_survive_a_reinstall(home: Path) -> None:
    config = write(home / ".codex" / "config.toml", CODEX_CONFIG)
    install("codex", "/old/venv/bin/memcairn")
    added = 'mcp_servers.memcairn.tool_timeout_sec = 90\nmcp_servers.memcairn.env.MEMCAIRN_HOME = "/data/memcairn"\n'
    text = config.read_text().replace("mcp_servers.memcairn.required = true\n",
                                      "mcp_servers.memcairn.required = true\n" + added)
    config.write_text(text)

    install("codex", EXE)
    server = tomllib.loads(config.read_text())["mcp_servers"]["memcairn"]
    assert server["command"] == EXE and server["tool_timeout_sec"] == 90
    assert server["env"] == {"MEMCAIRN_HOME": "/data/memcairn"}
    assert not install("codex", EXE).changed
    uninstall("codex")
    assert config.read_text() == CODEX_CONFIG


def test_a_block_of_an_earlier_release_becomes_the_new_one_keeping_the_user_s_lines(home: Path,
                                                                                    isolated_home: Path) -> None:
    """Earlier releases appended an ``[mcp_servers.memcairn]`` table; a reinstall moves it before the first table."""
    old_block = (f"{tomlblock.BEGIN}\n[mcp_servers.memcairn]\ncommand = \"/old/memcairn\"\n"
                 'args = ["mcp", "--platform", "codex"]\nstartup_timeout_sec = 30\n\n[mcp_servers.memcairn.env]\n'
                 f'MEMCAIRN_HOME = "/data/memcairn"\n{tomlblock.END}\n')
    config = write(home / ".codex" / "config.toml", CODEX_CONFIG + "\n" + old_block)
    install("codex", EXE)
    text = config.read_text()
    server = tomllib.loads(text)["mcp_servers"]["memcairn"]
    assert server["command"] == EXE and server["env"] == {"MEMCAIRN_HOME": "/data/memcairn"}
    assert "[mcp_servers.memcairn]" not in text and text.rstrip().endswith('model = "gpt-5-mini"')
    uninstall("codex")
    assert config.read_text() == CODEX_CONFIG


@pytest.mark.parametrize(("text", "expected"), [
    ("{}\n", '{\n  "a": [\n    1\n  ]\n}\n'),  # a settings file holding only {} gets the new-file layout
    ('{"a": 1}', '{"a": [1], "b": 2}'),  # one key, no comma to copy: the key's spacing decides
    ('{"a":1}', '{"a":[1],"b":2}'),
])
def test_the_style_of_a_file_with_little_to_go_on(text: str, expected: str) -> None:
    assert detect_style(text).dump(json.loads(expected)) == expected


# -- what a newcomer met: leftovers, reformatting, the real clients' settings -----------------------------
def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and every folder (None) under ``root``."""
    return {str(p): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_uninstall_leaves_nothing_that_was_not_there(home: Path, isolated_home: Path) -> None:
    write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    before = tree(home)
    for agent in ("claude-code", "codex", "gemini"):
        install(agent, EXE)
        install(agent, "/other/bin/memcairn")  # a second install, with its own backups
    assert (home / ".codex").is_dir() and (home / ".gemini").is_dir() and (home / ".memcairn").is_dir()
    for agent in ("claude-code", "codex", "gemini"):
        uninstall(agent)
    assert tree(home) == before  # no backups, no .codex/, .gemini/ or .memcairn/ folder (made for the record)
    assert not isolated_home.exists()


def test_uninstall_removes_the_backups_when_the_file_changed_since_and_names_them(home: Path) -> None:
    """An agent that rewrites its file (Claude Code always rewrites .claude.json) or a person's edit since: the
    uninstall cannot give back the original bytes, removes memcairn's entries alone, and removes every backup
    memcairn made of the file, naming each."""
    settings = write(home / ".claude" / "settings.json", CLAUDE_SETTINGS)
    for executable in (EXE, "/other/bin/memcairn"):
        install("claude-code", executable)
        settings.write_text(settings.read_text().replace('"model": "opus"', '"model": "sonnet"'))
    made = sorted(home.rglob("*.memcairn-bak-*"))
    assert len(made) >= 3
    report = uninstall("claude-code")
    assert json.loads(settings.read_text())["model"] == "sonnet" and not our_handlers(json.loads(settings.read_text()))
    assert not list(home.rglob("*.memcairn-bak-*"))
    assert sorted(report.removed_backups) == made


def test_uninstall_from_a_shell_with_another_memcairn_home_leaves_nothing(
        home: Path, isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = tree(home)
    install("claude-code", EXE)
    (home / ".claude.json").write_text((home / ".claude.json").read_text() + " ")  # the agent rewrote it
    install("claude-code", "/other/bin/memcairn")
    monkeypatch.setenv("MEMCAIRN_HOME", str(tmp_path / "another-home"))
    assert run(["uninstall", "claude-code"]) == 0
    assert tree(home) == before  # the files the install created, its backups and its record: all gone
    assert not (tmp_path / "another-home").exists()


COMPACT = """{
  "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
  "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},
  "hooks": {
    "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]
  },
  "cleanupPeriodDays": 45
}
"""


def test_install_changes_only_what_memcairn_owns_in_a_json_file(home: Path) -> None:
    settings = write(home / ".claude" / "settings.json", COMPACT)
    install("claude-code", EXE)
    text = settings.read_text()
    for line in ('  "permissions": {"allow": ["Bash(ls:*)"], "deny": []},',
                 '  "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},',
                 '    "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}, {"hooks": [{"type": ',
                 '  "cleanupPeriodDays": 45\n}\n'):
        assert line in text
    assert json.loads(text)["hooks"]["Stop"][0] == {"hooks": [{"type": "command", "command": "say done"}]}
    # the person edits the file meanwhile: uninstall still keeps their layout
    settings.write_text(text.replace('"deny": []', '"deny": ["Bash(rm:*)"]'))
    uninstall("claude-code")
    assert settings.read_text() == COMPACT.replace('"deny": []', '"deny": ["Bash(rm:*)"]')


def test_codex_gets_memcairn_s_variables_and_waits_for_the_server(home: Path) -> None:
    config = write(home / ".codex" / "config.toml", CODEX_CONFIG)
    install("codex", EXE)
    server = tomllib.loads(config.read_text())["mcp_servers"]["memcairn"]
    assert {"MEMCAIRN_HOME", "MEMCAIRN_PORT", "MEMCAIRN_HOST", "MEMCAIRN_TOKEN"} <= set(server["env_vars"])
    assert server["required"] is True and server["startup_timeout_sec"] >= 10


def test_codex_hook_trust_written_inside_memcairn_s_block_survives_uninstall(home: Path) -> None:
    """Codex writes ``[hooks.state...]`` tables at the end of what it sees as the last table; uninstall takes only
    memcairn's lines."""
    config = write(home / ".codex" / "config.toml", "")
    install("codex", EXE)
    trust = '[hooks.state."/u/.codex/hooks.json:session_start:0:0"]\ntrusted_hash = "sha256:abc"\n'
    config.write_text(config.read_text().replace(tomlblock.END, trust + tomlblock.END))
    uninstall("codex")
    assert config.read_text() == trust


def test_a_key_appended_after_the_install_does_not_land_in_memcairn_s_server(home: Path) -> None:
    for start in ("", 'model = "m"\n', CODEX_CONFIG):
        config = write(home / ".codex" / "config.toml", start)
        install("codex", EXE)
        config.write_text(config.read_text() + 'model_reasoning_effort = "low"\n')
        parsed = tomllib.loads(config.read_text())
        assert "model_reasoning_effort" not in parsed["mcp_servers"]["memcairn"]
        uninstall("codex")
        assert config.read_text() == start + 'model_reasoning_effort = "low"\n'
        config.unlink()


def test_the_codex_summary_prints_the_server_command_it_wrote(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["install", "codex", "--executable", EXE]) == 0
    out = capsys.readouterr().out
    assert f"MCP server memcairn: {EXE} mcp --platform codex\n" in out
    assert "/hooks" in out and "codex exec" in out


def test_gemini_in_ci_is_told_to_pass_memcairn_s_variables(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    mine = json.loads(GEMINI_SETTINGS)
    mine["security"] = {"environmentVariableRedaction": {"allowed": ["MY_VAR", "MEMCAIRN_PORT"]}}
    settings = write(home / ".gemini" / "settings.json", json.dumps(mine, indent=2) + "\n")
    monkeypatch.setenv("MEMCAIRN_TOKEN", "s3cret")
    assert run(["install", "gemini", "--executable", EXE]) == 0
    assert "memcairn settings set token" in capsys.readouterr().out
    allowed = json.loads(settings.read_text())["security"]["environmentVariableRedaction"]["allowed"]
    assert allowed[:2] == ["MY_VAR", "MEMCAIRN_PORT"] and set(setting_variables()) <= set(allowed)
    uninstall("gemini")
    assert json.loads(settings.read_text()) == mine  # MEMCAIRN_PORT was the person's: it stays
    fresh = write(home / ".gemini" / "settings.json", GEMINI_SETTINGS)
    install("gemini", EXE)
    uninstall("gemini")
    assert fresh.read_text() == GEMINI_SETTINGS


# -- --compress ----------------------------------------------------------------------------------------------
def test_install_with_compress_turns_the_claude_cli_backend_on_and_shows_the_caps(
        home: Path, isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.wire.config import load_settings

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # no claude on PATH: said, and the install still works
    write(isolated_home / "settings.json", '{"context_token_budget": 3000}')
    assert run(["install", "claude-code", "--compress", "claude-cli", "--dry-run"]) == 0
    assert json.loads((isolated_home / "settings.json").read_text()) == {"context_token_budget": 3000}
    capsys.readouterr()
    assert run(["install", "claude-code", "--compress", "claude-cli"]) == 0
    captured = capsys.readouterr()
    settings = json.loads((isolated_home / "settings.json").read_text())
    assert settings == {"context_token_budget": 3000, "capture_backend": "claude-cli"}
    assert (isolated_home / "settings.json").stat().st_mode & 0o777 == 0o600  # it may hold the token
    assert load_settings().capture_backend == "claude-cli"
    assert "the claude-cli backend (haiku) writes the memories" in captured.out
    assert "200,000 tokens a session (llm_session_token_cap), 2,000,000 tokens a day" in captured.out
    assert "claude is not on PATH" in captured.err
    assert (home / ".claude" / "settings.json").exists()  # the hooks are installed as without the option
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\n")
    claude.chmod(0o755)
    assert run(["install", "claude-code", "--compress", "claude-cli"]) == 0
    assert "not on PATH" not in capsys.readouterr().err
    assert run(["install", "claude-code", "--compress", "offline"]) == 0
    assert "offline extractor writes the memories" in capsys.readouterr().out
    assert load_settings().capture_backend == "offline"
    assert run(["install", "claude-code", "--compress", "gpt"]) != 0
