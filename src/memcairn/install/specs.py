"""What the installers register, per agent: hook events, matchers, timeouts and commands.

The hook verbs are those of ``memcairn hook <verb>``. Claude Code and Codex take timeouts in seconds,
Gemini CLI in milliseconds. Codex skips ``async`` handlers, so none is marked async there; Gemini's
lifecycle matchers are exact strings, so its groups carry no matcher (they then match everything).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memcairn.core.errors import ConfigError

COMMAND_NAME = "memcairn"
# What a hook runs as ``<python> -I -c HOOK_CODE <verb>``: the console script's Python, without the script, which
# imports ``re`` (~6 ms of every agent event), and isolated (``-I``: no user site, no PYTHON* variables).
HOOK_CODE = "from memcairn.hooks.runner import main; main()"
HOOK_FLAGS = ("-I", "-c")
# the MCP server the same way: ``memcairn mcp`` without the script
MCP_CODE = "from memcairn.cli.entry import mcp; mcp()"
# What proves that a Python runs both by itself: the hook command's code, once the MCP server's entry is found.
PROOF_CODE = f"import memcairn.cli.entry; memcairn.cli.entry.mcp; {HOOK_CODE}"


@dataclass(frozen=True)
class HookSpec:
    event: str  # the agent's event name
    verb: str  # memcairn hook <verb>
    timeout: int  # in the agent's unit
    matcher: str | None = None
    run_async: bool = False


@dataclass(frozen=True)
class AgentSpec:
    platform: str  # memcairn's platform name (the CLI argument)
    display: str
    hooks: tuple[HookSpec, ...]
    platform_flag: str | None  # ``--platform <value>`` on hook commands; None for the default (Claude Code)
    timeout_unit: str


CLAUDE_CODE = AgentSpec("claude-code", "Claude Code", (
    # fork: a forked session (Claude Code 2.1.214+; earlier versions call it resume and ignore the name)
    HookSpec("SessionStart", "session-start", 30, matcher="startup|resume|clear|compact|fork"),
    HookSpec("UserPromptSubmit", "user-prompt-submit", 10),
    HookSpec("PostToolUse", "post-tool-use", 10, matcher="*", run_async=True),
    HookSpec("PreToolUse", "pre-tool-use", 5, matcher="Read"),
    HookSpec("Stop", "stop", 15),
    HookSpec("SessionEnd", "session-end", 5),
), platform_flag=None, timeout_unit="s")

CODEX = AgentSpec("codex", "Codex", (
    HookSpec("SessionStart", "session-start", 30, matcher="startup|resume|clear|compact"),
    HookSpec("UserPromptSubmit", "user-prompt-submit", 10),
    HookSpec("PostToolUse", "post-tool-use", 10),
    HookSpec("Stop", "stop", 15),
), platform_flag="codex", timeout_unit="s")

GEMINI = AgentSpec("gemini", "Gemini CLI", (
    HookSpec("SessionStart", "session-start", 30_000),
    HookSpec("BeforeAgent", "user-prompt-submit", 10_000),
    HookSpec("AfterTool", "post-tool-use", 10_000),
    HookSpec("AfterAgent", "stop", 15_000),
    HookSpec("SessionEnd", "session-end", 5_000),
), platform_flag="gemini-cli", timeout_unit="ms")

AGENTS: dict[str, AgentSpec] = {a.platform: a for a in (CLAUDE_CODE, CODEX, GEMINI)}


def setting_variables() -> list[str]:
    """``MEMCAIRN_HOME`` and every setting's ``MEMCAIRN_<NAME>``: what memcairn's hooks and MCP server read from
    their environment. Codex passes an MCP server only the variables its entry names (``env_vars``), and Gemini
    CLI in CI (``GITHUB_SHA`` set) removes unknown variables from hooks and servers unless its settings allow
    them: without these names a server would find no home or port and look for the worker elsewhere."""
    from memcairn.wire.settings_source import SETTINGS

    return ["MEMCAIRN_HOME", *(f"MEMCAIRN_{s.name.upper()}" for s in SETTINGS)]


def mcp_args(agent: AgentSpec) -> list[str]:
    """The arguments of the MCP server's entry: ``mcp``, and for Codex ``--platform codex`` (its server also
    hands the SessionStart context to the agent, see ``memcairn mcp --help``)."""
    return ["mcp", "--platform", "codex"] if agent is CODEX else ["mcp"]


def mcp_command(executable: str, agent: AgentSpec, interpreter: str | None = None) -> tuple[str, list[str]]:
    """The MCP server entry's command and arguments: ``<python> -I -c MCP_CODE [--platform codex]`` with the
    ``interpreter`` of ``hook_interpreter`` (the server's start is what the agent's first request waits for), else
    ``<memcairn> mcp [--platform codex]``."""
    if interpreter:
        return interpreter, [*HOOK_FLAGS, MCP_CODE, *mcp_args(agent)[1:]]
    return executable, mcp_args(agent)


def hook_command(executable: str, agent: AgentSpec, verb: str, interpreter: str | None = None) -> str:
    """The shell command of one hook (paths quoted): ``<python> -I -c HOOK_CODE <verb> [--platform <name>]`` with
    the ``interpreter`` of ``hook_interpreter``, else ``<memcairn> hook <verb> [--platform <name>]``."""
    if interpreter:
        command = " ".join(shlex.quote(word) for word in (interpreter, *HOOK_FLAGS, HOOK_CODE, verb))
    else:
        command = f"{shlex.quote(executable)} hook {verb}"
    return f"{command} --platform {agent.platform_flag}" if agent.platform_flag else command


def hook_interpreter(executable: str) -> str | None:
    """The Python of the console script ``executable`` (its ``#!`` line), when that Python runs the hooks and the
    MCP server by itself: ``hook_command``'s and ``mcp_command``'s short form, proven by running the hook's code
    (as a capture child, which answers ``{}`` at once) after importing the server's entry. None, and both call
    ``executable``, for anything else: a launcher of another kind, a memcairn that only ``PYTHONPATH`` or the user
    site provides (``-I`` ignores both), an older memcairn without these entry points.

    Why: a hook is a new process for every agent event, and the console script alone costs a hook ~6 ms of its
    ~20 (``import re``), which every agent waits for at each prompt, each stop and the session's start and end;
    the MCP server's start is waited for before the first request. The Python's path is kept as the script names
    it (a virtual environment's ``bin/python`` link), so the commands break no sooner than the script would: both
    live in the same ``bin`` folder.
    """
    if not os.path.isabs(executable):
        return None
    try:
        with open(executable, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    first, _, rest = head.partition(b"\n")
    interpreter = first[2:].strip().decode("utf-8", "replace") if first.startswith(b"#!") else ""
    if not interpreter or not os.path.isabs(interpreter) or " " in interpreter or b"memcairn.cli.entry" not in rest:
        return None
    try:
        done = subprocess.run([interpreter, *HOOK_FLAGS, PROOF_CODE, "stop"], input=b"", capture_output=True,
                              timeout=30, env={**os.environ, "MEMCAIRN_CAPTURE_CHILD": "1"})
    except (OSError, subprocess.SubprocessError):
        return None
    return interpreter if done.returncode == 0 and done.stdout.strip() == b"{}" else None


def hook_handler(executable: str, agent: AgentSpec, spec: HookSpec, interpreter: str | None = None) -> dict[str, Any]:
    handler: dict[str, Any] = {"type": "command",
                               "command": hook_command(executable, agent, spec.verb, interpreter)}
    if agent is GEMINI:
        handler["name"] = f"memcairn-{spec.verb}"
    handler["timeout"] = spec.timeout
    if spec.run_async:
        handler["async"] = True
    return handler


def hook_group(executable: str, agent: AgentSpec, spec: HookSpec, interpreter: str | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {}
    if spec.matcher is not None:
        group["matcher"] = spec.matcher
    group["hooks"] = [hook_handler(executable, agent, spec, interpreter)]
    return group


def is_memcairn_command(command: Any) -> bool:
    """True for a hook command that runs ``memcairn hook ...`` (whatever the path of ``memcairn``), or memcairn's
    hooks through a Python (``<python> -I -c "<code of memcairn.hooks>" ...``, whatever the path and the code)."""
    if not isinstance(command, str):
        return False
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    if len(argv) >= 2 and Path(argv[0]).stem == COMMAND_NAME and argv[1] == "hook":
        return True
    return len(argv) >= 4 and tuple(argv[1:3]) == HOOK_FLAGS and "memcairn.hooks" in argv[3]


def check_executable(executable: str) -> None:
    """
    Raises:
        ConfigError: ``executable`` is not named ``memcairn``: its hooks could not be recognised later, so
            a second install would add them again and uninstall would leave them.
    """
    if Path(executable).stem != COMMAND_NAME:
        raise ConfigError(f"the executable must be named {COMMAND_NAME} (a symlink of that name will do), not "
                          f"{Path(executable).name!r}; nothing was changed")


def resolve_executable(given: str) -> str:
    """The absolute path of ``--executable``: ``~`` expanded, a bare name looked up on PATH.

    Raises:
        ConfigError: a bare name that is not on PATH, or a command not named ``memcairn``.
    """
    path = os.path.expanduser(given)
    if os.sep not in path and (os.altsep is None or os.altsep not in path):
        found = shutil.which(path)
        if found is None:
            raise ConfigError(f"{given!r} is not on PATH; pass the command's full path, nothing was changed")
        path = found
    check_executable(path)
    return os.path.abspath(path)


def memcairn_executable() -> str:
    """The absolute path of the running ``memcairn`` command, for hooks and MCP entries to call.

    Tried in order: ``sys.argv[0]`` when it is the console script; the script beside this interpreter
    (``python -m memcairn`` from a virtual environment); ``memcairn`` on PATH. The path is made absolute
    but symlinks are kept: ``~/.local/bin/memcairn`` survives reinstalls that move what it points to.

    Raises:
        ConfigError: no ``memcairn`` command can be found.
    """
    candidates = []
    if sys.argv and Path(sys.argv[0]).stem == COMMAND_NAME:
        candidates.append(Path(sys.argv[0]))
    candidates.append(Path(sys.executable).with_name(COMMAND_NAME))
    on_path = shutil.which(COMMAND_NAME)
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise ConfigError("cannot find the memcairn command (not beside this Python nor on PATH); "
                      "install memcairn as a command, or pass --executable /path/to/memcairn")
