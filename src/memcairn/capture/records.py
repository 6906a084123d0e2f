"""What the compressors read and write: a turn (one prompt and the tool calls made for it) in, observations
and a summary out. Every compressor (the offline extractor, each LLM backend) speaks these types, so the
pipeline can swap one for another when a model fails or a token cap is reached."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# The fixed concept vocabulary (the seed's): what kind of knowledge an observation holds.
CONCEPTS: tuple[str, ...] = (
    "how-it-works", "why-it-exists", "what-changed", "problem-solution", "gotcha", "pattern", "trade-off",
)


@dataclass(frozen=True)
class ToolCall:
    """One tool use as the agent reported it (``PostToolUse``): input and response as sent, already scrubbed
    of private parts and secrets. ``narration`` is what the agent wrote right before the call (its text since
    the previous call: why it makes this call, what it concluded from the last one), when known."""

    name: str
    input: Any = None
    response: Any = None
    tool_use_id: str | None = None
    at_epoch: int = 0  # milliseconds
    cwd: str | None = None
    narration: str | None = None


@dataclass(frozen=True)
class Turn:
    """One prompt of a session. ``tools`` holds the turn's earlier tool calls, oldest first (the latest
    ``turns.TURN_CONTEXT_CALLS``); ``narration`` the agent's text before each call of the whole turn, in
    order (bounded), so a summary reads the turn's reasoning even when ``tools`` holds only its tail."""

    session_id: str
    platform_source: str
    project: str
    prompt: str | None = None
    prompt_number: int | None = None
    cwd: str | None = None
    tools: tuple[ToolCall, ...] = ()
    last_assistant_message: str | None = None
    started_at_epoch: int = 0
    narration: tuple[str, ...] = ()


@dataclass(frozen=True)
class Observation:
    """One observation in the seed's structure; ``type`` is one of ``models.OBSERVATION_TYPES``."""

    type: str
    title: str
    subtitle: str | None = None
    narrative: str | None = None
    facts: tuple[str, ...] = ()
    concepts: tuple[str, ...] = ()
    files_read: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()  # ids of the tool calls it covers (an episode's provenance), when known


@dataclass(frozen=True)
class Summary:
    """A turn's summary in the seed's sections."""

    request: str | None = None
    investigated: str | None = None
    learned: str | None = None
    completed: str | None = None
    next_steps: str | None = None
    notes: str | None = None
    files_read: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()


@dataclass(frozen=True)
class Usage:
    """Tokens one model call consumed, as the backend reported them (or estimated as chars/4)."""

    backend: str
    model: str
    input_tokens: int
    output_tokens: int


@dataclass
class Compressed:
    """What a compressor produced for one call, with the usage it cost (empty for the offline extractor)."""

    observations: list[Observation] = field(default_factory=list)
    summary: Summary | None = None
    usage: list[Usage] = field(default_factory=list)
    fallback_reason: str | None = None  # set when the offline extractor stood in for a failed model


class CompressionFailed(Exception):
    """A compressor could not produce a result. ``reason`` is one of: prose (an answer that is not the XML
    asked for), refusal, quota (rate limit, overloaded, out of credit), auth, budget (a token cap is reached),
    timeout, error (anything else). The pipeline falls back to the offline extractor and keeps the reason."""

    REASONS = ("prose", "refusal", "quota", "auth", "budget", "timeout", "error")

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason if reason in self.REASONS else "error"
        self.detail = detail


class Compressor(Protocol):
    """Turns tool calls into observations and a finished turn into a summary."""

    name: str

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        """Observations for ``calls`` (new calls of ``turn``; ``turn.tools`` gives the turn so far)."""
        ...

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        """The summary of a finished turn (``turn.last_assistant_message`` set when the agent sent one)."""
        ...


class UsageLedger(Protocol):
    """Where model calls record what they cost and check the caps before spending more."""

    def tokens_spent(self, *, session_id: str | None = None, since_epoch: int | None = None) -> int: ...

    def record_usage(self, usage: Usage, session_id: str | None) -> None: ...
