"""The README's "Quick start" and "Use it with your agent", run as written: each block's commands in bash, from
the checkout, in a temporary HOME, as a newcomer would paste them.

Kept quick, on purpose: the scripts reuse this checkout's .venv (``scripts/venv-is-current``: no new .venv and no
``pip install``); ``./scripts/test`` gets the arguments of one small test module appended (the whole suite is what
CI runs it for, and from inside the suite it would run itself); the agents' CLIs for the end-to-end tests come
from the cache they were installed in (``MEMCAIRN_E2E_CACHE``); the demo's worker gets a free port and a
temporary home through the variables the script reads. The demo's output is compared with the lines the README
quotes from it (numbers, times and ids may differ; the words may not).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from processes import free_port

from memcairn.install.specs import MCP_CODE
from memcairn.wire import lifecycle
from memcairn.wire.config import load_settings

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
SCRIPTS_TEST_ARGS = "tests/test_scripts.py -q -p no:cacheprovider"

pytestmark = pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="needs the checkout's .venv")


def blocks(heading: str) -> list[str]:
    """The fenced code blocks of the README section under ``## heading`` (up to the next heading outside a block)."""
    found: list[str] = []
    lines: list[str] = []
    inside = in_section = False
    for line in README.splitlines():
        if line.startswith("```"):
            if inside and in_section:
                found.append("\n".join(lines) + "\n")
            inside, lines = not inside, []
        elif inside:
            lines.append(line)
        elif line.startswith("## "):
            if in_section:
                break
            in_section = line == f"## {heading}"
    return found


def commands(block: str) -> list[str]:
    """The block's command lines without their trailing comments."""
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


@pytest.fixture
def newcomer_env(tmp_path: Path) -> dict[str, str]:
    """A fresh HOME and no memcairn variables; the e2e clients' cache where it already is."""
    real_cache = Path(os.environ.get("MEMCAIRN_E2E_CACHE") or Path.home() / ".cache" / "memcairn-e2e")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMCAIRN_", "CLAUDE_CONFIG_DIR", "CODEX_HOME",
                                                                       "VIRTUAL_ENV"))}
    home = tmp_path / "newcomer"
    home.mkdir()
    env.update(HOME=str(home), MEMCAIRN_E2E_CACHE=str(real_cache))
    return env


def bash(script: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{script}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


# What a run may print differently from the README: the worker's pid and port, and the time the digest was made.
OPEN = (r"\(pid \d+\)", r"127\.0\.0\.1:\d+", r"MEMCAIRN_PORT=\d+", r"\d{4}-\d\d-\d\d \d\d:\d\d UTC$")


def quoted_line_pattern(line: str) -> re.Pattern[str]:
    """A line the README quotes from the demo, exactly (ids, counts, tokens, the times of the sample sessions),
    but for what differs from run to run (``OPEN``)."""
    pattern = re.escape(line.rstrip()).replace(r"\ ", " ")
    for part in OPEN:
        found = re.search(part, line.rstrip())
        if found:
            pattern = pattern.replace(re.escape(found.group()).replace(r"\ ", " "), part.rstrip("$"))
    return re.compile(pattern)


@pytest.mark.slow
def test_the_quick_start_runs_as_written_and_prints_what_the_readme_quotes(newcomer_env: dict[str, str],
                                                                            tmp_path: Path) -> None:
    quick, shown = blocks("Quick start")[:2]
    assert commands(quick) == ["./scripts/demo", "./scripts/test"]
    env = {**newcomer_env, "MEMCAIRN_HOME": str(tmp_path / "demo-home"), "MEMCAIRN_PORT": str(free_port()),
           "TZ": "UTC"}  # the README quotes the sample sessions' times in UTC
    try:
        demo = bash("./scripts/demo", env, timeout=400)
        assert demo.returncode == 0, demo.stderr[-2000:]
    finally:
        lifecycle.stop(load_settings(home=tmp_path / "demo-home", environ=env), timeout=20)
    # the README shows the stop command of a checkout in ~/src/memcairn, run with the script's default home
    printed = [line.rstrip().replace(env["MEMCAIRN_HOME"], "~/src/memcairn/.memcairn-demo").replace(str(REPO),
                                                                                                 "~/src/memcairn")
               for line in demo.stdout.splitlines()]
    missing = [line for line in shown.splitlines()
               if line.strip() not in ("", "...") and not any(quoted_line_pattern(line).fullmatch(p) for p in printed)]
    assert missing == [], "the README quotes lines the demo no longer prints:\n" + "\n".join(missing)

    tests = bash(f"./scripts/test {SCRIPTS_TEST_ARGS}", newcomer_env, timeout=400)
    assert tests.returncode == 0, tests.stdout[-2000:] + tests.stderr[-2000:]
    assert re.search(r"\d+ passed", tests.stdout)


def test_use_it_with_your_agent_runs_as_written_in_a_fresh_home(newcomer_env: dict[str, str]) -> None:
    (block,) = blocks("Use it with your agent")[:1]
    lines = commands(block)
    assert lines[0] == "source .venv/bin/activate" and "memcairn install claude-code" in lines
    done = bash("\n".join(lines), newcomer_env, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    home = Path(newcomer_env["HOME"])
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    assert "memcairn" in json.dumps(hooks["SessionStart"]) and "memcairn" in json.dumps(hooks["PostToolUse"])
    # `memcairn mcp`, or the same through the script's own Python (see test_install for which one and why)
    assert json.loads((home / ".claude.json").read_text())["mcpServers"]["memcairn"]["args"] in (
        ["mcp"], ["-I", "-c", MCP_CODE])
    assert "does not exist" in done.stderr and "no claude-mem database" in done.stderr  # optional steps, said so
    # and the way back the README names leaves nothing of the install behind
    undone = bash("source .venv/bin/activate\nmemcairn uninstall claude-code", newcomer_env, timeout=120)
    assert undone.returncode == 0, undone.stderr
    assert sorted(p.name for p in home.iterdir()) == [".memcairn"]  # the store the imports opened, nothing else


def test_every_install_command_the_readmes_give_installs_this_checkout() -> None:
    """memcairn is not on the package index: an install line names the checkout (``.``) or an extra of it."""
    for readme in (REPO / "README.md", REPO / "plugin" / "README.md"):
        lines = [line for line in readme.read_text().splitlines()
                 if re.search(r"\b(pip|pipx|uv tool) install\b", line)]
        assert lines, readme
        for line in lines:
            for found in re.finditer(r"\b(?:pip|pipx|uv tool) install (?:--user )?(\S+)", line):
                target = found.group(1).strip("`'\"")
                assert target.startswith("."), f"{readme.name}: {line.strip()}"
