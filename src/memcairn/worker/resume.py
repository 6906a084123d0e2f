"""A resumed session's context: one line instead of the whole digest when nothing changed since its start."""

from __future__ import annotations

from memcairn.core.clock import now_ms
from memcairn.store.protocols import LocalStore

RESUMED = "resumed"  # the CONTEXT_HEADER value of RESUMED_NOTE
RESUMED_NOTE = ("memcairn: no new memories since this session started; its memory context is earlier in this "
                "conversation.")
RESUME_GRACE_MS = 30_000
# The SessionStart event is recorded after its context was rendered (the hook sends it once the context
# arrived; older hooks sent both together): what was stored this long before the recorded start counts as new
# (a full context, never a missing memory).
RESUME_SLACK_MS = 10_000


def unchanged_since_start(store: LocalStore, projects: list[str] | None, agent: str, session: str,
                          hook_started: int | None = None) -> bool:
    """A resumed Claude Code session replays the context its start was given; when nothing was stored, edited
    or deleted since that start (but by the session itself, whose work is in its conversation), giving it
    again only doubles it. Only starts whose context reached the agent count (``Store.earlier_session_start``):
    a start whose context request failed left nothing in the transcript to replay. The current resume's own
    SessionStart event is sent after this request by hooks that say when they started (``hook_started``): only
    events from before that count, so a resume right after the start is told too. An older hook may send its
    event beside this request: without ``hook_started``, events of the last ``RESUME_GRACE_MS`` do not count."""
    now = now_ms()
    before = min(hook_started, now) if hook_started is not None else now - RESUME_GRACE_MS
    started = store.earlier_session_start(agent, session, before_epoch=before)
    return started is not None and not store.stored_since(projects, started - RESUME_SLACK_MS,
                                                          besides_session=(agent, session))
