"""``memcairn hook <event> [--platform claude-code|codex|gemini-cli]``: one agent event in, one JSON object out.

The agent (Claude Code, Codex, Gemini CLI) starts this process for every hook event, with the event's JSON
on stdin. Whatever happens, the process prints exactly one JSON object on stdout and exits 0: bad input,
a missing field or a dead worker cost the agent its memory, never its session. Diagnostics go to stderr,
one line each. After three worker failures in a row the person is told once (see ``state``).

Events (agent names are accepted too, case and punctuation ignored; Gemini's BeforeAgent, BeforeTool,
AfterTool and AfterAgent map to the prompt, pre-tool, post-tool and stop events): ``session-start``,
``user-prompt-submit``, ``pre-tool-use``, ``post-tool-use``, ``stop``, ``session-end``. Without an event
argument, the payload's ``hook_event_name`` decides. What each one does is in ``events``.

Import discipline: this module and everything it imports use the standard library and memcairn's
standard-library modules (``settings_source``, ``project``) only; a hook never loads click, the store, the
web stack or the model, nor ``typing``, ``dataclasses``, ``inspect`` or ``pathlib`` (together ~15 ms of every
hook's start; annotations stay strings, their names are imported under ``TYPE_CHECKING`` only). Measured by
``tests/test_hooks.py`` and ``memcairn bench hooks``.

A model call made by memcairn itself (the ``claude`` CLI backend) runs with ``MEMCAIRN_CAPTURE_CHILD=1``:
its hooks answer ``{}`` at once, so compressing a session never records (or recurses into) itself.

``MEMCAIRN_HOOK_DEBUG=1`` adds the traceback of an unexpected error to stderr.
"""

from __future__ import annotations

import os
import sys

from memcairn.wire.fastjson import dumps
from memcairn.wire.protocol import PLATFORM_ALIASES, PLATFORMS, platform_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_STDIN_BYTES = 64 * 1024 * 1024


def warn(message: str) -> None:
    """One diagnostic line on stderr (never stdout: the agent parses stdout)."""
    try:
        sys.stderr.write(f"memcairn hook: {' '.join(str(message).split())}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def emit(out: dict[str, Any]) -> None:
    """Print the one JSON object the agent reads."""
    # "replace": a lone surrogate (a MEMCAIRN_HOME path that is not UTF-8, in a notice) must not cost the exit 0
    data = (dumps(out, ensure_ascii=False) + "\n").encode("utf-8", "replace")
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except (OSError, ValueError, AttributeError):
        pass


def parse_args(args: list[str]) -> tuple[str | None, str, list[str]]:
    """(event or None, platform, problems) from the command line, without argparse (it costs a hook ~5 ms)."""
    event, platform, problems = None, "claude-code", []
    items = list(args)
    while items:
        arg = items.pop(0)
        if arg in ("--platform", "-p"):
            if not items:
                problems.append("--platform needs a value (claude-code, codex or gemini-cli)")
                continue
            platform = items.pop(0)
        elif arg.startswith("--platform="):
            platform = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            problems.append(f"unknown option {arg}")
        elif event is None:
            event = arg
        else:
            problems.append(f"unexpected argument {arg}")
    key = platform_key(platform)
    if platform not in PLATFORMS:
        if key in PLATFORM_ALIASES:
            platform = PLATFORM_ALIASES[key]
        else:
            problems.append(f"unknown platform {platform!r}; expected one of {', '.join(PLATFORMS)}")
            platform = platform.strip()[:100] or "claude-code"
    return event, platform, problems


def read_payload() -> tuple[dict[str, Any] | None, str | None]:
    """The hook's JSON object from stdin, or (None, why not)."""
    stdin = sys.stdin
    if stdin is None:
        return None, "no stdin"
    try:
        if stdin.isatty():
            return None, "stdin is a terminal; the agent pipes the event's JSON to this command"
        raw = stdin.buffer.read(MAX_STDIN_BYTES + 1)
    except (OSError, ValueError, AttributeError) as exc:
        return None, f"cannot read stdin: {exc}"
    if len(raw) > MAX_STDIN_BYTES:
        return None, f"stdin holds more than {MAX_STDIN_BYTES} bytes; ignored"
    if not raw.strip():
        return None, "stdin is empty; expected the event's JSON object"
    from memcairn.wire.json_depth import loads_bounded

    try:
        data = loads_bounded(raw)  # a part nested too deep for a walk is cut and named, not the event lost
    except ValueError as exc:
        return None, f"stdin is not valid JSON ({str(exc)[:120]})"
    if not isinstance(data, dict):
        return None, f"stdin holds JSON {type(data).__name__}, expected an object"
    return data, None


def _tells_person(event: str | None, payload: dict[str, Any] | None) -> bool:
    """Whether this event may carry a message for the person: the session start and each prompt (not every
    tool call)."""
    from memcairn.hooks.events import canonical_event

    given = event or (payload or {}).get("hook_event_name")
    return canonical_event(given if isinstance(given, str) else None) in ("session-start", "user-prompt-submit")


def main() -> None:
    """The installed hook command, ``<python> -I -c "from memcairn.hooks.runner import main; main()" <event> ...``
    (see ``install.specs.hook_command``): ``run_hook`` without the console script's start-up."""
    sys.exit(run_hook(sys.argv[1:]))


def run_hook(args: list[str]) -> int:
    """Handle one event; always exit 0 with one JSON object on stdout."""
    out: dict[str, Any] = {}
    if os.environ.get("MEMCAIRN_CAPTURE_CHILD"):
        emit(out)
        return 0
    event: str | None = None
    payload: dict[str, Any] | None = None
    umask = os.umask(0o077)  # what a hook creates in MEMCAIRN_HOME (the home, its state, the spool) is the owner's
    try:
        from memcairn.hooks.events import dispatch

        event, platform, problems = parse_args(args)
        for problem in problems:
            warn(problem)
        payload, why = read_payload()
        if payload is None:
            warn(f"{why}; nothing recorded")
        else:
            out = dispatch(event, platform, payload)
    except Exception as exc:  # fail open: the agent's session matters more than this event
        from memcairn.core.errors import ConfigError, MemcairnError

        kind = "" if isinstance(exc, MemcairnError) else f"unexpected {type(exc).__name__}: "
        warn(f"{kind}{exc}; nothing recorded")
        if os.environ.get("MEMCAIRN_HOOK_DEBUG"):
            import traceback

            traceback.print_exc(file=sys.stderr)
        out = {}
        if isinstance(exc, ConfigError) and _tells_person(event, payload):
            # a setting memcairn cannot use turns memory off on every event; stderr of an exit-0 hook is not
            # shown to the person, so say it where they see it (at session start and with each prompt)
            out = {"systemMessage": f"memcairn: memory is off until this setting is fixed: {exc}"}
    finally:
        os.umask(umask)
    emit(out if isinstance(out, dict) else {})
    return 0
