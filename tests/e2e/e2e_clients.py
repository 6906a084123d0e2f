"""The agents' own CLIs, installed from the npm registry into a cache folder kept between runs.

``MEMCAIRN_E2E_CACHE`` names the folder (default ``~/.cache/memcairn-e2e``). Each client has its own npm prefix
there; an install that finished leaves a ``.installed`` mark, so a broken one is redone. Run this file
(``python tests/e2e/e2e_clients.py``, which ``scripts/test`` does) to install what is missing; the tests fail,
never skip, when a client is not there.

Versions: Claude Code twice, the newest release (its native binary, which runs whatever the Node version) and
the one a plain ``npm install`` resolves to here (newer releases need Node 22, so on Node 20 that is an older
one, run through npm's own launcher); Codex CLI and Gemini CLI pinned to the releases these tests were
written against.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cli:
    key: str  # the folder under the cache
    title: str
    spec: str  # what npm installs
    binary: str  # the executable, relative to the prefix
    ignore_scripts: bool = False

    def prefix(self) -> Path:
        return cache_dir() / self.key

    def executable(self) -> Path:
        return self.prefix() / self.binary

    def installed(self) -> bool:
        return (self.prefix() / ".installed").exists() and self.executable().exists()


CLAUDE_NATIVE = Cli("claude-code-2.1.332", "Claude Code 2.1.332 (native binary)", "@anthropic-ai/claude-code@2.1.332",
                    "node_modules/@anthropic-ai/claude-code-linux-x64/claude", ignore_scripts=True)
CLAUDE_NPM = Cli("claude-code-npm", "Claude Code (as a plain npm install resolves it)", "@anthropic-ai/claude-code",
                 "node_modules/.bin/claude")
CODEX = Cli("codex-0.171.0", "Codex CLI 0.171.0", "@openai/codex@0.171.0", "node_modules/.bin/codex")
GEMINI = Cli("gemini-cli-0.61.0", "Gemini CLI 0.61.0", "@google/gemini-cli@0.61.0", "node_modules/.bin/gemini")
ALL = (CLAUDE_NATIVE, CLAUDE_NPM, CODEX, GEMINI)


def cache_dir() -> Path:
    configured = os.environ.get("MEMCAIRN_E2E_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "memcairn-e2e"


def missing_message(cli: Cli) -> str:
    return (f"{cli.title} is not installed in {cli.prefix()}: run `python tests/e2e/e2e_clients.py` "
            f"(needs npm and the npm registry once; the folder is kept between runs)")


def install(cli: Cli) -> None:
    """``npm install`` the client into its prefix, quietly; raises with npm's output when it fails."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(f"npm is not on PATH: {cli.title} cannot be installed for the end-to-end tests")
    prefix = cli.prefix()
    if prefix.exists():
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True)
    command = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
               "--no-save", cli.spec]
    if cli.ignore_scripts:
        command.insert(2, "--ignore-scripts")
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not cli.executable().exists():
        raise RuntimeError(f"installing {cli.title} failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    (prefix / ".installed").write_text(cli.spec + "\n")


def ensure_all(out=sys.stderr) -> int:  # noqa: ANN001 - a text stream
    missing = [cli for cli in ALL if not cli.installed()]
    if not missing:
        return 0
    for cli in missing:
        print(f"e2e: installing {cli.title} from the npm registry into {cli.prefix()} (once; kept between runs)",
              file=out, flush=True)
        try:
            install(cli)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"e2e: {exc}", file=out, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(ensure_all())
