"""``LlmCompressor``: a model behind one of the clients, within the session and daily token caps.

Before a call the ledger says what was spent (by this session, and by all sessions since local midnight);
a reached cap fails with reason ``budget`` before anything is sent. After a call its usage is recorded, also
when the reply turns out unusable, since the tokens were spent all the same.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from memcairn.capture.llm.clients import AnthropicClient, ClaudeCliClient, LlmClient, OpenAIClient, ReplyFailed
from memcairn.capture.llm.prompt import observe_messages, summary_messages
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
from memcairn.config import Settings
from memcairn.errors import ConfigError

OBSERVE_MAX_TOKENS = 4096
SUMMARY_MAX_TOKENS = 2048
BACKENDS: tuple[str, ...] = ("offline", "anthropic", "claude-cli", "openai")


def local_day_start_ms(now: float | None = None) -> int:
    """Epoch milliseconds of the last local midnight (the daily cap's window)."""
    moment = datetime.fromtimestamp(time.time() if now is None else now).astimezone()
    midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return int(midnight.timestamp() * 1000)


class LlmCompressor:
    """The ``Compressor`` protocol over an ``LlmClient``. A cap of zero or less means no cap."""

    def __init__(self, client: LlmClient, ledger: UsageLedger, settings: Settings,
                 backend_name: str | None = None) -> None:
        self.client = client
        self.ledger = ledger
        self.settings = settings
        self.name = backend_name or client.name

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

    def _call(self, session_id: str, system: str, user: str, max_tokens: int) -> tuple[str, Usage]:
        self.check_budget(session_id)
        try:
            reply, usage = self.client.complete(system, user, max_tokens)
        except ReplyFailed as exc:
            if exc.usage is not None:
                self.ledger.record_usage(exc.usage, session_id)
            raise
        self.ledger.record_usage(usage, session_id)
        return reply, usage


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
