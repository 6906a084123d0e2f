"""The ingest use case: a hook's event checked, its narration read, admitted (exclusions, privacy) and queued.

One path for the ingest routes and the spool drainer, so a spooled event is refused, skipped or queued exactly
as the route would have done it. Checks fail with ``ValidationError``: the routes answer 400, the drainer sets
the event aside. Blocking (it reads transcripts and writes the store): run it off the event loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from memcairn.capture.admission import admit, skipped_tool
from memcairn.core.errors import ValidationError
from memcairn.core.models import CONTROL_CHARACTER
from memcairn.store.protocols import LocalStore
from memcairn.transfer.transcript_tail import narration_before
from memcairn.wire.config import Settings
from memcairn.wire.protocol import (
    DELIVERED_FIELD,
    EVENT_KEY_FIELD,
    INIT_PATH,
    OBSERVATIONS_PATH,
    ROUTE_EVENT_TYPES,
    SUMMARIZE_PATH,
)
from memcairn.worker.fields import field, parse_json, text_field

log = logging.getLogger("memcairn.worker")

# Fields of hook events that must be text when present (the rest of a payload is kept as sent).
TEXT_PAYLOAD_FIELDS = ("prompt", "last_assistant_message", "tool_name", "transcript_path", "narration")
# route -> (event type, fields it requires)
INGEST_ROUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    INIT_PATH: (ROUTE_EVENT_TYPES[INIT_PATH], ()),
    OBSERVATIONS_PATH: (ROUTE_EVENT_TYPES[OBSERVATIONS_PATH], ("tool_name",)),
    SUMMARIZE_PATH: (ROUTE_EVENT_TYPES[SUMMARIZE_PATH], ()),
}


@dataclass(frozen=True)
class IngestFields:
    session_id: str
    platform: str
    tool_use_id: str | None
    event_key: str | None


def ingest_fields(data: dict[str, Any], required: tuple[str, ...]) -> IngestFields:
    """The checks of an ingest body (a request's or a spooled one's)."""
    session_id = text_field(data, "session_id", "contentSessionId", required=True, max_chars=200,
                            hint=": the agent's session id")
    project = text_field(data, "project", max_chars=200)
    cwd = text_field(data, "cwd", max_chars=4096)
    if project is None and cwd is None:
        raise ValidationError("project or cwd is required: the project name, or the directory the agent runs in")
    for name in required:
        text_field(data, name, required=True, max_chars=200)
    for name in TEXT_PAYLOAD_FIELDS:
        field(data, name)
    platform = text_field(data, "platform_source", "platformSource", max_chars=100, blank_ok=True) or "unknown"
    tool_use_id = text_field(data, "tool_use_id", "toolUseId", max_chars=200, blank_ok=True)
    event_key = text_field(data, EVENT_KEY_FIELD, max_chars=100, blank_ok=True)
    prompt_number = field(data, "prompt_number", kind=int, what="a whole number")
    field(data, DELIVERED_FIELD, kind=bool, what="true or false")  # read by earlier_session_start
    if prompt_number is not None and not 0 <= prompt_number <= 1_000_000:
        raise ValidationError("prompt_number must be between 0 and 1000000")
    return IngestFields(session_id or "", platform, tool_use_id, event_key)


def with_narration(event_type: str, data: dict[str, Any], tool_use_id: str | None,
                   settings: Settings) -> dict[str, Any]:
    """A tool event's body with the agent's text before the call (``narration``) read from its transcript when
    the hook did not send it (``capture.transcript_tail``: bounded, and None on any trouble). Read before
    admission, so the text is scrubbed like the rest of the body; calls that are never observed (housekeeping)
    are read through."""
    path = data.get("transcript_path")
    if event_type != "observation" or data.get("narration") is not None or not tool_use_id \
            or not isinstance(path, str) or data.get("event") not in (None, "tool_use"):
        return data
    try:
        said = narration_before(path, tool_use_id, unobserved=lambda name: skipped_tool(name, settings))
    except Exception:  # the event matters more than its narration
        log.warning("could not read the narration of %s from %s", tool_use_id, path, exc_info=True)
        return data
    return {**data, "narration": said} if said else data


def queue_event(store: LocalStore, settings: Settings, event_type: str, data: dict[str, Any],
                fields: IngestFields) -> dict[str, Any]:
    """Admit and queue one checked event: the ingest routes' answer body."""
    check_project_names(store, [data.get("project"), *_chain(data)])
    admitted = admit(event_type, data, settings)
    if admitted.body is None:
        return {"status": "skipped", "reason": admitted.reason}
    event_id, created = store.enqueue_ingest_event(
        fields.session_id, fields.platform, event_type, admitted.body, fields.tool_use_id,
        event_key=fields.event_key)
    return {"status": "accepted", "event_id": event_id, "duplicate": not created}


def accept_event(store: LocalStore, settings: Settings, event_type: str, data: dict[str, Any],
                 fields: IngestFields) -> dict[str, Any]:
    """A checked event's narration read, then admitted and queued."""
    return queue_event(store, settings, event_type,
                       with_narration(event_type, data, fields.tool_use_id, settings), fields)


def accept_spooled(store: LocalStore, settings: Settings, route: str, body: bytes) -> dict[str, Any]:
    """A spooled event (an ingest route's body), checked, admitted and queued as the route would."""
    if route not in INGEST_ROUTES:
        raise ValidationError(f"{route} is not an ingest route")
    event_type, required = INGEST_ROUTES[route]
    data = parse_json(body)
    return accept_event(store, settings, event_type, data, ingest_fields(data, required))


def _chain(data: dict[str, Any]) -> list[Any]:
    chain = data.get("projects")
    return chain if isinstance(chain, list) else []


def check_project_names(store: LocalStore, names: list[Any]) -> None:
    """Refuse a project name holding a control character (NUL, a newline...) as ``Store.add_items`` would,
    before the event is queued: accepted here, it would fail later, when its memories are stored. A name an
    earlier release stored keeps working, as it does for ``add_items``."""
    odd = [n.strip() for n in names if isinstance(n, str) and CONTROL_CHARACTER.search(n.strip())]
    if not odd:
        return
    known = {name for _, name in store.resolve_projects(odd)}
    for name in odd:
        if name not in known:
            raise ValidationError(f"project name {name!r} contains a control character (a newline, tab or NUL...); "
                                  "use printable text")
