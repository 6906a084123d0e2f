"""The offline compressor: turns tool calls into observations and a turn into a summary with plain rules, no model.

It is the default when no LLM is configured and the fallback when one fails, so no memory is lost for want of
an answer. Everything here is deterministic (the store deduplicates replays by a hash of title and narrative)
and defensive: tool inputs and responses arrive in many shapes (Claude Code, Codex CLI, Gemini CLI, MCP
servers) and none of them may make it raise.

Modules, in the order a call goes through them: ``actions`` digests one call per tool family (with ``shell``
for command lines, ``patches`` for ``apply_patch`` envelopes, ``paths`` for file names), ``outcomes`` reads how
it ended (``runners`` for test runners' result lines), ``fixes`` places it in the turn's timeline and applies
the bugfix rule below, ``drafts`` writes an observation per kind of action, and ``extractor`` groups them and
writes the turn's summary; ``text`` holds the shared clipping and listing helpers and the output caps.

Type rule for edits (Edit, MultiEdit, Write to an existing file, apply_patch, Gemini ``replace``, file-changing
shell commands): an edit is a ``bugfix`` when a command ran and failed earlier in the turn, that failure was not
already followed by a successful run of the same check before the edit, and either

* confirmed: the next run of that same check after the edit (in ``calls`` or ``turn.tools``) succeeded, or
* candidate: the failed check was a test run and it has not been run again after the edit yet (the edit is
  judged in isolation, as happens when calls are compressed one by one as they arrive).

"The same check" means the same normalised command line, or two test runs of the same runner (``pytest``,
``cargo``, ``go``, ``jest``...). Otherwise the edit is a ``change``; a Write (or added-only patch) of a new file
is a ``feature``; moves and renames only are a ``refactor``. These are checked in the order refactor, feature,
bugfix, change: creating a file is a feature even right after a failing test.

How a shell command ended comes first from the response's own fields, then from its text:

* Claude Code's Bash ``tool_response`` is ``{stdout, stderr, interrupted, isImage}`` (agent-integration
  reference §1.4, and ``toolUseResult`` in §1.9); ``interrupted: true`` ends the run as interrupted. A Bash
  call that exited non-zero is recorded in the transcript as a ``tool_result`` with ``is_error: true`` and the
  text ``Exit code N`` (``toolUseResult`` ``"Error: Exit code N\n…"``, §1.9 and the [FIX] transcripts in
  ``tests/fixtures/transcripts/``); an ``is_error``/``isError`` flag and an ``exit_code``/``exitCode``/
  ``returncode`` field (top level or under ``metadata``) are read wherever a response carries them.
* Codex reuses Claude Code's field names (``tool_input``, ``tool_response``, §2) but the reference does not
  document the inside of its ``tool_response``; its shell results seen so far are ``{output, metadata:
  {exit_code}}`` or the text ``Exit code: N\nWall time: …\nOutput:\n…``.
* Gemini CLI's ``AfterTool`` carries ``tool_name``, ``tool_input``, ``tool_response`` (§3) with the inner
  shape undocumented; ``run_shell_command`` results seen so far are ``{llmContent, returnDisplay, error?}``
  with ``Exit Code: N`` in ``llmContent``.

Then exit codes, test runners' result lines and tracebacks in the text. A run that failed or was interrupted is
never described as a success: when its test counts show no failure (a coverage gate, a timeout part way
through) its outcome reads ``4 passed; failed (exit 1)`` or ``4 passed; interrupted`` and its title says the
command failed; and it counts as the failure of the bugfix rule.

A shell call's ``tool_input.description`` is the short sentence the agent wrote for it: Claude Code's Bash
input carries one (``"description": "Run tests to verify they pass"`` in the recorded hook payload
``tests/fixtures/hooks/post_tool_use_bash.json`` and the [FIX] transcripts; the reference's §1.4 example shows
only ``command``), and any shell tool's string ``description`` is read the same way. It becomes a
``purpose: …`` fact, and the title in place of a command too long (or spanning lines) to show whole. It is
read from the tool input as admitted, so it went through the same ``<private>`` and secret scrubbing as the
command.
"""

from memcairn.capture.offline.extractor import OfflineExtractor
from memcairn.capture.offline.text import (
    DESCRIPTION_MAX,
    ERROR_MAX,
    FACT_MAX,
    FACTS_MAX,
    LIST_MAX,
    SUBTITLE_MAX,
    TEXT_MAX,
    TITLE_MAX,
)

__all__ = [
    "DESCRIPTION_MAX", "ERROR_MAX", "FACT_MAX", "FACTS_MAX", "LIST_MAX", "SUBTITLE_MAX", "TEXT_MAX", "TITLE_MAX",
    "OfflineExtractor",
]
