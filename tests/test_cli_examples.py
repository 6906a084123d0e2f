"""Every command's ``Example:`` as ``--help`` prints it, pasted into a shell: it must parse, and the cheap ones run.

Click rewraps help paragraphs to the terminal's width; an example it rewraps (``--title\\n "Fix login" \\
--narrative``) fails when pasted ("Got unexpected extra argument"), so each example is marked ``\\b`` and this
test reads the examples back out of the rendered help at a narrow width."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from processes import free_port as _free_port

from memcairn.cli.app import cli, run

WIDTH = 60
# Examples cheap and harmless enough to run for real in the test's own MEMCAIRN_HOME (in this order).
RUN = ("memcairn add", "memcairn show", "memcairn stats", "memcairn db path", "memcairn settings")


def commands(group: click.Group, path: tuple[str, ...] = ("memcairn",)) -> Iterator[tuple[tuple[str, ...],
                                                                                      click.Command]]:
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def rendered_help(path: tuple[str, ...]) -> str:
    ctx = click.Context(cli, info_name="memcairn", terminal_width=WIDTH, max_content_width=WIDTH)
    command: click.Command = cli
    for name in path[1:]:
        assert isinstance(command, click.Group)
        command = command.commands[name]
        ctx = click.Context(command, info_name=name, parent=ctx, terminal_width=WIDTH, max_content_width=WIDTH)
    return command.get_help(ctx)


def examples(text: str) -> list[str]:
    """The example commands of a rendered help text, continuation lines joined as a shell joins them."""
    found, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "Example:":
            continue
        block = []
        for following in lines[i + 1:]:
            if not following.strip():
                if block:
                    break
                continue
            block.append(following.strip())
        found += re.sub(r"\\\n", " ", "\n".join(block)).splitlines()  # one command a line, continuations joined
    return found


def argv(example: str) -> list[str]:
    words = shlex.split(example.rsplit(" | ", 1)[-1])  # the command a pipe feeds
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        words.pop(0)  # an environment assignment in front
    assert words[0] == "memcairn", example
    return words[1:]


def parse(args: list[str]) -> None:
    """Parse ``args`` as the CLI would, down to the command, without running it."""
    ctx = cli.make_context("memcairn", list(args), resilient_parsing=False)
    command: click.Command = cli
    rest = list(ctx.protected_args) + list(ctx.args)
    while isinstance(command, click.Group) and rest:
        name, command, rest = command.resolve_command(ctx, rest)
        ctx = command.make_context(name, rest, parent=ctx)
        rest = list(ctx.protected_args) + list(ctx.args) if isinstance(command, click.Group) else []


ALL = [(" ".join(path), example) for path, _ in commands(cli) for example in examples(rendered_help(path))]


def test_every_command_has_an_example() -> None:
    described = {name for name, _ in ALL}
    missing = [" ".join(p) for p, c in commands(cli) if not isinstance(c, click.Group) and " ".join(p) not in described]
    assert missing == []


@pytest.mark.parametrize(("command", "example"), ALL, ids=[f"{c}: {e[:40]}" for c, e in ALL])
def test_each_example_survives_help_formatting_and_parses(command: str, example: str) -> None:
    try:
        parse(argv(example))
    except click.BadParameter as exc:  # a file of the reader's own that is not here: the example itself parsed
        assert "does not exist" in str(exc), exc


def test_the_cheap_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    by_command = dict(ALL)
    for name in RUN:
        example = by_command[name]
        assert run(argv(example)) in (0, 2), example
    out = capsys.readouterr().out
    assert "stored" in out or '"created": true' in out


def test_hook_is_listed_and_its_help_is_for_people() -> None:
    listed = subprocess.run([sys.executable, "-m", "memcairn", "--help"], capture_output=True, text=True, timeout=60)
    assert re.search(r"^  hook\s+Handle one agent event", listed.stdout, re.MULTILINE)
    for flag in ("--help", "-h"):
        shown = subprocess.run([sys.executable, "-m", "memcairn", "hook", "session-start", flag], capture_output=True,
                               text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert shown.returncode == 0 and shown.stdout.startswith("Usage: memcairn hook [OPTIONS] [EVENT]")
        assert "unknown option" not in shown.stderr
    # any other argument is still the agent's: one JSON object on stdout, exit 0
    done = subprocess.run([sys.executable, "-m", "memcairn", "hook", "stop", "--bogus"], input="not json",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "{}\n"


# -- every example, run as pasted into a shell, in a home of the test's own ------------------------------
# Examples that are not run here, and why; every other example runs (a new one must be decided on here).
NOT_RUN = {
    "memcairn demo": "tests/test_demo.py runs it (a minute of its own)",
    "memcairn worker run": "the foreground worker: `worker start` below runs it",
    "memcairn connect": "it would reach a server on the network",
    "memcairn server": "tests/test_team_server*.py run the server on a real PostgreSQL",
    "memcairn bench": "benchmarks take minutes; tests/test_bench_*.py run each with small counts",
}
RUN_ANYWAY = ("memcairn bench recall",)  # its example asks about the sample sessions: ~20 s
# Examples whose exit 2 is the right answer here: they name the reader's own data, which a new home lacks.
READER_S_OWN = ("memcairn timeline --anchor 42", "memcairn show 12", "memcairn forget 12",
                "memcairn import claude-mem ~/", "memcairn import jsonl backup.jsonl",
                "memcairn import transcripts ./sessions --root", "memcairn correct ",
                "memcairn projects root ")
REPOSITORY = Path(__file__).resolve().parent.parent


def _not_run(command: str) -> str | None:
    if command in RUN_ANYWAY:
        return None
    return next((why for prefix, why in NOT_RUN.items() if command == prefix or command.startswith(prefix + " ")),
                None)


@pytest.mark.slow
def test_every_example_runs_in_a_home_of_its_own(tmp_path: Path) -> None:
    """Each example (but those NOT_RUN names) is pasted into /bin/sh with HOME, MEMCAIRN_HOME and the port of
    the test's own: it exits 0 (or 2 with a message, when it names the reader's data), prints no traceback,
    and writes nothing outside that home (an example's own MEMCAIRN_HOME or port is replaced by the test's)."""
    home, memcairn_home, port = tmp_path / "user", tmp_path / "memcairn-home", str(_free_port())
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMCAIRN_", "CLAUDE_", "CODEX_"))}
    env.update(HOME=str(home), MEMCAIRN_HOME=str(memcairn_home), MEMCAIRN_PORT=port,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    transcripts = home / ".claude" / "projects" / "my-app"  # the import example's folder, with a real session
    transcripts.mkdir(parents=True)
    shutil.copy(REPOSITORY / "src/memcairn/assets/transcripts/claude-reliability__hello-world-script.jsonl",
                transcripts)
    ran = []
    try:
        for command, example in ALL:
            if _not_run(command):
                continue
            shell = re.sub(r"MEMCAIRN_HOME=\S+", f"MEMCAIRN_HOME={memcairn_home}", example)
            shell = re.sub(r"MEMCAIRN_PORT=\S+", f"MEMCAIRN_PORT={port}", shell)
            done = subprocess.run(["/bin/sh", "-c", shell], env=env, cwd=tmp_path if "bench" not in command
                                  else REPOSITORY, capture_output=True, text=True, timeout=180,
                                  stdin=subprocess.DEVNULL)
            allowed = (0, 2) if example.startswith(READER_S_OWN) else (0,)
            assert done.returncode in allowed, f"{example}\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, f"{example}\n{done.stderr}"
            if "--json" in example.split() and done.returncode == 0:
                json.loads(done.stdout)  # --json prints JSON, also when there was nothing to do
            ran.append(example)
            if "bench recall" in example:  # the example's QA file and transcripts are in the repository
                assert "| memcairn |" in done.stdout, done.stdout
    finally:
        subprocess.run([sys.executable, "-m", "memcairn", "worker", "stop"], env=env, capture_output=True,
                       timeout=60)
    assert len(ran) >= 30 and any("bench recall" in example for example in ran)
