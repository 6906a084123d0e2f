"""The ``claude`` CLI in headless mode as a model transport, run in a process group of its own with bounded output."""

from __future__ import annotations

import json
import os
import re
import select
import selectors
import signal
import subprocess
import tempfile
import time
from typing import IO, Any

from memcairn.capture.llm.transport import (
    MAX_BODY_BYTES,
    READ_CHUNK,
    ClientUnavailable,
    ReplyFailed,
    estimate_tokens,
    one_line,
    usage_int,
)
from memcairn.capture.records import CompressionFailed, Usage
from memcairn.wire.config import Settings

CLAUDE_CLI_DEFAULT_MODEL = "haiku"

# Set in the environment of a ``claude`` child process. The hook runner skips every event while it is set, so
# the child session (which loads the person's settings, hooks included) never feeds memcairn's own capture.
CAPTURE_CHILD_ENV = "MEMCAIRN_CAPTURE_CHILD"

_CLI_AUTH_RE = re.compile(r"log ?in|authenticat|api key|unauthori[sz]ed|oauth|credentials", re.IGNORECASE)
_CLI_QUOTA_RE = re.compile(r"limit|quota|\brate\b|rate_|credit|overloaded", re.IGNORECASE)


def cli_failure(text: str, usage: Usage | None = None) -> ReplyFailed:
    """The failure a ``claude`` error message stands for: auth, quota, else error."""
    detail = f"claude failed: {one_line(text) or 'no message'}"
    if _CLI_AUTH_RE.search(text):
        return ReplyFailed("auth", detail, usage)
    if _CLI_QUOTA_RE.search(text):
        return ReplyFailed("quota", detail, usage)
    return ReplyFailed("error", detail, usage)


class ClaudeCliClient:
    """``claude -p --output-format json`` with the user message on stdin, the system prompt replaced, one turn
    and no tools. Runs in the temporary directory (no project instructions are loaded) with
    ``MEMCAIRN_CAPTURE_CHILD=1`` so its own hooks are ignored by memcairn."""

    name = "claude-cli"

    def __init__(self, settings: Settings, *, timeout: float | None = None) -> None:
        self.executable = settings.claude_cli.strip() or "claude"
        self.model = settings.llm_model.strip() or CLAUDE_CLI_DEFAULT_MODEL
        self.timeout = float(timeout if timeout is not None else settings.llm_timeout_seconds)

    def argv(self, system: str) -> list[str]:
        return [
            self.executable, "-p", "--output-format", "json", "--model", self.model, "--system-prompt", system,
            # ``--tools ""`` is the CLI's own "no tools at all": a deny list names only the tools of the version
            # it was written for (2.1.332 still offered six others, ToolSearch and its deferred tools among them)
            "--max-turns", "1", "--tools", "", "--strict-mcp-config",
        ]

    @staticmethod
    def child_env() -> dict[str, str]:
        env = dict(os.environ)
        env[CAPTURE_CHILD_ENV] = "1"
        # A claude started from inside a Claude Code session would otherwise refuse to run nested.
        env.pop("CLAUDECODE", None)
        return env

    def complete(self, system: str, user: str, max_tokens: int) -> tuple[str, Usage]:
        try:
            done = self._run(system, user)
        except subprocess.TimeoutExpired:
            raise CompressionFailed("timeout", f"claude did not answer within {self.timeout:g} s") from None
        except (FileNotFoundError, NotADirectoryError):
            raise ClientUnavailable("error", f"claude executable not found ({self.executable!r}): "
                                             "set claude_cli") from None
        except PermissionError:
            raise ClientUnavailable("error", f"claude executable {self.executable!r} cannot be run: "
                                             "set claude_cli") from None
        except OSError as exc:
            raise CompressionFailed("error", f"cannot run claude ({self.executable!r}): {exc}") from None
        result = _cli_result(done.stdout)
        if result is None:
            if done.returncode != 0:
                raise cli_failure(done.stderr or done.stdout or f"exit status {done.returncode}")
            text = done.stdout.strip()
            return text, Usage(self.name, self.model, estimate_tokens(system, user), estimate_tokens(text))
        text = str(result.get("result") or "")
        usage = self._usage(result, system, user, text)
        if result.get("is_error") or done.returncode != 0:
            message = text or done.stderr or str(result.get("subtype") or f"exit status {done.returncode}")
            raise cli_failure(message, usage)
        if result.get("subtype") not in (None, "success"):
            raise ReplyFailed("error", f"claude stopped with {result.get('subtype')}", usage)
        return text, usage

    def _run(self, system: str, user: str) -> subprocess.CompletedProcess[str]:
        """Run ``claude`` in a process group of its own: on a timeout, or output past ``MAX_BODY_BYTES``, the
        whole group is killed, so a wrapper script's node process (or anything else it started) does not
        linger, still holding the pipes open."""
        with subprocess.Popen(
            self.argv(system), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.child_env(), cwd=tempfile.gettempdir(), start_new_session=True,
        ) as process:
            try:
                stdout, stderr = _exchange(process, user.encode("utf-8"), self.timeout, MAX_BODY_BYTES)
            except BaseException:  # the timeout, too much output, or the worker stopping mid-call
                _kill_group(process)
                raise
        return subprocess.CompletedProcess(process.args, process.returncode, _cli_text(stdout), _cli_text(stderr))

    def _usage(self, result: dict[str, Any], system: str, user: str, text: str) -> Usage:
        model_usage = result.get("modelUsage")
        model = next(iter(model_usage), self.model) if isinstance(model_usage, dict) and model_usage else self.model
        raw = result.get("usage") if isinstance(result.get("usage"), dict) else {}
        if not raw:
            return Usage(self.name, model, estimate_tokens(system, user), estimate_tokens(text))
        tokens_in = sum(usage_int(raw.get(key)) for key in
                        ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        return Usage(self.name, model, tokens_in, usage_int(raw.get("output_tokens")))


def _exchange(process: subprocess.Popen[bytes], data: bytes, timeout: float, limit: int) -> tuple[bytes, bytes]:
    """``process.communicate(data, timeout)`` with the output bounded: a CLI run away (or a wrapper catting a
    log) cannot fill memory. More than ``limit`` bytes on stdout fails the call, as a body that large fails an
    HTTP call; stderr past ``limit`` is dropped (it only ever explains a failure).

    Raises:
        subprocess.TimeoutExpired: the process did not finish within ``timeout`` seconds.
        CompressionFailed: ``error``, stdout went past ``limit``.
    """
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    deadline = time.monotonic() + timeout
    output = {process.stdout: bytearray(), process.stderr: bytearray()}
    pending = memoryview(data)
    with selectors.DefaultSelector() as selector:
        for stream in output:
            selector.register(stream, selectors.EVENT_READ)
        if pending:
            selector.register(process.stdin, selectors.EVENT_WRITE)
        else:
            process.stdin.close()
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(process.args, timeout)
            for key, _ in selector.select(remaining):
                if key.fileobj is process.stdin:
                    pending = _feed(selector, process.stdin, pending)
                    continue
                chunk = os.read(key.fd, READ_CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                kept = output[key.fileobj]
                if key.fileobj is process.stdout and len(kept) + len(chunk) > limit:
                    raise CompressionFailed("error", f"claude printed more than {limit:,} bytes (MAX_BODY_BYTES, "
                                                     "the bound on one answer); its output was dropped")
                kept += chunk[:max(limit - len(kept), 0)]
    try:
        process.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:  # closed its pipes yet went on running
        raise subprocess.TimeoutExpired(process.args, timeout) from None
    return bytes(output[process.stdout]), bytes(output[process.stderr])


def _feed(selector: selectors.BaseSelector, stdin: IO[bytes], pending: memoryview) -> memoryview:
    """Write the next piece of ``pending`` to ``stdin`` (a pipe ready for it: at most ``PIPE_BUF`` bytes, which
    never block); closed once all is written, or when the process stopped reading."""
    try:
        written = os.write(stdin.fileno(), pending[:select.PIPE_BUF])
    except BrokenPipeError:
        written = len(pending)
    pending = pending[written:]
    if not pending:
        selector.unregister(stdin)
        try:
            stdin.close()
        except BrokenPipeError:
            pass
    return pending


def _cli_text(raw: bytes) -> str:
    """The CLI's output as text, as ``text=True`` would give it: UTF-8 (a broken byte spoils one character) with
    universal newlines."""
    return raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` and everything in its process group, then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def _cli_result(stdout: str) -> dict[str, Any] | None:
    """The result object of ``--output-format json`` (older versions print a list of messages ending in it).
    Lines printed around it (an update notice, a wrapper script's echo) are passed over: else the raw JSON,
    escapes and all, would be taken for the model's reply and its usage and ``is_error`` ignored."""
    whole = _json_result(stdout)
    if whole is not None:
        return whole
    for line in reversed(stdout.splitlines()):
        found = _json_result(line) if line.lstrip().startswith(("{", "[")) else None
        if found is not None and found.get("type") == "result":
            return found
    return None


def _json_result(text: str) -> dict[str, Any] | None:
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    if isinstance(payload, list):
        results = [item for item in payload if isinstance(item, dict) and item.get("type") == "result"]
        return results[-1] if results else None
    return payload if isinstance(payload, dict) else None
