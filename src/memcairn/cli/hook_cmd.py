"""``memcairn hook <event>``, as ``--help`` shows it.

An agent runs ``memcairn hook ...`` for every event; ``memcairn.cli.entry`` hands it to ``hooks.runner`` before
click is imported (a hook must start fast), so this command is reached only for ``--help`` and from code that
calls the click group directly. Either way it runs the same handler.
"""

from __future__ import annotations

import sys

import click


@click.command("hook", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("event", required=False)
@click.option("--platform", default="claude-code", show_default=True,
              help="The agent sending the event: claude-code, codex or gemini-cli.")
@click.pass_context
def hook(ctx: click.Context, event: str | None, platform: str) -> int:
    """Handle one agent event (what the installed hooks run): the event's JSON on stdin, one JSON object on stdout.

    EVENT: session-start, user-prompt-submit, pre-tool-use, post-tool-use, stop or session-end (the agents'
    own names, such as SessionStart or BeforeAgent, work too); without it, the payload's hook_event_name
    decides. It always exits 0 and prints a JSON object, whatever stdin holds: a hook never breaks the
    agent's session. Diagnostics go to stderr; MEMCAIRN_HOOK_DEBUG=1 adds tracebacks. The example tries it on
    a home of its own, so nothing reaches your memory.

    Example:

    \b
        echo '{"session_id": "s1", "cwd": "/tmp/try", "prompt": "hi"}' | \
          MEMCAIRN_HOME=/tmp/memcairn-try MEMCAIRN_PORT=37879 memcairn hook user-prompt-submit
    """
    from memcairn.hooks.runner import run_hook

    code = run_hook([*([event] if event else []), "--platform", platform, *ctx.args])
    sys.stdout.flush()
    return code
