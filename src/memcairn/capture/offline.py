"""The offline compressor: turns tool calls into observations and a turn into a summary with plain rules, no model.

It is the default when no LLM is configured and the fallback when one fails, so no memory is lost for want of
an answer. Everything here is deterministic (the store deduplicates replays by a hash of title and narrative)
and defensive: tool inputs and responses arrive in many shapes (Claude Code, Codex CLI, Gemini CLI, MCP
servers) and none of them may make it raise.

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

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memcairn.capture.records import CONCEPTS, Compressed, Observation, Summary, ToolCall, Turn

TITLE_MAX = 80
DESCRIPTION_MAX = 120
SUBTITLE_MAX = 120
FACT_MAX = 240
FACTS_MAX = 8
ERROR_MAX = 200
TEXT_MAX = 1000
LIST_MAX = 4
_SCAN_HALF = 12_000  # how much of a response's head and tail is scanned for outcomes

_READ_TOOLS = frozenset({"read", "notebookread", "read_file", "read_many_files"})
_SEARCH_TOOLS = frozenset({
    "grep", "glob", "ls", "list_directory", "search_file_content", "websearch", "webfetch", "web_fetch",
    "google_web_search",
})
_EDIT_TOOLS = frozenset({"edit", "multiedit", "notebookedit", "replace", "str_replace_editor"})
_WRITE_TOOLS = frozenset({"write", "write_file", "create_file"})
_SHELL_TOOLS = frozenset({"bash", "shell", "exec_command", "run_shell_command", "local_shell", "shell_command"})
_TASK_TOOLS = frozenset({"task", "agent"})
_SKIP_TOOLS = frozenset({
    "todowrite", "todoread", "askuserquestion", "update_plan", "write_todos", "enterplanmode", "killshell",
    "killbash", "exitplanmode",
})
_OWN_TOOL_PREFIXES = ("mcp__memcairn__", "mcp_memcairn_", "mcp__plugin_memcairn")

_DEFINITION = re.compile(
    r"^[ \t]*(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?"
    r"(?:def|class|fn|func|function|struct|enum|trait|interface|impl)\s+([A-Za-z_]\w*)",
    re.MULTILINE,
)
_EXIT_CODE = re.compile(
    r"(?:^|\n)\s*(?:Error:\s*)?(?:exit code|exit status|process exited with code)[:\s]\s*(-?\d+)", re.IGNORECASE
)
_ERROR_LINE = re.compile(
    r"\b(?:error|fatal)(?:\[\w+\])?:|\berror\b|command not found|no such file or directory|permission denied"
    r"|\bFAILED\b|panicked at|\bexception\b|cannot find|not found",
    re.IGNORECASE,
)
_WARNING_LINE = re.compile(r"deprecat|warning:", re.IGNORECASE)
# Lines a harness frames a command's output with rather than output: a label with nothing after it (Codex's
# ``Output:``, Gemini's ``Error: (none)``, ``Stderr: (empty)``) and the metadata Gemini and Codex add
# (``Command:``, ``Directory:``, ``Process Group PGID:``, ``Wall time:``, ...). Never a command's error.
_HARNESS_LINE = re.compile(
    r"^[A-Za-z][\w ]{0,30}:\s*(?:\((?:none|empty)\))?$"
    r"|^(?:Command|Directory|Signal|Background PIDs|Process Group PGID|Wall time|Chunk ID|Original token count):",
)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_TOOL_ERROR_TAG = re.compile(r"</?tool_use_error>")
# Claude Code's results for a call the user declined or stopped: it never ran, or not to its end.
_DECLINED = re.compile(
    r"\s*(?:Error:\s*)?(?:Exit code \d+\s*)?(?:User rejected tool use|The user doesn't want to proceed with this "
    r"tool use|\[Request interrupted by user)"
)
# Of those, a call the user declined: it never ran, so it is no failing run of a check (the bugfix rule).
_REJECTED = re.compile(
    r"\s*(?:Error:\s*)?(?:Exit code \d+\s*)?(?:User rejected tool use|The user doesn't want to proceed with this "
    r"tool use)"
)
_SUMMARY_LINE_MAX = 400  # result lines of test runners are short; longer lines are not searched for one
_NEXT_CUE = re.compile(
    r"\b(?:next|todo|remaining|remains|should|need to|needs to|still|follow[- ]up)\b", re.IGNORECASE
)
_LEARNED_CUE = re.compile(
    r"\b(?:errors?|fail(?:ed|s|ing|ure)?|passed|warnings?|deprecated|fixe[sd]|exception|traceback|verified)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NAME_FACTS = ("defines ", "adds ", "touches ")  # names of code, not lessons (``defines ParseError``)
_PURPOSE = "purpose: "  # what the agent meant a command to do, not what it taught


# ----------------------------------------------------------------------------------------------- small text helpers


def _clip(text: str | None, limit: int) -> str:
    """One line, collapsed whitespace, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(str(text or "").split())
    if len(flat) <= limit:
        return flat
    cut = flat[: max(limit - 1, 0)]
    space = cut.rfind(" ")
    if space >= limit // 2 and not flat[len(cut)].isspace():
        cut = cut[:space]  # a whole word, not part of one, when that keeps at least half
    return cut.rstrip() + "…"


def _first_sentences(text: str | None, limit: int) -> str:
    """Whole leading sentences of ``text`` that fit in ``limit`` (at least a clipped first one)."""
    flat = _plain(text)
    if not flat:
        return ""
    out = ""
    for sentence in _SENTENCE_END.split(flat):
        candidate = f"{out} {sentence}".strip()
        if len(candidate) > limit:
            break
        out = candidate
    return out or _clip(flat, limit)


def _first_sentence(text: str | None, limit: int) -> str:
    """The first sentence of the first non-empty line."""
    for line in str(text or "").splitlines():
        line = _plain(line)
        if line:
            return _clip(_SENTENCE_END.split(line, maxsplit=1)[0], limit)
    return ""


def _plain(text: str | None) -> str:
    """Markdown emphasis and heading markers dropped, whitespace collapsed."""
    lines = []
    for line in str(text or "")[: TEXT_MAX * 8].splitlines():
        line = re.sub(r"^\s*(?:#+|[-*+]|\d+\.)\s+", "", line)
        lines.append(line.replace("**", "").replace("__", ""))
    return " ".join(" ".join(lines).split())


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return list(seen)


def _listing(items: Sequence[str], limit: int = LIST_MAX) -> str:
    """``a, b, c (+2 more)``."""
    shown = ", ".join(items[:limit])
    return f"{shown} (+{len(items) - limit} more)" if len(items) > limit else shown


def _code(command: str, limit: int = 60) -> str:
    return f"`{_clip(command.splitlines()[0] if command.strip() else command, limit)}`"


def _lines(text: str | None) -> int:
    return 0 if not text else str(text).count("\n") + 1


def _names(text: str | None) -> list[str]:
    return _unique(_DEFINITION.findall(str(text or "")[:50_000]))


# --------------------------------------------------------------------------------------------- response and outcome


def _response_text(response: Any, depth: int = 0) -> str:
    """The readable text of a tool response of any shape (head and tail kept when huge)."""
    if response is None or depth > 4:
        return ""
    if isinstance(response, bytes):
        response = response.decode("utf-8", "replace")
    if isinstance(response, str):
        text = response
    elif isinstance(response, bool | int | float):
        text = ""
    elif isinstance(response, list | tuple):
        text = "\n".join(filter(None, (_response_text(item, depth + 1) for item in list(response)[:50])))
    elif isinstance(response, dict):
        text = _dict_text(response, depth)
    else:
        text = str(response)
    if len(text) > 2 * _SCAN_HALF:
        text = text[:_SCAN_HALF] + "\n…\n" + text[-_SCAN_HALF:]
    return text


_TEXT_KEYS = ("stdout", "stderr", "output", "llmContent", "text", "content", "result", "error", "message", "file")


def _dict_text(response: dict[Any, Any], depth: int) -> str:
    if response.get("type") == "image":  # an image block (MCP, the API, a Read of a picture): base64, not text
        return "[image]"
    parts = [_response_text(response.get(key), depth + 1) for key in _TEXT_KEYS if key in response]
    parts = [part for part in parts if part]
    if parts or any(key in response for key in _TEXT_KEYS):
        return "\n".join(parts)
    try:
        return json.dumps(response, sort_keys=True, default=str)[: 2 * _SCAN_HALF]
    except (TypeError, ValueError):
        return ""


@dataclass(frozen=True)
class _Outcome:
    """How a call ended. ``status`` is ok, failed or unknown (no response to judge by)."""

    status: str = "unknown"
    exit_code: int | None = None
    tests: str | None = None
    tests_failed: bool = False  # the test counts themselves show failures or errors
    failing_tests: tuple[str, ...] = ()
    error: str | None = None
    warning: str | None = None
    interrupted: bool = False
    rejected: bool = False  # the user declined the call: it never ran
    text: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ended(self) -> str | None:
        """``interrupted``, ``failed (exit 1)`` or ``failed`` for a run that did not succeed, else None."""
        if self.interrupted:
            return "interrupted"
        if self.failed:
            return f"failed (exit {self.exit_code})" if self.exit_code not in (None, 0) else "failed"
        return None

    @property
    def failed_beyond_tests(self) -> bool:
        """Failed or interrupted although the test counts (if any) show no failure: the counts alone would read
        as a success."""
        return self.interrupted or (self.failed and not self.tests_failed)

    def label(self) -> str:
        """A short outcome: ``3 failed, 10 passed``, ``failed (exit 1)``, ``ok``; counts of a run that failed
        otherwise say so: ``4 passed; failed (exit 1)``, ``4 passed; interrupted``."""
        if self.tests:
            return f"{self.tests}; {self.ended}" if self.failed_beyond_tests else self.tests
        return self.ended or ("ok" if self.ok else "no output")


def _flag_failure(response: Any) -> tuple[bool, int | None, bool]:
    """(error flagged, exit code, interrupted) from structured fields of a response."""
    if isinstance(response, list | tuple):
        flagged = any(isinstance(item, dict) and item.get("is_error") is True for item in response)
        return flagged, None, False
    if not isinstance(response, dict):
        return False, None, False
    flagged = response.get("is_error") is True or response.get("isError") is True or response.get("success") is False
    error = response.get("error")
    flagged = flagged or (bool(error) and not isinstance(error, bool | int | float))
    code = None
    for holder in (response, response.get("metadata")):
        if isinstance(holder, dict):
            for key in ("exit_code", "exitCode", "returncode", "return_code"):
                code = _exit_code(holder.get(key))
                if code is not None:
                    break
        if code is not None:
            break
    return flagged, code, response.get("interrupted") is True


def _exit_code(value: Any) -> int | None:
    """An exit code given as a number or as text (``"1"``: some agents report it as a string)."""
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,6}\s*", value):
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _declined(response: Any) -> bool:
    """The call was declined by the user or interrupted (Claude Code writes a notice instead of a result)."""
    return isinstance(response, str) and bool(_DECLINED.match(response))


def _outcome(response: Any, command_like: bool = True) -> _Outcome:
    """How a call ended. Output text is only searched for exit codes, test results, tracebacks and warnings
    when it is a command's output (``command_like``): a file that was read may contain any of these."""
    text = _TOOL_ERROR_TAG.sub("", _ANSI.sub("", _response_text(response)))
    flagged, code, interrupted = _flag_failure(response)
    interrupted = interrupted or _declined(response)
    if isinstance(response, str) and re.match(r"\s*(?:Error:|<tool_use_error>)", response):
        flagged = True
    if code is None and command_like:
        match = _EXIT_CODE.search(text[:600]) or _EXIT_CODE.search(text[-400:])
        code = int(match.group(1)) if match else None
    tests = _test_summary(text) if command_like else None
    failed = flagged or interrupted or (code is not None and code != 0) or bool(tests and tests[1])
    if not failed and code is None and command_like:
        failed = bool(re.search(r"^Traceback \(most recent call last\)|command not found", text, re.MULTILINE))
    if failed:
        status = "failed"
    elif text.strip() or code == 0 or (isinstance(response, dict) and response):
        status = "ok"
    else:
        status = "unknown"
    return _Outcome(
        status=status, exit_code=code, tests=tests[0] if tests else None, tests_failed=bool(tests and tests[1]),
        failing_tests=tuple(_failing_tests(text)) if command_like else (),
        error=_error_line(text) if failed else None, warning=_warning_line(text) if command_like or failed else None,
        interrupted=interrupted, rejected=isinstance(response, str) and bool(_REJECTED.match(response)), text=text,
    )


def _counts(pairs: Iterable[tuple[str, str]]) -> tuple[str, bool] | None:
    """``[("3", "failed"), ("10", "passed")]`` → (``3 failed, 10 passed``, failed?)."""
    totals: dict[str, int] = {}
    for number, word in pairs:
        word = {"error": "errors", "tests": "passed"}.get(word.lower(), word.lower())
        totals[word] = totals.get(word, 0) + int(number)
    order = ("failed", "errors", "passed", "skipped")
    shown = [f"{totals[word]} {word}" for word in order if word in totals]
    if not shown:
        return None
    return ", ".join(shown), bool(totals.get("failed") or totals.get("errors"))


def _test_summary(text: str) -> tuple[str, bool] | None:
    """A test runner's result line: pytest, cargo test, jest/vitest, go test, unittest."""
    for parser in (_cargo_summary, _jest_summary, _unittest_summary, _pytest_summary, _go_summary):
        found = parser(text)
        if found:
            return found
    return None


def _short_lines(text: str) -> list[str]:
    """The lines a result line may be, with Gemini CLI's ``Output: `` label taken off the first line of a
    command's output (its ``run_shell_command`` result reads ``Command: …``, ``Output: <first line>``, …)."""
    return [line.removeprefix("Output: ") for line in text.splitlines() if len(line) <= _SUMMARY_LINE_MAX]


def _cargo_summary(text: str) -> tuple[str, bool] | None:
    results = re.findall(r"test result: (ok|FAILED)\. (\d+) passed; (\d+) failed", text)
    if not results:
        return None
    passed = sum(int(p) for _, p, _ in results)
    failed = sum(int(f) for _, _, f in results)
    shown = f"{failed} failed, {passed} passed" if failed else f"{passed} passed"
    return shown, bool(failed) or any(status == "FAILED" for status, _, _ in results)


def _jest_summary(text: str) -> tuple[str, bool] | None:
    for line in reversed(_short_lines(text)):
        if re.match(r"\s*Tests?:?\s+.*\d+ (?:passed|failed)", line):
            return _counts(re.findall(r"(\d+) (failed|passed|skipped)", line))
    return None


def _unittest_summary(text: str) -> tuple[str, bool] | None:
    ran = re.search(r"^Ran (\d+) tests? in ", text, re.MULTILINE)
    if not ran:
        return None
    failed = re.search(r"^FAILED \((.*)\)", text, re.MULTILINE)
    if failed:
        bad = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", failed.group(1)))
        return _counts([(str(bad), "failed"), (str(int(ran.group(1)) - bad), "passed")])
    return _counts([(ran.group(1), "passed")])


def _pytest_summary(text: str) -> tuple[str, bool] | None:
    for line in reversed(_short_lines(text)):
        if re.search(r"\b\d+ (?:passed|failed|errors?)\b", line) and re.search(r"\bin [\d.]+s\b", line):
            return _counts(re.findall(r"(\d+) (failed|passed|errors?|skipped)\b", line))
        if re.match(r"=+ no tests ran", line):
            return "no tests ran", False
    return None


def _go_summary(text: str) -> tuple[str, bool] | None:
    ok = re.findall(r"^ok\s+\S+\s+(?:\(cached\)|[\d.]+s)", text, re.MULTILINE)
    failing = re.findall(r"^(?:FAIL\s+\S+|--- FAIL: )", text, re.MULTILINE)
    if not ok and not failing:
        return None
    parts = [f"{len(failing)} FAIL"] if failing else []
    shown = ", ".join([*parts, f"{len(ok)} ok"] if ok else parts)
    return f"go test: {shown}", bool(failing)


def _failing_tests(text: str) -> list[str]:
    found = re.findall(r"^(?:FAILED|ERROR) (\S+)|^--- FAIL: (\S+)|^test (\S+) \.\.\. FAILED", text, re.MULTILINE)
    return _unique(next(name for name in group if name) for group in found)[:3]


def _error_line(text: str) -> str | None:
    """The most telling error line: a traceback's exception, else the first line that looks like an error,
    else the last line of output (where most tools put their complaint)."""
    lines = [line.strip() for line in text.splitlines()]
    if "Traceback (most recent call last):" in lines:
        start = lines.index("Traceback (most recent call last):")
        raw = text.splitlines()[start + 1 :]
        for line in raw:
            if line.strip() and not line[:1].isspace() and not line.startswith("Traceback"):
                return _clip(line, ERROR_MAX)
    meaningful = [
        line for line in lines
        if line and not _EXIT_CODE.match("\n" + line) and not re.search(r"\b\d+ (?:passed|failed)\b", line)
        and not _HARNESS_LINE.match(line)
    ]
    for line in meaningful:
        if _ERROR_LINE.search(line):
            return _clip(line, ERROR_MAX)
    return _clip(meaningful[-1], ERROR_MAX) if meaningful else None


def _warning_line(text: str) -> str | None:
    for line in text.splitlines():
        if _WARNING_LINE.search(line):
            return _clip(line, ERROR_MAX)
    return None


# ------------------------------------------------------------------------------------------------------------ paths


def _is_abs(path: str) -> bool:
    return path.startswith(("/", "~", "\\\\")) or bool(re.match(r"^[A-Za-z]:[\\/]", path))


def _norm(path: str) -> str:
    if "\\" in path and "/" not in path:
        return path.rstrip("\\") or path
    if path.startswith("~"):
        return path.rstrip("/") or path
    return posixpath.normpath(path)


@dataclass(frozen=True)
class _Paths:
    """Resolves paths: relative ones against ``anchor`` (where the call ran), then relative to ``base`` (the
    turn's cwd) when under it; others stay absolute."""

    base: str | None
    anchor: str | None

    def resolve(self, raw: Any) -> str | None:
        if not isinstance(raw, str):
            return None
        path = raw.strip()
        if path.startswith("file://"):
            path = path[7:]
        if not path or len(path) > 500 or any(ch in path for ch in "\n\x00$`") or path.startswith("-"):
            return None
        anchor = self.anchor
        if not _is_abs(path) and anchor:
            path = posixpath.join(anchor, path) if "\\" not in anchor else f"{anchor}\\{path}"
        path = _norm(path)
        if self.base and _is_abs(path):
            base = _norm(self.base)
            for sep in ("/", "\\"):
                if path == base:
                    return None
                if path.startswith(base.rstrip(sep) + sep):
                    return path[len(base.rstrip(sep)) + 1 :] or None
        return None if path in (".", "") else path

    def resolve_all(self, raws: Iterable[Any]) -> list[str]:
        return _unique(filter(None, (self.resolve(raw) for raw in raws)))


# ------------------------------------------------------------------------------------------------------ shell parsing


_PUNCT = "();<>|&\n"
_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "command", "exec", "nice", "builtin", "stdbuf"})
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "hatch", "pdm", "rye"})
_READERS = frozenset({"cat", "head", "tail", "less", "more", "wc", "nl", "bat", "source", ".", "diff", "cmp", "file"})
_READ_ONLY = frozenset({
    "cat", "head", "tail", "less", "more", "wc", "nl", "bat", "ls", "find", "tree", "grep", "egrep", "fgrep", "rg",
    "ag", "pwd", "which", "whereis", "type", "file", "stat", "du", "df", "echo", "printf", "diff", "cmp", "sed",
    "awk", "sort", "uniq", "cut", "jq", "true", "realpath", "basename", "dirname", "date", "whoami", "env",
})
_GIT_READ_ONLY = frozenset({"status", "log", "diff", "show", "branch", "blame", "rev-parse", "remote", "ls-files"})
_INTERPRETERS = frozenset({"node", "deno", "ruby", "perl", "bash", "sh", "zsh", "php", "tsx", "ts-node", "bun"})
# Options that take a separate value, per program (the value is not a file).
_VALUE_OPTIONS = frozenset({"-k", "-m", "-p", "-o", "-e", "-f", "-c", "-n", "-t", "-C"})
_PROGRAM_OPTIONS: dict[str, frozenset[str]] = {
    "grep": frozenset({"-A", "-B", "-C", "-m", "-e", "-f", "-d", "-D", "--max-count"}),
    "rg": frozenset({"-A", "-B", "-C", "-m", "-e", "-f", "-g", "--glob", "-t", "--type", "-T", "--max-count"}),
    "sed": frozenset({"-e", "-f", "-l", "--expression", "--file"}),
    "head": frozenset({"-n", "-c"}),
    "tail": frozenset({"-n", "-c"}),
    "cp": frozenset({"-t", "-S"}),
    "mv": frozenset({"-t", "-S"}),
}
_NO_OPTIONS: frozenset[str] = frozenset()


@dataclass
class _ShellEffects:
    """What a command line does to files, and what kind of command it is."""

    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    moves: list[tuple[str, str]] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)  # scripts run by path: kept only when inside the project
    runner: str | None = None
    read_only: bool = True


def _strip_heredocs(script: str) -> str:
    """Drop here-document bodies so their text is not parsed as commands."""
    out: list[str] = []
    pending: list[str] = []
    for line in script.splitlines():
        if pending:
            if line.strip() == pending[0]:
                pending.pop(0)
            continue
        out.append(line)
        pending.extend(m.group(2) for m in re.finditer(r"(?<!<)<<(?!<)-?\s*(['\"]?)([A-Za-z_][\w-]*)\1", line))
    return "\n".join(out)


def _tokens(script: str) -> list[str]:
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=_PUNCT)
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        lexer.commenters = ""
        return list(lexer)
    except ValueError:
        found = re.findall(r"&&|\|\||[;|&\n()]|[<>]+&?|[^\s;|&<>()]+", script)
        return [token.strip("'\"") for token in found]


def _punct_kind(token: str) -> str | None:
    if not token or any(ch not in _PUNCT for ch in token):
        return None
    if token in (">&", "<&"):
        return "dup"
    if "<<" in token:
        return "heredoc"
    if ">" in token and "<" not in token:
        return "out"
    if "<" in token:
        return "in"
    return "sep"


@dataclass
class _Segment:
    words: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)


def _segments(tokens: list[str]) -> list[_Segment]:
    segments = [_Segment()]
    skip_next = ""
    for token in tokens:
        kind = _punct_kind(token)
        current = segments[-1]
        if skip_next and kind is None:
            target = token if skip_next in ("out", "in") else ""
            if target and target != "/dev/null" and not target.startswith("&") and not target.isdigit():
                (current.outputs if skip_next == "out" else current.inputs).append(target)
            skip_next = ""
            continue
        skip_next = ""
        if kind == "sep":
            segments.append(_Segment())
        elif kind in ("out", "in", "dup", "heredoc"):
            if current.words and current.words[-1] in ("1", "2"):
                current.words.pop()
            skip_next = "out" if kind == "dup" else kind
        else:
            current.words.append(token)
    return [segment for segment in segments if segment.words or segment.outputs or segment.inputs]


def _command_words(words: list[str]) -> list[str]:
    """Words without leading variable assignments and wrappers (``sudo``, ``env``, ``uv run``, ``npx``...)."""
    rest = list(words)
    while rest:
        head = posixpath.basename(rest[0])
        if re.match(r"^[A-Za-z_]\w*=", rest[0]) or head in _WRAPPERS:
            rest = rest[1:]
        elif head in _RUNNERS and len(rest) > 1 and rest[1] == "run":
            rest = _drop_options(rest[2:])
        elif head in ("npx", "bunx", "pnpx"):
            rest = _drop_options(rest[1:])
        else:
            break
    return rest


def _drop_options(words: list[str]) -> list[str]:
    """Words after a runner's own leading options (``uv run --frozen pytest`` → ``pytest``)."""
    position = 0
    while position < len(words) and words[position].startswith("-"):
        position += 1
    return words[position:]


def _positionals(args: list[str], value_options: frozenset[str] = _VALUE_OPTIONS) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--":
            continue
        if arg.startswith("-"):
            skip = arg in value_options
            continue
        if not arg.startswith("#"):
            out.append(arg)
    return out


def _test_runner(words: list[str]) -> str | None:
    """The test runner a command invokes, if any."""
    program = posixpath.basename(words[0]) if words else ""
    args = words[1:]
    if program in ("pytest", "py.test"):
        return "pytest"
    if re.match(r"^(?:python[\d.]*|py|pypy3?)$", program) and "-m" in args:
        module = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
        return module if module in ("pytest", "unittest", "nose2", "tox") else None
    first = args[0] if args else ""
    if program == "cargo" and first in ("test", "nextest", "llvm-cov"):
        return "cargo"
    if program == "go" and first == "test":
        return "go"
    if program in ("npm", "yarn", "pnpm", "bun") and (first == "test" or (first == "run" and "test" in args[1:2])):
        return "npm"
    if program in ("jest", "vitest", "mocha", "rspec", "phpunit", "tox", "nox", "ctest"):
        return program
    if program in ("dotnet", "mvn", "gradle", "./gradlew", "mix", "just", "make") and first in ("test", "check"):
        return f"{program} {first}"
    return None


def _python_script(args: list[str]) -> str | None:
    """The script a ``python`` command line runs; none for ``-c`` or ``-m``."""
    for arg in args:
        if arg in ("-c", "-m"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _word_effects(words: list[str], effects: _ShellEffects, depth: int) -> str | None:
    """Record what one simple command does. Returns the new directory for a ``cd``."""
    words = _command_words(words)
    if not words:
        return None
    program = posixpath.basename(words[0])
    args = words[1:]
    if not re.fullmatch(r"[\w.~+/][\w./~+-]*", words[0]):
        return None  # a group, a substitution or a stray word, not a program
    runner = _test_runner(words)
    if runner:
        effects.runner = effects.runner or runner
        effects.read_only = False
        targets = [arg.split("::")[0] for arg in _positionals(args) if "/" in arg or ".py" in arg]
        effects.reads.extend(arg for arg in targets if "..." not in arg and "=" not in arg)
        return None
    if program == "cd":
        return args[0] if args and args[0] != "-" else None
    if program == "git":
        _git_effects(args, effects)
    elif program not in _READ_ONLY or (program == "sed" and any(a.startswith(("-i", "--in-place")) for a in args)):
        effects.read_only = False
    _file_effects(program, words, args, effects, depth)
    return None


def _git_effects(args: list[str], effects: _ShellEffects) -> None:
    positional = _positionals(args, frozenset({"-C", "-c"}))
    sub = positional[0] if positional else ""
    if sub not in _GIT_READ_ONLY:
        effects.read_only = False
    paths = positional[1:]
    if sub == "mv" and len(paths) >= 2:
        effects.moves.extend((source, paths[-1]) for source in paths[:-1])
    elif sub == "rm":
        effects.deletes.extend(paths)


def _file_effects(program: str, words: list[str], args: list[str], effects: _ShellEffects, depth: int) -> None:
    family = {"egrep": "grep", "fgrep": "grep", "ag": "rg"}.get(program, program)
    plain = ("touch", "truncate", "tee", "rm", "unlink", "shred", "rmdir", "cat", "wc", "diff", "cmp")
    options = _PROGRAM_OPTIONS.get(family, _NO_OPTIONS if program in plain else _VALUE_OPTIONS)
    positional = _positionals(args, options)
    if program in _READERS:
        effects.reads.extend(arg for arg in positional if not re.fullmatch(r"[+-]?\d+", arg))
    elif program in ("grep", "egrep", "fgrep", "rg", "ag"):
        explicit = any(arg in ("-e", "-f", "--regexp", "--file") for arg in args)
        effects.reads.extend(positional if explicit else positional[1:])
    elif program == "sed":
        explicit = any(arg in ("-e", "-f", "--expression") for arg in args)
        files = positional if explicit else positional[1:]
        in_place = any(arg.startswith(("-i", "--in-place")) for arg in args)
        (effects.writes if in_place else effects.reads).extend(files)
    elif program in ("touch", "truncate", "tee"):
        effects.writes.extend(positional)
    elif program in ("rm", "unlink", "shred", "rmdir"):
        effects.deletes.extend(positional)
    elif program == "mv" and len(positional) >= 2:
        effects.moves.extend((source, positional[-1]) for source in positional[:-1])
    elif program == "cp" and len(positional) >= 2:
        effects.reads.extend(positional[:-1])
        effects.writes.append(positional[-1])
    elif re.match(r"^(?:python[\d.]*|py|pypy3?)$", program):
        script = _python_script(args)
        effects.reads.extend([script] if script else [])
    elif program in _INTERPRETERS:
        _interpreter_effects(program, args, positional, effects, depth)
    elif "/" in words[0] and program not in _READ_ONLY:
        effects.executed.append(words[0])


def _interpreter_effects(program: str, args: list[str], positional: list[str], effects: _ShellEffects,
                         depth: int) -> None:
    inline = next((args[i + 1] for i, arg in enumerate(args[:-1]) if re.fullmatch(r"-\w*c\w*", arg)), None)
    if program in ("bash", "sh", "zsh") and inline is not None:
        if depth < 2:
            _script_effects(inline, effects, depth + 1)
        return
    if program == "perl" and any(re.fullmatch(r"-\w*i\w*", arg) for arg in args):
        effects.writes.extend(positional[1:] if "-e" not in args else positional)
        return
    if positional and ("." in positional[0] or "/" in positional[0]) and "-e" not in args:
        effects.reads.append(positional[0])


def _script_effects(script: str, effects: _ShellEffects, depth: int = 0) -> None:
    """Parse a shell script into ``effects``, following ``cd`` so later relative paths are joined to it."""
    cd: str | None = None
    for segment in _segments(_tokens(_strip_heredocs(script[:20_000]))):
        before = (len(effects.reads), len(effects.writes), len(effects.deletes), len(effects.moves))
        new_dir = _word_effects(segment.words, effects, depth)
        effects.reads.extend(segment.inputs)
        effects.writes.extend(segment.outputs)
        if segment.outputs:
            effects.read_only = False
        if cd:
            _prefix_since(effects, before, cd)
        if new_dir:
            cd = new_dir if _is_abs(new_dir) or not cd else posixpath.join(cd, new_dir)


def _prefix_since(effects: _ShellEffects, before: tuple[int, int, int, int], cd: str) -> None:
    """Make paths recorded after a ``cd`` relative to that directory."""

    def fix(path: str) -> str:
        return path if _is_abs(path) else posixpath.join(cd, path)

    reads, writes, deletes, moves = before
    effects.reads[reads:] = [fix(p) for p in effects.reads[reads:]]
    effects.writes[writes:] = [fix(p) for p in effects.writes[writes:]]
    effects.deletes[deletes:] = [fix(p) for p in effects.deletes[deletes:]]
    effects.moves[moves:] = [(fix(a), fix(b)) for a, b in effects.moves[moves:]]


def _shell_command(value: Any) -> str:
    """The script of a shell call's input (``command``/``cmd`` as a string or an argv list)."""
    if isinstance(value, dict):
        for key in ("command", "cmd", "script", "commands"):
            if key in value:
                return _shell_command(value[key])
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        argv = [str(part) for part in value]
        if len(argv) >= 3 and posixpath.basename(argv[0]) in ("bash", "sh", "zsh") and argv[1] in ("-c", "-lc"):
            return argv[2]
        return shlex.join(argv)
    return ""


def _check_key(command: str) -> str:
    """A command line normalised for "same command" matching (output plumbing dropped)."""
    first = " ".join(command.split())
    first = re.sub(r"\s*\d?>&\d|\s*\|\s*(?:tail|head|tee|less|cat)\b.*$", "", first)
    return first.strip()


# --------------------------------------------------------------------------------------------------------- patches


@dataclass
class _PatchFile:
    path: str
    action: str  # add, update, delete
    added: int = 0
    removed: int = 0
    moved_to: str | None = None
    names: list[str] = field(default_factory=list)


def _patch_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "\n".join(part for part in value if isinstance(part, str))
    if isinstance(value, dict):
        for key in ("input", "patch", "command", "cmd", "content", "diff"):
            text = _patch_text(value.get(key))
            if "*** " in text:
                return text
    return ""


def _parse_patch(text: str) -> list[_PatchFile]:
    """Files of an ``apply_patch`` envelope (``*** Add/Update/Delete File:``, ``*** Move to:``)."""
    files: list[_PatchFile] = []
    added_lines: list[str] = []
    for line in text[:200_000].splitlines():
        header = re.match(r"\*\*\* (Add|Update|Delete) File:\s*(.+?)\s*$", line)
        if header:
            _close_patch_file(files, added_lines)
            files.append(_PatchFile(path=header.group(2), action=header.group(1).lower()))
        elif files and (move := re.match(r"\*\*\* Move to:\s*(.+?)\s*$", line)):
            files[-1].moved_to = move.group(1)
        elif files and line.startswith("+"):
            files[-1].added += 1
            added_lines.append(line[1:])
        elif files and line.startswith("-"):
            files[-1].removed += 1
    _close_patch_file(files, added_lines)
    return files


def _close_patch_file(files: list[_PatchFile], added_lines: list[str]) -> None:
    if files and added_lines:
        files[-1].names = _names("\n".join(added_lines))
    added_lines.clear()


# ---------------------------------------------------------------------------------------------------------- actions


@dataclass
class _Action:
    """One tool call, digested: its family, files, change hints and outcome."""

    index: int
    call: ToolCall
    family: str  # read, search, edit, write, patch, shell, task, plan, other, skip
    outcome: _Outcome
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    created: bool = False
    moves_only: bool = False
    deletes_only: bool = False
    hints: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    command: str | None = None
    shown: str = ""  # the command as displayed: heredoc bodies folded, the project directory dropped
    key: str = ""  # the command normalised for "same command" matching
    runner: str | None = None
    read_only_shell: bool = False
    label: str = ""
    description: str = ""  # the agent's own sentence for a shell call (``tool_input.description``)

    @property
    def is_edit(self) -> bool:
        return self.family in ("edit", "write", "patch") or (self.family == "shell" and bool(self.writes))

    @property
    def is_run(self) -> bool:
        return self.family == "shell" and bool(self.command)

    def same_check(self, other: _Action) -> bool:
        if not (self.is_run and other.is_run):
            return False
        if self.runner and self.runner == other.runner:
            return True
        return self.key == other.key


def _input_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            loaded = json.loads(value)
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return {}


def _family(name: str, raw_input: Any) -> str:
    lowered = name.lower()
    if lowered.startswith(_OWN_TOOL_PREFIXES):
        return "skip"
    if lowered == "exitplanmode":
        return "plan" if isinstance(_input_dict(raw_input).get("plan"), str) else "skip"
    for family, names in (
        ("read", _READ_TOOLS), ("search", _SEARCH_TOOLS), ("edit", _EDIT_TOOLS), ("write", _WRITE_TOOLS),
        ("shell", _SHELL_TOOLS), ("task", _TASK_TOOLS), ("skip", _SKIP_TOOLS),
    ):
        if lowered in names:
            return family
    if lowered == "apply_patch":
        return "patch"
    return "other"


def _digest(index: int, call: ToolCall, turn: Turn, earlier: Sequence[_Action], full: bool) -> _Action:
    """Digest one call. Calls outside the batch (``full`` false) only need their outcome when they ran a
    command (the bugfix rule looks at runs), so the others skip reading their response."""
    name = call.name if isinstance(call.name, str) else str(call.name or "")
    family = _family(name, call.input)
    command_like = family in ("shell", "other")
    outcome = _outcome(call.response, command_like) if full or family == "shell" else _Outcome()
    action = _Action(index=index, call=call, family=family, outcome=outcome, label=name or "tool")
    paths = _Paths(base=turn.cwd or call.cwd, anchor=call.cwd or turn.cwd)
    digest = {
        "read": _digest_read, "search": _digest_search, "edit": _digest_edit, "write": _digest_write,
        "patch": _digest_patch, "shell": _digest_shell,
    }.get(family)
    if digest is not None:
        digest(action, _input_dict(call.input), paths, earlier)
    return action


def _digest_read(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    raws = [data.get(key) for key in ("file_path", "absolute_path", "notebook_path", "path")]
    listed = data.get("paths")
    raws.extend(listed if isinstance(listed, list) else [])
    action.reads = paths.resolve_all(raws)
    action.hints = [f"read {_listing(action.reads)}"] if action.reads else []


def _digest_search(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    lowered = action.label.lower()
    where = data.get("path") or data.get("dir_path") or data.get("directory")
    pattern = data.get("pattern") if isinstance(data.get("pattern"), str) else None
    if lowered == "glob" and pattern:
        joined = posixpath.join(where, pattern) if isinstance(where, str) and where else pattern
        action.reads = paths.resolve_all([joined])
    else:
        action.reads = paths.resolve_all([where])
    action.hints = [_search_hint(lowered, data, pattern, action)]


def _search_hint(lowered: str, data: dict[str, Any], pattern: str | None, action: _Action) -> str:
    count = _match_count(action.call.response)
    suffix = f" → {count}" if count else ""
    place = f" in {action.reads[0]}" if action.reads and lowered != "glob" else ""
    if lowered in ("websearch", "google_web_search"):
        return f"web search: {_clip(str(data.get('query') or ''), 120)}"
    if lowered in ("webfetch", "web_fetch"):
        return f"fetched {_clip(str(data.get('url') or data.get('prompt') or ''), 160)}"
    if lowered in ("ls", "list_directory"):
        return f"listed {action.reads[0] if action.reads else 'the working directory'}{suffix}"
    if lowered == "glob":
        return f"glob `{_clip(pattern or '', 80)}`{suffix}"
    return f"searched for `{_clip(pattern or '', 80)}`{place}{suffix}"


def _match_count(response: Any) -> str | None:
    if isinstance(response, dict):
        for key, word in (("numFiles", "files"), ("numMatches", "matches"), ("numLines", "lines")):
            value = response.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return f"{value} {word}"
    return None


def _digest_edit(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    target = paths.resolve(data.get("file_path") or data.get("notebook_path") or data.get("path"))
    action.writes = [target] if target else []
    where = target or "a file"
    edits = data.get("edits") if isinstance(data.get("edits"), list) else None
    if edits is not None:
        pairs = [(e.get("old_string"), e.get("new_string")) for e in edits if isinstance(e, dict)]
        old = "\n".join(str(o or "") for o, _ in pairs)
        new = "\n".join(str(n or "") for _, n in pairs)
        action.hints.append(f"{len(edits)} edits in {where}")
    elif "notebook_path" in data or "cell_id" in data or "new_source" in data:
        old, new = "", str(data.get("new_source") or "")
        action.hints.append(f"{data.get('edit_mode') or 'replace'} notebook cell in {where}")
    else:
        old, new = str(data.get("old_string") or ""), str(data.get("new_string") or "")
        everywhere = " (all occurrences)" if data.get("replace_all") else ""
        action.hints.append(f"replaced {_lines(old)} lines with {_lines(new)} lines in {where}{everywhere}")
    before = set(_names(old))
    action.names = [name for name in _names(new) if name not in before]
    touched = [name for name in _names(new) if name in before]
    if action.names:
        action.hints.append(f"adds {_listing(action.names, 3)}")
    elif touched:
        action.hints.append(f"touches {_listing(touched, 3)}")


def _digest_write(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    target = paths.resolve(data.get("file_path") or data.get("path") or data.get("absolute_path"))
    action.writes = [target] if target else []
    content = str(data.get("content") or "")
    action.created = _is_new_file(action.call.response, target, earlier)
    verb = "created" if action.created else "rewrote"
    action.hints.append(f"{verb} {target or 'a file'} ({_lines(content)} lines)")
    action.names = _names(content)
    if action.names:
        action.hints.append(f"defines {_listing(action.names, 3)}")


def _is_new_file(response: Any, target: str | None, earlier: Sequence[_Action]) -> bool:
    """A Write creates a file when the response says so, or (unsaid) when the turn never touched it before."""
    if isinstance(response, dict) and response.get("type") in ("create", "update"):
        return response["type"] == "create"
    text = _response_text(response)[:300].lower()
    if "created" in text or "new file" in text:
        return True
    if "updated" in text or "overwrote" in text or "overwritten" in text:
        return False
    return not any(target and (target in a.reads or target in a.writes) for a in earlier)


def _digest_patch(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    raw = action.call.input
    files = _parse_patch(_patch_text(raw if not data else data))
    _apply_patch_files(action, files, paths)


def _apply_patch_files(action: _Action, files: list[_PatchFile], paths: _Paths) -> None:
    for item in files:
        path = paths.resolve(item.path) or item.path
        action.writes.append(path)
        if item.moved_to:
            moved = paths.resolve(item.moved_to) or item.moved_to
            action.writes.append(moved)
            action.hints.append(f"moved {path} → {moved}")
        if item.action == "add":
            action.hints.append(f"added {path} (+{item.added})")
        elif item.action == "delete":
            action.hints.append(f"deleted {path}")
        elif item.added or item.removed or not item.moved_to:
            action.hints.append(f"updated {path} (+{item.added}/-{item.removed})")
        action.names.extend(item.names)
    action.writes = _unique(action.writes)
    action.names = _unique(action.names)
    if action.names:
        action.hints.append(f"adds {_listing(action.names, 3)}")
    action.created = bool(files) and all(item.action == "add" for item in files)
    action.moves_only = bool(files) and all(item.moved_to and not (item.added or item.removed) for item in files)


def _digest_shell(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    raw = action.call.input
    command = _shell_command(data if data else raw)
    action.command = command.strip() or None
    if not action.command:
        return
    action.shown = _display_command(action.command, paths.base)
    action.key = _check_key(action.command)
    action.description = _shell_description(data)
    workdir = data.get("workdir") or data.get("directory") or data.get("cwd")
    if isinstance(workdir, str) and workdir:
        paths = _Paths(base=paths.base, anchor=_join(paths, workdir))
    if "*** Begin Patch" in command or re.search(r"^\*\*\* (?:Add|Update|Delete) File:", command, re.MULTILINE):
        action.family = "patch"
        _apply_patch_files(action, _parse_patch(command), paths)
        return
    effects = _ShellEffects()
    _script_effects(command, effects)
    _apply_shell_effects(action, effects, paths)


def _shell_description(data: dict[str, Any]) -> str:
    """The agent's one-line account of a shell call (``tool_input.description``), clipped; empty when none."""
    value = data.get("description")
    return _clip(value, DESCRIPTION_MAX) if isinstance(value, str) else ""


def _subject(action: _Action, limit: int) -> tuple[str, bool]:
    """How a title names a command: the command as code when it fits in ``limit`` on one line, else the
    agent's description of it when there is one. The flag tells whether the description was used."""
    command = (action.command or "").strip()
    if action.description and (len(action.shown) > limit or "\n" in command):
        return action.description[0].upper() + action.description[1:], True
    return _code(action.shown, limit), False


def _purpose(action: _Action) -> list[str]:
    return [f"{_PURPOSE}{action.description}"] if action.description else []


def _display_command(command: str, base: str | None) -> str:
    """The first line of a command, with ``"$(cat <<'EOF' ... EOF)"`` shown as its first body line and paths
    under the project directory written relative to it."""
    folded = re.sub(
        r"\$\(cat <<-?\s*(['\"]?)(\w+)\1\s*\n\s*([^\n]*)\n.*?\n\s*\2\s*\n?\s*\)", r"\3", command, flags=re.DOTALL
    )
    if base and _is_abs(base) and len(base) > 1:
        prefix = re.escape(base.rstrip("/") + "/")
        folded = re.sub(rf"(^|[;&|(]\s*){prefix}", r"\1./", folded)
        folded = folded.replace(base.rstrip("/") + "/", "")
    return " ".join(folded.strip().splitlines()[0].split()) if folded.strip() else ""


def _join(paths: _Paths, workdir: str) -> str:
    if _is_abs(workdir) or not paths.anchor:
        return workdir
    return posixpath.join(paths.anchor, workdir)


def _apply_shell_effects(action: _Action, effects: _ShellEffects, paths: _Paths) -> None:
    moved = [(paths.resolve(a) or a, paths.resolve(b) or b) for a, b in effects.moves]
    deleted = paths.resolve_all(effects.deletes)
    written = paths.resolve_all(effects.writes)
    executed = [path for path in paths.resolve_all(effects.executed) if not _is_abs(path)]
    action.reads = _unique([*paths.resolve_all(effects.reads), *executed])
    action.writes = _unique([*written, *deleted, *(p for pair in moved for p in pair)])
    action.runner = effects.runner
    action.moves_only = bool(moved) and not written and not deleted
    action.deletes_only = bool(deleted) and not written and not moved
    action.read_only_shell = effects.read_only and not action.writes and not effects.runner
    action.hints.extend(f"moved {a} → {b}" for a, b in moved[:LIST_MAX])
    if deleted:
        action.hints.append(f"deleted {_listing(deleted)}")
    if written:
        action.hints.append(f"wrote {_listing(written)}")


# -------------------------------------------------------------------------------------------------------- timeline


def _same_call(a: ToolCall, b: ToolCall) -> bool:
    if a is b:
        return True
    if a.tool_use_id or b.tool_use_id:
        return a.tool_use_id == b.tool_use_id
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - odd payloads may refuse comparison
        return False


def _timeline(turn: Turn, calls: Sequence[ToolCall]) -> tuple[list[ToolCall], list[int]]:
    """The turn's calls in order with ``calls`` placed in it (appended when ``turn.tools`` lacks them)."""
    tools = list(turn.tools or ())
    count = len(calls)
    if count and count <= len(tools) and all(_same_call(c, t) for c, t in zip(calls, tools[-count:], strict=True)):
        return tools, list(range(len(tools) - count, len(tools)))
    positions: list[int] = []
    floor = 0
    for call in calls:
        found = next((i for i in range(floor, len(tools)) if _same_call(call, tools[i])), None)
        if found is None:
            tools.append(call)
            found = len(tools) - 1
        positions.append(found)
        floor = found + 1
    return tools, positions


@dataclass(frozen=True)
class _FixEvidence:
    failure: _Action
    validation: _Action | None  # None: a candidate (no re-run yet)


def _fix_evidence(edit: _Action, actions: Sequence[_Action]) -> _FixEvidence | None:
    """Apply the module's bugfix rule to ``edit`` given every digested action of the turn."""
    runs = [a for a in actions if a.is_run]
    before = [a for a in runs if a.index < edit.index]
    after = [a for a in runs if a.index > edit.index]
    candidate: _FixEvidence | None = None
    seen: list[_Action] = []
    for failure in reversed(before):
        if not failure.outcome.failed or failure.outcome.rejected or any(failure.same_check(s) for s in seen):
            seen.append(failure)
            continue
        seen.append(failure)
        if any(r.outcome.ok and r.same_check(failure) for r in before if r.index > failure.index):
            continue
        rerun = next((r for r in after if r.same_check(failure)), None)
        if rerun is not None and rerun.outcome.ok:
            return _FixEvidence(failure, rerun)
        if rerun is None and (failure.runner or failure.outcome.tests) and candidate is None:
            candidate = _FixEvidence(failure, None)
    return candidate


# ------------------------------------------------------------------------------------------------------- builders


@dataclass
class _Draft:
    type: str
    title: str
    action_text: str
    facts: list[str] = field(default_factory=list)
    outcome_text: str = ""
    concepts: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    files_modified: list[str] = field(default_factory=list)


def _finish(draft: _Draft, turn: Turn) -> Observation:
    """Caps, prompt-derived subtitle and narrative, ordered concepts."""
    request = _first_sentence(turn.prompt, 150)
    subtitle = _clip(request, SUBTITLE_MAX) if request else None
    body = draft.action_text.rstrip(".")
    lead = f'For the request "{request}", the agent {body}.' if request else f"The agent {body}."
    narrative = " ".join(part for part in (lead, draft.outcome_text) if part)
    concepts = tuple(c for c in CONCEPTS if c in draft.concepts)
    return Observation(
        type=draft.type, title=_clip(draft.title, TITLE_MAX), subtitle=subtitle,
        narrative=_clip(narrative, TEXT_MAX), facts=tuple(_clip(f, FACT_MAX) for f in _unique(draft.facts))[:FACTS_MAX],
        concepts=concepts, files_read=tuple(_unique(draft.files_read)),
        files_modified=tuple(_unique(draft.files_modified)),
    )


def _run_fact(action: _Action) -> str:
    return f"ran {_code(action.shown, 100)} → {action.outcome.label()}"


def _outcome_facts(outcome: _Outcome) -> list[str]:
    facts = []
    if outcome.failing_tests:
        facts.append(f"failing tests: {', '.join(outcome.failing_tests)}")
    if outcome.error:
        facts.append(f"error: {outcome.error}")
    if outcome.warning and outcome.warning != outcome.error:
        facts.append(f"warning: {outcome.warning}")
    return facts


def _gotcha(outcome: _Outcome) -> list[str]:
    return ["gotcha"] if outcome.warning else []


def _edit_draft(action: _Action, evidence: _FixEvidence | None) -> _Draft:
    files = action.writes
    target = _listing(files, 2) if files else "a file"
    if action.moves_only:
        kind, verb = "refactor", "Moved"
    elif action.created and action.family in ("write", "patch"):
        kind, verb = "feature", "Created"
    elif evidence is not None:
        kind, verb = "bugfix", "Fixed"
    else:
        kind, verb = "change", "Deleted" if action.deletes_only else "Edited"
    detail = _added(action.names, f"{verb} {target}")
    if action.moves_only and action.hints:
        title = action.hints[0][0].upper() + action.hints[0][1:]
    elif action.family == "shell" and kind == "change" and not action.deletes_only:
        title = f"Changed {target} via {_code(action.shown, 40)}"
    elif evidence is not None and kind == "bugfix" and not detail:
        title = f"Fixed {target} after failing {_code(evidence.failure.shown, 30)}"
    else:
        title = f"{verb} {target}{detail}"
    adding = f", adding {_listing(action.names, 3)}" if action.names else ""
    draft = _Draft(
        type=kind, title=title, action_text=f"{verb.lower()} {target}{adding}", facts=list(action.hints),
        concepts=["what-changed"], files_read=list(action.reads), files_modified=list(files),
    )
    if action.command:
        draft.facts[:0] = [_run_fact(action), *_purpose(action)]
    if evidence is not None and kind == "bugfix":
        _add_fix(draft, evidence)
    return draft


def _added(names: Sequence[str], title: str) -> str:
    """``: added a, b (+3 more)``, naming one only when two would not fit a title after ``title``."""
    detail = ""
    for shown in (2, 1):
        detail = f": added {_listing(names, shown)}" if names else ""
        if len(title) + len(detail) <= TITLE_MAX:
            break
    return detail


def _add_fix(draft: _Draft, evidence: _FixEvidence) -> None:
    failure = evidence.failure
    draft.concepts.append("problem-solution")
    draft.facts.append(f"after failure: {_code(failure.shown, 80)} → {failure.outcome.label()}")
    draft.facts.extend(f"fixes {fact}" for fact in _outcome_facts(failure.outcome)[:1])
    before = f"{_code(failure.shown)} had failed ({failure.outcome.label()}) before this edit"
    if evidence.validation is None:
        draft.outcome_text = f"{before}; it has not been re-run since."
        return
    check = evidence.validation
    draft.facts.append(f"verified: {_code(check.shown, 80)} → {check.outcome.label()}")
    if check.outcome.tests:
        draft.facts.append("tests passed")
    draft.outcome_text = f"{before} and passed afterwards ({check.outcome.label()})."


def _shell_draft(action: _Action, actions: Sequence[_Action]) -> _Draft:
    outcome = action.outcome
    shown, described = _subject(action, 50)
    ran = shown if described else f"Ran {shown}"
    draft = _Draft(
        type="discovery", title=ran, action_text=f"ran {_code(action.shown, 100)}",
        facts=[_run_fact(action), *_purpose(action), *_outcome_facts(outcome)], concepts=_gotcha(outcome),
        files_read=list(action.reads),
    )
    if outcome.tests:
        draft.title = f"{ran}: {outcome.tests}"
        ended = "tests interrupted" if outcome.interrupted and not outcome.tests_failed else "tests failed"
        draft.facts.append(ended if outcome.failed else "tests passed")
        if outcome.ok and any(a.same_check(action) and a.outcome.failed for a in actions if a.index < action.index):
            draft.concepts.extend(["problem-solution", "what-changed"])
            draft.outcome_text = "It passed after an earlier failing run in the same turn."
    if outcome.interrupted:
        draft.title = f"Command interrupted: {shown}"
    elif outcome.failed_beyond_tests:  # failed with no failing counts to show it: say so, never "Ran …: 4 passed"
        code = f" (exit {outcome.exit_code})" if outcome.exit_code not in (None, 0) else ""
        draft.title = f"Command failed{code}: {shown}"
    commit = re.search(r"^\[[^\]\n]+\] (.+)$", outcome.text[:2000], re.MULTILINE)
    if commit and "commit" in (action.command or ""):
        message = _clip(commit.group(1), 160)
        draft.facts.append(f"committed: {message}")
        if outcome.ok:  # the commit message says what the work was better than the command line does
            draft.type, draft.title = "change", _clip(f"Committed: {message}", TITLE_MAX)
    if not draft.outcome_text:
        draft.outcome_text = f"Outcome: {outcome.label()}." if outcome.status != "unknown" else ""
    return draft


def _read_group_draft(group: Sequence[_Action]) -> _Draft:
    files = _unique(path for a in group for path in a.reads)
    only_reads = all(a.family == "read" for a in group)
    facts: list[str] = []
    for action in group:
        facts.extend([_run_fact(action), *_purpose(action)] if action.command else action.hints)
        facts.extend(_outcome_facts(action.outcome) if action.outcome.failed else [])
    subject, described = _subject(group[0], 60) if len(group) == 1 and group[0].command else ("", False)
    if only_reads and files:
        title = f"Read {_listing(files, 3)}"
    elif described:  # one lookup whose command is too long to show: the agent's account of it
        title = subject
    elif len(group) == 1 and facts:
        title = facts[0][0].upper() + facts[0][1:]
    else:
        title = f"Explored {_listing(files, 3)}" if files else f"Explored with {len(group)} lookups"
    failed = [a for a in group if a.outcome.failed]
    outcome_text = f"{len(failed)} of the lookups failed." if failed else ""
    commands = [_code(a.shown, 50) for a in group if a.command]
    what = " and ".join(part for part in (
        f"looked at {_listing(files)}" if files else "", f"ran {_listing(commands, 3)}" if commands else "",
    ) if part) or "looked things up"
    return _Draft(
        type="discovery", title=title, action_text=what, facts=facts, outcome_text=outcome_text,
        concepts=["how-it-works", *(c for a in group for c in _gotcha(a.outcome))], files_read=files,
    )


def _task_draft(action: _Action) -> _Draft:
    data = _input_dict(action.call.input)
    description = _clip(str(data.get("description") or data.get("prompt") or "a sub-task"), 70)
    result = _first_sentences(action.outcome.text, 300)
    facts = [f"delegated: {description}"] + ([f"result: {result}"] if result else [])
    return _Draft(
        type="discovery", title=f"Delegated: {description}", action_text=f"delegated a sub-task ({description})",
        facts=facts, outcome_text=f"The sub-agent reported: {result}" if result else "", concepts=["how-it-works"],
    )


def _plan_draft(action: _Action) -> _Draft:
    plan = str(_input_dict(action.call.input).get("plan") or "")
    first = _first_sentence(plan, 70) or "plan"
    steps = [_clip(re.sub(r"^\s*(?:[-*+]|\d+\.)\s+", "", line), 160)
             for line in plan.splitlines() if re.match(r"^\s*(?:[-*+]|\d+\.)\s+\S", line)]
    return _Draft(
        type="decision", title=f"Plan: {first}", action_text="settled on a plan",
        facts=steps[:FACTS_MAX], outcome_text=_first_sentences(plan, 300),
    )


def _other_draft(action: _Action) -> _Draft:
    first = next((line.strip() for line in action.outcome.text.splitlines() if line.strip()), "")
    facts = [f"{action.label} returned: {_clip(first, 200)}"] if first else []
    facts.extend(_outcome_facts(action.outcome) if action.outcome.failed else [])
    title = f"{action.label} failed" if action.outcome.failed else f"Used {action.label}"
    return _Draft(
        type="discovery", title=title, action_text=f"used {action.label}", facts=facts,
        concepts=_gotcha(action.outcome), files_read=list(action.reads),
    )


def _failed_edit_draft(action: _Action) -> _Draft:
    target = _listing(action.writes, 2) if action.writes else "a file"
    ended = "interrupted" if action.outcome.interrupted else "failed"
    return _Draft(
        type="discovery", title=f"Edit of {target} {ended}", action_text=f"tried to change {target}",
        facts=[*action.hints, *_outcome_facts(action.outcome)], outcome_text="The tool reported an error.",
        files_read=list(action.writes),
    )


# ---------------------------------------------------------------------------------------------------------- observe


def _is_trivial(action: _Action) -> bool:
    """Skipped: no-information tools, and non-edit calls with neither output nor files."""
    if action.family == "skip":
        return True
    if action.family == "plan":
        return False
    if action.is_edit or action.outcome.failed:
        return False
    return not action.outcome.text.strip() and not action.reads and not action.writes


def _is_lookup(action: _Action) -> bool:
    if action.outcome.failed and action.family not in ("read", "search"):
        return False
    return action.family in ("read", "search") or (action.family == "shell" and action.read_only_shell)


def _validations(edits: Sequence[tuple[_Action, _FixEvidence | None]], batch: set[int]) -> dict[int, int]:
    """Passing runs in this batch that confirm an edit's fix → the last edit they confirm (folded into it)."""
    folded: dict[int, int] = {}
    for edit, evidence in edits:
        if evidence and evidence.validation and evidence.validation.index in batch:
            folded[evidence.validation.index] = edit.index
    return folded


def _observe(turn: Turn, calls: Sequence[ToolCall]) -> list[Observation]:
    tools, positions = _timeline(turn, calls)
    actions: list[_Action] = []
    wanted = set(positions)
    for index, call in enumerate(tools):
        actions.append(_digest(index, call, turn, actions, index in wanted))
    batch = [actions[p] for p in positions]
    edits = [(a, _fix_evidence(a, actions)) for a in batch if a.is_edit and not a.outcome.failed]
    evidence = {a.index: e for a, e in edits}
    folded = _validations(edits, {a.index for a in batch})
    drafts: list[_Draft] = []
    group: list[_Action] = []
    for action in batch:
        if _is_trivial(action) or action.index in folded:
            continue
        if _is_lookup(action):
            group.append(action)
            continue
        if group:
            drafts.append(_read_group_draft(group))
            group = []
        drafts.append(_draft_for(action, evidence.get(action.index), actions))
    if group:
        drafts.append(_read_group_draft(group))
    return [_finish(draft, turn) for draft in drafts]


def _draft_for(action: _Action, evidence: _FixEvidence | None, actions: Sequence[_Action]) -> _Draft:
    if action.is_edit and action.outcome.failed and action.family != "shell":
        return _failed_edit_draft(action)
    if action.is_edit and not action.outcome.failed:
        return _edit_draft(action, evidence)
    if action.family == "shell":
        draft = _shell_draft(action, actions)
        draft.files_modified = [] if action.outcome.interrupted else list(action.writes)
        return draft
    if action.family == "task":
        return _task_draft(action)
    if action.family == "plan":
        return _plan_draft(action)
    return _other_draft(action)


# -------------------------------------------------------------------------------------------------------- summarize


def _joined(parts: Iterable[str], limit: int = 800) -> str | None:
    text = "; ".join(_unique(p for p in parts if p))
    return _clip(text, limit) or None


def _next_steps(message: str | None) -> str | None:
    sentences = [s for s in _SENTENCE_END.split(_plain(message)) if _NEXT_CUE.search(s)]
    return _clip(" ".join(sentences), 400) or None


def _summary(turn: Turn, observations: Sequence[Observation]) -> Summary | None:
    message = turn.last_assistant_message if isinstance(turn.last_assistant_message, str) else None
    prompt = turn.prompt if isinstance(turn.prompt, str) else None
    if not (prompt and prompt.strip()) and not observations and not (message and message.strip()):
        return None
    looked = [o for o in observations if o.type == "discovery"]
    done = [o for o in observations if o.type in ("bugfix", "feature", "change", "refactor")]
    learned = [o.title for o in observations if o.type in ("bugfix", "decision")]
    learned += [fact for o in observations for fact in o.facts
                if _LEARNED_CUE.search(fact) and fact not in ("tests passed", "tests failed")
                and not fact.startswith((*_NAME_FACTS, _PURPOSE))][:6]
    return Summary(
        request=_clip(prompt, 300) or None,
        investigated=_joined(o.title for o in looked),
        learned=_joined(learned),
        completed=_joined(o.title for o in done),
        next_steps=_next_steps(message),
        notes=_first_sentences(message, 400) or None,
        files_read=tuple(_unique(path for o in observations for path in o.files_read)),
        files_modified=tuple(_unique(path for o in observations for path in o.files_modified)),
    )


class OfflineExtractor:
    """The rule-based :class:`~memcairn.capture.records.Compressor`: no model, no cost, same output every time."""

    name = "offline"

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        """One observation per meaningful call (runs of lookups merged); see the module docstring for types."""
        return Compressed(observations=_observe(turn, list(calls or ())))

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        """The turn's summary from its prompt, observations and the agent's last message."""
        return Compressed(summary=_summary(turn, list(observations or ())))
