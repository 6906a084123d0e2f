"""How a call ended: the readable text of any response shape, exit codes, flags, test counts, error lines."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from memcairn.capture.offline.runners import _failing_tests, _test_summary
from memcairn.capture.offline.text import ERROR_MAX, _clip

_SCAN_HALF = 12_000  # how much of a response's head and tail is scanned for outcomes


_EXIT_CODE = re.compile(
    r"(?:^|\n)\s*(?:Error:\s*)?(?:exit code|exit status|process exited with code)[:\s]\s*(-?\d+)", re.IGNORECASE
)
_ERROR_LINE = re.compile(
    r"\b(?:error|fatal)(?:\[\w+\])?:|\berror\b|command not found|no such file or directory|permission denied"
    r"|\bFAILED\b|panicked at|\bexception\b|cannot find|not found|^\*\* \(\w+",
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


def response_text(response: Any) -> str:
    """The readable text of a tool response of any shape (head and tail kept when huge)."""
    return _response_text(response)


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
        if line and not _EXIT_CODE.match("\n" + line) and not re.search(r"\b\d+ (?:passed|failed|failures?)\b", line)
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


def _output_gist(text: str, limit: int) -> str:
    """What a successful command printed, in brief: its first meaningful line and, when different, its last
    (where most tools put their result: ``Created issue: app-12``, ``Generated app``). Progress dots, bare
    labels and harness framing are not meaningful."""
    lines = [line.strip() for line in text.splitlines()[:400] + text.splitlines()[-50:]]
    meaningful = [line for line in lines if len(line) > 2 and not _HARNESS_LINE.match(line)
                  and re.search(r"[A-Za-z0-9]", line) and not re.fullmatch(r"[.\-=*#~+_ ]+\S{0,3}", line)]
    if not meaningful:
        return ""
    first, last = meaningful[0], meaningful[-1]
    if first == last:
        return _clip(first, limit)
    head = _clip(first, max(limit // 2, limit - len(last) - 3))
    return _clip(f"{head} … {last}", limit)

