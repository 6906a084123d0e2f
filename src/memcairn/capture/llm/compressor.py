"""``LlmCompressor``: a model behind one of the clients, within the session and daily token caps.

Before a call the ledger says what was spent (by this session, and by all sessions since local midnight);
a reached cap fails with reason ``budget`` before anything is sent. After a call its usage is recorded, also
when the reply turns out unusable, since the tokens were spent all the same.

A call that timed out, was rate limited, refused its key or met a server error (HTTP 5xx), could not reach
the server, or found no ``claude`` executable to run, pauses the model for a while (the server's
``Retry-After`` when it sent one): the calls meanwhile fail at once with the same reason, so the queue falls
back to the offline extractor instead of waiting out a timeout per batch, hammering a server that said no or
is down, or failing to start the same missing program once per batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from memcairn.capture.llm.api_clients import AnthropicClient, OpenAIClient
from memcairn.capture.llm.claude_cli import ClaudeCliClient
from memcairn.capture.llm.prompt import observe_messages, summary_messages
from memcairn.capture.llm.transport import ClientUnavailable, LlmClient, ReplyFailed, ServerFailed
from memcairn.capture.llm.xmlparse import parse_observations, parse_summary
from memcairn.capture.records import (
    Compressed,
    CompressionFailed,
    Compressor,
    Observation,
    Summary,
    ToolCall,
    Turn,
    Usage,
    UsageLedger,
)
from memcairn.core.errors import ConfigError
from memcairn.wire.config import Settings

OBSERVE_MAX_TOKENS = 4096
SUMMARY_MAX_TOKENS = 2048
BACKENDS: tuple[str, ...] = ("offline", "anthropic", "claude-cli", "openai")
PAUSE_REASONS = frozenset({"timeout", "quota", "auth"})
PAUSE_SECONDS = 60.0  # without a Retry-After
MAX_PAUSE_SECONDS = 900.0


def local_day_start_ms(now: float | None = None) -> int:
    """Epoch milliseconds of the last local midnight (the daily cap's window)."""
    moment = datetime.fromtimestamp(time.time() if now is None else now).astimezone()
    midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return int(midnight.timestamp() * 1000)


class LlmCompressor:
    """The ``Compressor`` protocol over an ``LlmClient``. A cap of zero or less means no cap."""

    def __init__(self, client: LlmClient, ledger: UsageLedger, settings: Settings,
                 backend_name: str | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.ledger = ledger
        self.settings = settings
        self.name = backend_name or client.name
        self.clock = clock
        self._paused_until = 0.0
        self._pause_cause: CompressionFailed | None = None

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        if not calls:
            return Compressed()
        system, user = observe_messages(turn, calls, self.settings.capture_max_tool_chars)
        reply, usage = self._call(turn.session_id, system, user, OBSERVE_MAX_TOKENS)
        return Compressed(observations=parse_observations(reply), usage=[usage])

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        system, user = summary_messages(turn, observations, self.settings.capture_max_tool_chars)
        reply, usage = self._call(turn.session_id, system, user, SUMMARY_MAX_TOKENS)
        summary = parse_summary(reply)
        if summary is not None and not (summary.files_read or summary.files_modified):
            summary = _with_files(summary, observations)
        return Compressed(summary=summary, usage=[usage])

    def check_budget(self, session_id: str) -> None:
        """Raise ``CompressionFailed("budget")`` when this session or today has spent its tokens."""
        session_cap = self.settings.llm_session_token_cap
        if session_cap > 0:
            spent = self.ledger.tokens_spent(session_id=session_id)
            if spent >= session_cap:
                raise CompressionFailed(
                    "budget", f"session token cap reached: {spent} of llm_session_token_cap {session_cap} spent")
        daily_cap = self.settings.llm_daily_token_cap
        if daily_cap > 0:
            spent = self.ledger.tokens_spent(since_epoch=local_day_start_ms())
            if spent >= daily_cap:
                raise CompressionFailed(
                    "budget", f"daily token cap reached: {spent} of llm_daily_token_cap {daily_cap} spent today")

    def check_pause(self) -> None:
        """Raise the failure that paused the model while the pause lasts, without calling it."""
        cause = self._pause_cause
        remaining = self._paused_until - self.clock()
        if cause is not None and remaining > 0:
            raise CompressionFailed(cause.reason, f"not calling the model for {remaining:.0f} s more after: "
                                                  f"{cause.detail}")

    def _pause_after(self, failure: CompressionFailed) -> None:
        if not pauses(failure):
            return
        asked = failure.retry_after if isinstance(failure, ServerFailed) else None
        seconds = min(asked if asked is not None else PAUSE_SECONDS, MAX_PAUSE_SECONDS)
        self._paused_until = self.clock() + seconds
        self._pause_cause = failure

    def _call(self, session_id: str, system: str, user: str, max_tokens: int) -> tuple[str, Usage]:
        self.check_budget(session_id)
        self.check_pause()
        try:
            reply, usage = self.client.complete(system, user, max_tokens)
        except ReplyFailed as exc:
            if exc.usage is not None:
                self.ledger.record_usage(exc.usage, session_id)
            self._pause_after(exc)
            raise
        except CompressionFailed as exc:
            self._pause_after(exc)
            raise
        self.ledger.record_usage(usage, session_id)
        return reply, usage


def pauses(failure: CompressionFailed) -> bool:
    """Whether ``failure`` pauses the model: a reason in ``PAUSE_REASONS``, a server error (HTTP 5xx, whose
    reason stays ``error``: the server is down or broken, not out of quota), or a transport that cannot be used
    at all (no ``claude`` executable). A plain ``error`` (a 4xx, an unreadable answer, a crash of the CLI) does
    not: the next batch may well succeed."""
    if failure.reason in PAUSE_REASONS or isinstance(failure, ClientUnavailable):
        return True
    return isinstance(failure, ServerFailed) and failure.server_error


def _with_files(summary: Summary, observations: Sequence[Observation]) -> Summary:
    """``summary`` with the files its turn's observations read and modified, when the model listed none."""
    read = tuple(dict.fromkeys(path for obs in observations for path in obs.files_read))
    modified = tuple(dict.fromkeys(path for obs in observations for path in obs.files_modified))
    return replace(summary, files_read=read, files_modified=modified)


def make_compressor(settings: Settings, ledger: UsageLedger) -> Compressor | None:
    """The compressor ``capture_backend`` names; ``None`` for ``offline`` (the pipeline's own extractor).

    Raises:
        ConfigError: the backend is unknown, or its settings cannot work (openai without ``llm_base_url``).
    """
    backend = settings.capture_backend.strip().lower()
    if backend in ("", "offline"):
        return None
    if backend == "anthropic":
        client: LlmClient = AnthropicClient(settings)
    elif backend == "openai":
        client = OpenAIClient(settings)
    elif backend == "claude-cli":
        client = ClaudeCliClient(settings)
    else:
        raise ConfigError(
            f"capture_backend {settings.capture_backend!r} is unknown; use one of: {', '.join(BACKENDS)}")
    return LlmCompressor(client, ledger, settings, backend)
