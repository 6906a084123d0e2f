"""Test runners' result lines: pytest, cargo test, jest/vitest, go test, unittest, and failing test names."""

from __future__ import annotations

import re
from collections.abc import Iterable

from memcairn.capture.offline.text import _clip, _unique

_SUMMARY_LINE_MAX = 400  # result lines of test runners are short; longer lines are not searched for one


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
    """A test runner's result line: pytest, cargo test, jest/vitest, go test, unittest, ExUnit (``mix test``)."""
    for parser in (_cargo_summary, _jest_summary, _unittest_summary, _pytest_summary, _go_summary, _exunit_summary):
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


def _exunit_summary(text: str) -> tuple[str, bool] | None:
    """``14 doctests, 65 tests, 0 failures`` (also ``1 property``, ``(3 excluded)``, ``2 invalid``)."""
    for line in reversed(_short_lines(text)):
        match = re.match(r"\s*(?:(\d+) doctests?, )?(?:(\d+) propert(?:y|ies), )?(\d+) tests?, (\d+) failures?"
                         r"(?:, (\d+) invalid)?", line)
        if match:
            doctests, properties, tests, failures, invalid = (int(g or 0) for g in match.groups())
            total = doctests + properties + tests
            passed = max(total - failures - invalid, 0)
            pairs = [(str(n), word) for n, word in ((failures, "failed"), (invalid, "errors"), (passed, "passed"))
                     if n or (word == "passed" and not failures + invalid)]
            return _counts(pairs)
    return None


def _failing_tests(text: str) -> list[str]:
    """Names of failing tests: pytest, go, cargo, and ExUnit's ``  1) test name (Module)``."""
    found = re.findall(r"^(?:FAILED|ERROR) (\S+)|^--- FAIL: (\S+)|^test (\S+) \.\.\. FAILED"
                       r"|^\s+\d+\) test (.+?) \([\w.]+\)$", text, re.MULTILINE)
    return _unique(_clip(next(name for name in group if name), 80) for group in found)[:3]
