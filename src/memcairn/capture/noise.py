"""Text that reaches capture but says nothing of the work: prompts the agent's harness wrote, prompts that only say
"go on", and the filler an agent opens its last message with.

- :func:`request_text`: a prompt as a request, or None when it is none: a background task's notice
  (``<task-notification>``), a slash command or its output (``<command-message>``, ``<local-command-stdout>``…),
  system reminders (``<system-reminder>`` blocks are dropped from any prompt, and a prompt of nothing else is
  none), a wrapper's instruction blocks ahead of the person's words (``<system_instruction>``,
  ``<environment_context>``), hook feedback, an interruption notice, the continuation of a compacted conversation,
  or a bare "continue" / "go on" / "yes". Such a prompt is neither stored as a prompt nor taken as a turn's request
  or a summary's title.
- :func:`without_filler`: the agent's message without a leading "I have fully completed the task." and the like,
  which a stop hook often asks for and which is no summary.
"""

from __future__ import annotations

import re

# Prompts the harness writes: Claude Code's notices and wrappers (Codex and Gemini CLI send none of these).
SYSTEM_PROMPT_PREFIXES = (
    "<task-notification>", "<command-message>", "<command-name>", "<command-args>", "<local-command-",
    "<bash-input>", "<bash-stdout>", "<bash-stderr>", "<user-prompt-submit-hook>", "<system-reminder>",
    "Stop hook feedback", "Caveat: the messages below were generated", "[Request interrupted by user",
    "This session is being continued from a previous conversation",
)
_REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.S)
# Blocks a harness or a wrapper app puts ahead of the person's words (Conductor's <system_instruction>, Codex's
# <environment_context>, <user_instructions>): a tagged block whose tag names instructions, a system, a context or
# an environment, at the head of a prompt. Other tags (a pasted <div>) are the person's.
_WRAPPER_BLOCK = re.compile(
    r"\A\s*<([A-Za-z][\w-]*(?:system|instruction|context|environment)[\w-]*)>.*?</\1>", re.S | re.I)
_CONTINUE = re.compile(
    r"(?:please\s+)?(?:continue|go\s+on|keep\s+going|carry\s+on|proceed|go\s+ahead|resume|next|ok(?:ay)?|yes|y|yep|"
    r"sure|do\s+it|k)(?:\s+please)?[\s.!]*", re.I)
_FILLER = re.compile(
    r"\A\s*(?:(?:I\s+have|I've)\s+(?:now\s+)?(?:fully\s+|successfully\s+)?(?:completed|finished|done)\s+"
    r"(?:the|this|all(?:\s+the)?|your)?\s*(?:task|tasks|work|request)s?|(?:the\s+)?task\s+is\s+(?:now\s+)?"
    r"(?:fully\s+)?(?:complete|completed|done)|all\s+done|done)\b\s*[.!]*\s*", re.I)


def request_text(prompt: str | None) -> str | None:
    """``prompt`` without system reminders, or None when what is left is no request (see the module docstring)."""
    if not isinstance(prompt, str):
        return None
    text = _REMINDER.sub("", prompt).strip()
    while (wrapper := _WRAPPER_BLOCK.match(text)) is not None:
        text = text[wrapper.end():].strip()
    if not text or text.startswith(SYSTEM_PROMPT_PREFIXES) or _CONTINUE.fullmatch(text):
        return None
    return text


def is_background_notice(prompt: str | None) -> bool:
    """Whether ``prompt`` is the harness telling the agent a background task ended (``<task-notification>``): a
    turn that only answers it ("that was a stale task from before; everything already passed") did no work."""
    return isinstance(prompt, str) and _REMINDER.sub("", prompt).strip().startswith("<task-notification>")


def without_filler(message: str | None) -> str | None:
    """``message`` without the filler it opens with; None when nothing else is left."""
    if not isinstance(message, str):
        return None
    rest = message
    while True:
        found = _FILLER.match(rest)
        if found is None or not found.group(0):
            break
        rest = rest[found.end():]
    rest = rest.strip()
    return rest or None
